"""Source of the lane form of the in-block scan of ``_cpu.py`` (which holds the driver).

A tile of ``L * SL`` elements is cut into ``L`` contiguous lanes that are
scanned in one interleaved loop, so the CPU has ``L`` independent
dependency chains in flight instead of one; the carries into lanes 1.. are
then chained and those lanes fixed up in a vectorizable loop.  One scalar
combine per element per lane.  ``_cpu_tile.py``'s tree, which runs its
combines on whole vectors, replaced it where it is faster: elements of at
most 4 bytes and arity at most 2.  With float64 elements (4 to a 256-bit
vector) and with four components the tree's two combines per element and
its shuffles lost: in cache on one thread of a 2-core AMD EPYC (``znver2``),
2^15 elements, ``add`` float64 1.13 ns an element with the tree against 0.67
with the lanes, the linear recurrence 5.0 against 3.1, ``matmul2x2``
float64 13.2 against 8.4 (``matmul2x2`` float32 7.0 against 7.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._cpu_tile import total_source


def lanes_for(arity: int) -> int:
    """Interleaved lanes per thread: about 8 dependency chains in flight."""
    return max(2, 8 // arity)


def lane_lines(
    k: int,
    rev: bool,
    excl: bool,
    w: Callable[[str], None],
    prefetch: bool = False,
    keep: Sequence[int] = (),
) -> None:
    """The tile loop of ``_block`` (inside it, after ``nt = (hi - lo) // TILE``).

    ``prefetch``: each lane prefetches its place in the next tile once per
    cache line (``PFM + 1`` elements).  It paid for 4-byte elements and cost
    for 8-byte ones: on one thread of the 2-core AMD EPYC (znver2), CPU time
    per element at 2^22 (2^21 for float64), float32 linear recurrence 2.07
    -> 1.65 ns, ``add`` 0.69 -> 0.65, ``max`` 1.41-1.46 -> 1.37-1.38, but
    float64 linear recurrence 2.33-2.45 -> 2.79-3.20 and float64 ``add``
    0.92-1.00 -> 1.18-1.19.

    ``keep``: the components stored to the outputs (all when empty).  The
    fix-up of lanes 1.. reads every component of their elements back (the
    linear recurrence's ``h`` needs ``A``), so the others go to a scratch
    array of one tile per component (``w<c>``, allocated once per call),
    addressed in the direction of the outputs; it stays in the L1 and L2
    caches, and lane 0, which is never fixed up, does not store them.
    """
    L = lanes_for(k)
    kept = list(keep) or list(range(k))
    scratch = [c for c in range(k) if c not in kept]

    def j_(names: Sequence[str]) -> str:
        return ", ".join(names)

    def unpack(names: Sequence[str]) -> str:
        return j_(names) + ","

    C = [f"c{i}" for i in range(k)]
    E = [f"e{i}" for i in range(k)]
    XU = [f"x{i}[u]" for i in range(k)]
    OU = [f"o{i}[u]" for i in range(k)]
    R = [f"r{i}" for i in range(k)]

    def idx(off: str) -> str:
        return f"ub - np.uintp({off})" if rev else f"ub + np.uintp({off})"

    def sidx(off: str) -> str:
        # the scratch index of logical tile position ``off``: ascending with ``u``
        return f"np.uintp(TILE - 1 - ({off}))" if rev else f"np.uintp({off})"

    def store(indent: str, st: Sequence[str], off: str | None = None) -> None:
        # ``off``: the logical position, for the unkept components (lanes 1..)
        sts = [f"{OU[c]} = {st[c]}" for c in kept]
        if off is not None:
            sts += [f"w{c}[{sidx(off)}] = {st[c]}" for c in scratch]
        w(indent + "; ".join(sts))

    def comp(c: str, off: str) -> str:
        # component ``c`` of a stored element at logical position ``off``
        return f"w{c}[{sidx(off)}]" if int(c) in scratch else f"o{c}[u]"

    lanes = [[f"s{j}_{i}" for i in range(k)] for j in range(L)]
    for c in scratch:
        w(f"    w{c} = np.empty(TILE if nt > 0 else 0, DT)")
    w("    for t in range(nt):")
    w("        b = lo + t * TILE")
    w("        ub = np.uintp(N - 1 - b) if rev else np.uintp(b)")
    w(f"        {unpack(lanes[0])} = {unpack(C)}")
    for j in range(1, L):
        w(f"        {unpack(lanes[j])} = {unpack(E)}")
    # the first element of each lane: lanes 1.. always start fresh, lane 0 when
    # no carry has been seen
    for j in range(L):
        w(f"        u = {idx(f'{j}*SL')}")
        at = f"{j}*SL" if j else None
        if excl:
            store("        ", lanes[j], at)
        if j == 0:
            w("        if fresh:")
            w(f"            {unpack(lanes[0])} = {unpack(XU)}")
            w("        else:")
            w(f"            {unpack(lanes[0])} = comb({j_(lanes[0] + XU)})")
        else:
            w(f"        {unpack(lanes[j])} = {unpack(XU)}")
        if not excl:
            store("        ", lanes[j], at)
    w("        fresh = False")
    w("        for i in range(1, SL):")
    if prefetch:
        # the same place of each lane in the next tile, once per cache line
        # (_cpu_prefetch.py); the outputs too where an element has several
        # components (float32 add ran no faster with them)
        w("            if (i & PFM) == 0:")
        for j in range(L):
            w(f"                p = {idx(f'{j}*SL + i + TILE')}")
            w("                " + "; ".join(f"prefetch_read(x{c}, p)" for c in range(k)))
            if k > 1:
                w("                " + "; ".join(f"prefetch_write(o{c}, p)" for c in kept))
    for j in range(L):
        w(f"            u = {idx(f'{j}*SL + i')}")
        at = f"{j}*SL + i" if j else None
        if excl:
            store("            ", lanes[j], at)
        w(f"            {unpack(lanes[j])} = comb({j_(lanes[j] + XU)})")
        if not excl:
            store("            ", lanes[j], at)
    # carries into lanes 1.., then a vectorizable fix-up of those lanes (an
    # exclusive lane's first output is its carry itself)
    kk = [[f"k{j}_{i}" for i in range(k)] for j in range(L)]
    w(f"        {unpack(kk[1])} = {unpack(lanes[0])}")
    for j in range(2, L):
        w(f"        {unpack(kk[j])} = comb({j_(kk[j - 1] + lanes[j - 1])})")
    w(f"        {unpack(C)} = comb({j_(kk[L - 1] + lanes[L - 1])})")
    for j in range(1, L):
        first = 1 if excl else 0
        if excl:
            w(f"        u = {idx(f'{j}*SL')}")
            store("        ", kk[j])
        # logical offsets j*SL + first .. j*SL + SL - 1, in physical order
        w(f"        for i in range(SL - {first}):")
        off = f"{j}*SL + SL - 1 - i" if rev else f"{j}*SL + {first} + i"
        w(f"            u = {idx(off)}")
        got = [comp(str(c), off) for c in range(k)]
        w(f"            {unpack(R)} = comb({j_(kk[j] + got)})")
        store("            ", R)


def lane_total_lines(k: int, rev: bool, nt: int) -> list[str]:
    """Lines of ``_tile_total(x.., wa.., wb.., b, N, c.., fresh)`` for lane-form tiles.

    The carry combined with the ``TILE`` elements from logical position
    ``b``: the tree totals (``_cpu_tile.total_source``, reading the input
    and storing nothing but its levels in the scratch ``wa``, ``wb``) of the
    ``TILE // nt`` trees of ``nt`` elements the tile holds, then its last
    ``TILE % nt`` elements in order.  ``_cpu_tile.reduce_then_scan_source``
    calls it for the scans that leave outputs out.  The lanes reduced in
    one interleaved loop, storing nothing, measured the same with the
    processor's flush bit (CPU time per element on one thread of the 2-core
    AMD EPYC, ``znver2``, float32 linear recurrence: 0.55 ns against 0.56 at
    2^22, 0.41 against 0.42 at 2^16; float64 1.01 against 1.02 and 0.63
    both) and slower while the flush to zero ran in code (float32 at 2^22
    1.20 ns against 0.63), bound by one scalar combine per element.
    """
    j_ = ", ".join
    X = [f"x{i}" for i in range(k)]
    C = [f"c{i}" for i in range(k)]
    W = [f"wa{i}" for i in range(k)] + [f"wb{i}" for i in range(k)]
    XU = [f"x{i}[u]" for i in range(k)]
    lines = [
        line.replace("def _tile_total(", "def _tree_total(") for line in total_source(k, rev, nt)
    ]
    w = lines.append
    w("@numba.njit(nogil=True, cache=CACHE, fastmath=FM)")
    w(f"def _tile_total({j_(X)}, {j_(W)}, b, N, {j_(C)}, fresh):")
    w(f"    for s in range(TILE // {nt}):")
    w(f"        {j_(C)}, = _tree_total({j_(X)}, {j_(W)}, b + s * {nt}, N, {j_(C)}, fresh)")
    w("        fresh = False")
    w(f"    for l in range(b + TILE // {nt} * {nt}, b + TILE):")
    w("        u = np.uintp(N - 1 - l)" if rev else "        u = np.uintp(l)")
    w(f"        {j_(C)}, = comb({j_(C + XU)})")
    w(f"    return ({j_(C)},)")
    w("")
    return lines
