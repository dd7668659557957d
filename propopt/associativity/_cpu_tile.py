"""Source of the in-block scan of ``_cpu.py`` (which holds the driver): one tile, scanned as a tree.

A tile of ``NT`` elements (a power of two) is scanned in the work-efficient
way of Blelloch's scan, with the levels kept apart so that every loop is a
plain counted loop over contiguous memory that LLVM vectorizes to the
machine's SIMD width:

* *up*: level 1 holds ``c(x[2j], x[2j+1])``, level 2 the combined pairs of
  level 1, and so on down to ``BASE`` elements (pairs are read as two
  interleaved streams, which LLVM de-interleaves with shuffles);
* the ``BASE`` elements of the last level are scanned sequentially;
* *down*: each level's odd positions take the scanned level below, its even
  positions ``c(scanned[j-1], own[2j])``; level 0 is written to the output.

About two combines per element instead of one, but each runs on a vector
of elements, where the sequential form is bound by the latency of one
combine per element.  The incoming carry is folded into the tile's first
element, so the tile needs no pass of its own to apply it, and its last
output is the carry for the next tile.

Tried and dropped: Hillis-Steele shifts inside rows of 8 elements (log2 8
combines per element, and the per-row carry did not vectorize: float32
linear recurrence 45 ms against 9 ms for this tree at 2^22 on one thread).
"""

from __future__ import annotations

from collections.abc import Sequence


def levels(nt: int, base: int) -> int:
    """Up levels of a tile of ``nt`` elements down to ``base`` elements."""
    m = 0
    while (nt >> m) > base:
        m += 1
    return m


def tile_source(
    k: int,
    rev: bool,
    excl: bool,
    nt: int,
    keep: Sequence[int] = (),
    base: int = 16,
    total_only: bool = False,
) -> list[str]:
    """Lines of ``_tile(x.., o.., wa.., wb.., e.., b, N, c.., fresh)``: scan ``[b, b + nt)``.

    ``wa``, ``wb``, ``e``: scratch arrays of ``nt`` elements.  Level ``l``
    lives at offset ``nt - (nt >> (l - 1))`` of ``wa`` (odd ``l``) or ``wb``
    (even ``l``), so that each loop reads one array and writes another: LLVM
    vectorizes a loop whose stores may alias its loads only behind a runtime
    check of distinct arrays.  The down passes write the combined even
    positions to ``e`` first and interleave them in a loop per component:
    one loop with both strided stores was left scalar.  Returns the
    combine of the carry and the tile's elements.  ``fresh``: no carry yet,
    the first element is taken as it is (as ``_block`` does).  ``keep``: the
    components written to the output (all when empty); the others are
    computed in the tree and never stored.
    """
    m = levels(nt, base)
    kept = list(keep) or list(range(k))
    X = [f"x{i}" for i in range(k)]
    O_ = [f"o{i}" for i in range(k)]
    WA = [f"wa{i}" for i in range(k)]
    WB = [f"wb{i}" for i in range(k)]
    E = [f"e{i}" for i in range(k)]
    C = [f"c{i}" for i in range(k)]
    R = [f"r{i}" for i in range(k)]
    T = [f"t{i}" for i in range(k)]
    j_ = ", ".join

    def lev(lv: int) -> list[str]:
        return WA if lv % 2 else WB

    def off(lv: int) -> int:
        return nt - (nt >> (lv - 1))

    def at(arrs: Sequence[str], ix: str) -> list[str]:
        return [f"{a}[{ix}]" for a in arrs]

    def phys(o: str) -> str:
        return f"ub - ({o})" if rev else f"ub + ({o})"

    lines: list[str] = []
    w = lines.append

    def comb_into(
        ind: str, dst: list[str], a: list[str], b: list[str], only: Sequence[int] = ()
    ) -> None:
        w(f"{ind}{j_(R)}, = comb({j_(a + b)})")
        comps = list(only) or list(range(k))
        w(ind + "; ".join(f"{dst[c]} = {R[c]}" for c in comps))

    w("@numba.njit(nogil=True, cache=CACHE, fastmath=FM)")
    if total_only:
        w(f"def _tile_total({j_(X)}, {j_(WA)}, {j_(WB)}, b, N, {j_(C)}, fresh):")
    else:
        w(f"def _tile({j_(X)}, {j_(O_)}, {j_(WA)}, {j_(WB)}, {j_(E)}, b, N, {j_(C)}, fresh):")
    w("    one = np.uintp(1); two = np.uintp(2)")
    w("    ub = np.uintp(N - 1 - b)" if rev else "    ub = np.uintp(b)")
    w("    u = " + phys("np.uintp(0)"))
    w("    if fresh:")
    w(f"        {j_(T)}, = {j_(at(X, 'u'))},")
    w("    else:")
    w(f"        {j_(T)}, = comb({j_(C + at(X, 'u'))})")
    # level 1 from the input; its first pair starts from the carried element
    w("    u = " + phys("one"))
    comb_into("    ", at(WA, "0"), T, at(X, "u"))
    w(f"    for j in range(one, np.uintp({nt // 2})):")
    w("        u = " + phys("two * j"))
    w("        v = " + phys("two * j + one"))
    comb_into("        ", at(WA, "j"), at(X, "u"), at(X, "v"))
    # up: level l (nt >> l elements) to level l + 1
    for lv in range(1, m):
        po, qo = off(lv), off(lv + 1)
        w(f"    for j in range(np.uintp({nt >> (lv + 1)})):")
        w(f"        i = np.uintp({po}) + two * j; q = np.uintp({qo}) + j")
        comb_into("        ", at(lev(lv + 1), "q"), at(lev(lv), "i"), at(lev(lv), "i + one"))
    # the last level, sequentially
    qo, ql = off(m), lev(m)
    w(f"    for j in range(np.uintp({qo + 1}), np.uintp({qo + (nt >> m)})):")
    comb_into("        ", at(ql, "j"), at(ql, "j - one"), at(ql, "j"))
    if total_only:
        w(f"    return ({j_(at(ql, str(qo + (nt >> m) - 1)))},)")
        w("")
        return lines

    def interleave(
        dst: str, idx_even: str, idx_odd: str, even: str, odd: str, n: int, comps: list[int]
    ) -> None:
        for c in comps:
            w(f"    for j in range(one, np.uintp({n})):")
            w(f"        {dst}{c}[{idx_even}] = {even.format(c=c)}")
            w(f"        {dst}{c}[{idx_odd}] = {odd.format(c=c)}")

    # down: level l + 1 (scanned) into level l
    for lv in range(m - 1, 0, -1):
        po, qo = off(lv), off(lv + 1)
        P, Q = lev(lv), lev(lv + 1)
        h = nt >> (lv + 1)
        w(f"    for j in range(one, np.uintp({h})):")
        w(f"        i = np.uintp({po}) + two * j; q = np.uintp({qo}) + j")
        comb_into("        ", at(E, "j"), at(Q, "q - one"), at(P, "i"))
        pn, qn = P[0][:-1], Q[0][:-1]
        interleave(
            pn,
            f"np.uintp({po}) + two * j",
            f"np.uintp({po}) + two * j + one",
            "e{c}[j]",
            qn + "{c}[np.uintp(" + str(qo) + ") + j]",
            h,
            list(range(k)),
        )
        w("    " + "; ".join(f"{a} = {b}" for a, b in zip(at(P, f"{po + 1}"), at(Q, f"{qo}"))))
    # level 0, into the output
    h = nt // 2
    w(f"    for j in range(one, np.uintp({h})):")
    w("        u = " + phys("two * j"))
    comb_into("        ", at(E, "j"), at(WA, "j - one"), at(X, "u"), kept)
    w("    u = " + phys("np.uintp(0)"))
    w("    v = " + phys("one"))
    first, second = (C, T) if excl else (T, at(WA, "0"))
    w("    " + "; ".join(f"{O_[c]}[u] = {first[c]}" for c in kept))
    w("    " + "; ".join(f"{O_[c]}[v] = {second[c]}" for c in kept))
    even, odd = ("wa{c}[j - one]", "e{c}[j]") if excl else ("e{c}[j]", "wa{c}[j]")
    interleave("o", phys("two * j"), phys("two * j + one"), even, odd, h, kept)
    w(f"    return ({j_(at(WA, f'{h - 1}'))},)")
    w("")
    return lines


def total_source(k: int, rev: bool, nt: int, base: int = 16) -> list[str]:
    """Lines of ``_tile_total(x.., wa.., wb.., b, N, c.., fresh)``: the carry combined with
    the tile's elements, by the up passes of :func:`tile_source` alone (no output)."""
    return tile_source(k, rev, False, nt, (), base, total_only=True)


def reduce_then_scan_source(
    k: int, nt: int, rev: bool, kept: Sequence[int], total: Sequence[str] | None = None
) -> list[str]:
    """Lines of ``_reduce`` and of ``scan_1d`` for scans that write only components ``kept``.

    The usual ``scan_1d`` scans each thread's block from the identity and
    fixes it up from its carry afterwards, which needs every component of
    the block's prefixes (the linear recurrence's ``h`` needs ``A``).  Here
    threads 1.. first reduce their blocks to totals (the up passes alone,
    reading the input and writing nothing) and scan them from their carries
    in the next parallel region, while the block is still in the L2/L3
    cache; thread 0 scans its block from the running carry at once.
    ``total``: the lines of ``_tile_total`` where the tiles are not this
    module's trees (the lanes' ``_cpu_lanes.lane_total_lines``).
    """
    X = [f"x{i}" for i in range(k)]
    O_ = [f"o{i}" for i in range(k)]
    E = [f"e{i}" for i in range(k)]
    C = [f"c{i}" for i in range(k)]
    I_ = [f"i{i}" for i in range(k)]
    W = [f"wa{i}" for i in range(k)] + [f"wb{i}" for i in range(k)]
    XU = [f"x{i}[u]" for i in range(k)]
    j_ = ", ".join
    del kept  # the kept components are baked into _block
    lines = list(total) if total is not None else total_source(k, rev, nt)
    w = lines.append
    w("@numba.njit(nogil=True, cache=CACHE, fastmath=FM)")
    w(f"def _reduce({j_(X)}, lo, hi, N, rev, {j_(E)}):")
    w("    # the total of logical [lo, hi) (the identity placeholder when empty)")
    w(f"    {j_(C)}, = {j_(E)},")
    w("    fresh = True")
    w("    nt = (hi - lo) // TILE")
    w("    if nt > 0:")
    w("        " + "; ".join(f"{s} = np.empty(TILE, DT)" for s in W))
    w("        for t in range(nt):")
    w(f"            {j_(C)}, = _tile_total({j_(X)}, {j_(W)}, lo + t * TILE, N, {j_(C)}, fresh)")
    w("            fresh = False")
    w("    for l in range(lo + nt * TILE, hi):")
    w("        u = np.uintp(N - 1 - l if rev else l)")
    w("        if fresh:")
    w(f"            {j_(C)}, = {j_(XU)},")
    w("            fresh = False")
    w("        else:")
    w(f"            {j_(C)}, = comb({j_(C + XU)})")
    w(f"    return ({j_(C)},)")
    w("")
    tot = [f"tot{i}" for i in range(k)]
    car = [f"car{i}" for i in range(k)]
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    w(f"def scan_1d({j_(X)}, {j_(O_)}, rev, excl, T, BK, B0, {j_(E)}, {j_(I_)}, fresh):")
    w("    N = x0.shape[0]")
    for t_, k_ in zip(tot, car):
        w(f"    {t_} = np.empty(T, DT); {k_} = np.empty(T, DT)")
    w(f"    {j_(C)}, = {j_(I_)},")
    w("    SB = B0 + (T - 1) * BK")
    w("    nsb = (N + SB - 1) // SB")
    w("    for b in range(nsb + 1):")
    w("        s0 = b * SB")
    w("        for t in prange(T):")
    w("            if b > 0 and t > 0:")
    w("                # scan this thread's block of the previous super-block from its carry")
    w("                plo = min(s0 - SB + B0 + (t - 1) * BK, N)")
    w(
        f"                _block({j_(X)}, {j_(O_)}, plo, min(plo + BK, N), N, rev, excl, "
        f"{j_(c + '[t]' for c in car)}, {j_(E)}, np.bool_(False))"
    )
    w("            lo = min(s0 + (0 if t == 0 else B0 + (t - 1) * BK), N)")
    w("            hi = min(lo + (B0 if t == 0 else BK), N)")
    w("            if b < nsb:")
    w("                if t == 0:")
    w(
        f"                    r = _block({j_(X)}, {j_(O_)}, lo, hi, N, rev, excl, {j_(C)}, "
        f"{j_(E)}, fresh and b == 0)"
    )
    w("                else:")
    w(f"                    r = _reduce({j_(X)}, lo, hi, N, rev, {j_(E)})")
    w("                " + "; ".join(f"{t_}[t] = r[{i}]" for i, t_ in enumerate(tot)))
    w("        if b < nsb:")
    w("            " + "; ".join(f"c{i} = tot{i}[0]" for i in range(k)))
    w("            for t in range(1, T):")
    w("                " + "; ".join(f"{k_}[t] = {c}" for k_, c in zip(car, C)))
    w(f"                {j_(C)}, = combs({j_(C + [t_ + '[t]' for t_ in tot])})")
    w("")
    return lines
