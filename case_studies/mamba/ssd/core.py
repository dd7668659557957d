"""``ssd_scan``: Mamba-2's chunked state-space-duality scan (mamba_ssm's semantics).

Methods:

* ``'fused'``: BLAS GEMMs for the chunk states and their outputs (all heads
  at once), numba kernels for the rest, the intra-chunk products in
  explicit vector code (:mod:`._host`, :mod:`._cpu`, :mod:`._tile`);
* ``'ops'``: the same three phases in torch operations (explicit mask),
  differentiable by autograd and usable on any torch device (:mod:`._torch`);
* ``'reference'``: the recurrence token by token (:mod:`._reference`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from propopt import dispatch
from propopt.arrays import PLACES, flag, shown

from .. import _checks
from .._compute import compute_dtype, needs_grad
from . import _cpu, _host, _nonfinite, _reference

SsdMethod = Literal["auto", "fused", "ops", "reference"]


def ssd_scan(
    x: Any,
    dt: Any,
    A: Any,
    B: Any,
    C: Any,
    chunk_size: int,
    D: Any = None,
    z: Any = None,
    dt_bias: Any = None,
    initial_states: Any = None,
    seq_idx: Any = None,
    cu_seqlens: Any = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    *,
    method: SsdMethod = "auto",
    device: Literal["auto", "cpu", "cuda"] = "auto",
) -> Any:
    r"""Mamba-2's selective scan by state-space duality (mamba_ssm ``mamba_chunk_scan_combined``).

    For each batch row, head ``h`` (in group ``g = h // (nheads / ngroups)``),
    head channel ``p`` and state ``n``, with
    ``dt = clamp(softplus(dt + dt_bias), *dt_limit)`` (softplus if asked)::

        s_t[p, n] = exp(dt_t A[h]) s_{t-1}[p, n] + dt_t x_t[p] B_t[g, n]
        y_t[p]    = (sum_n C_t[g, n] s_t[p, n] + D x_t[p]) * silu(z_t[p])

    with ``s_{-1} = initial_states`` and ``s = 0`` at the start of each packed
    sequence.  Equivalently ``y = (L o C B^T) (dt x)`` per head, with the
    semiseparable mask ``L[t, s] = exp(dt_{s+1} A + ... + dt_t A)``:

    * **associativity** cuts the sequence into chunks of ``chunk_size``:
      each chunk's end state from zero, a scan of the chunk states with the
      linear-recurrence monoid ``(a1, S1) . (a2, S2) = (a1 a2, a2 S1 + S2)``,
      and each chunk finished from its carry (the three-phase scan);
    * **separability** makes the chunk work matrix products: the states and
      their outputs are GEMMs shared by all heads (``B^T (w o X)``,
      ``C H``), and inside a chunk ``L`` factors through any token between
      ``s`` and ``t``, ``L[t, s] = L[t, r] L[r, s]``, so the per-head
      intra-chunk product reads ``C B^T`` as it is with one ``exp`` per
      token and tile of rows (``method='fused'``).

    Parameters
    ----------
    x : array (batch, seqlen, nheads, headdim)
    dt : array (batch, seqlen, nheads)
    A : array (nheads,)
        Mamba-2 uses ``A = -exp(A_log) < 0``.  With positive ``A`` the state
        grows like ``exp(dt A t)`` and overflows.
    B, C : array (batch, seqlen, ngroups, dstate)
        ``ngroups`` divides ``nheads``.
    chunk_size : int
        Tokens per chunk: the cost/accuracy-neutral knob (the result does not
        depend on it beyond rounding).  Work is ``O(seqlen chunk_size)`` per
        head for the chunks and ``O(seqlen headdim dstate)`` for the states.
        ``method='fused'`` takes it as an upper bound and uses chunks of at most
        ``_host.CPU_CHUNK`` (64) tokens, its fastest (see docs/mamba.md).
    D : array (nheads,) or (nheads, headdim), optional
        Skip connection ``D x``.
    z : array like ``x``, optional
        Gate: the output is multiplied by ``silu(z)``.
    dt_bias : array (nheads,), optional
    initial_states : array (batch, nheads, headdim, dstate), optional
        The state before the first token.  With ``seq_idx`` it belongs to the
        sequence numbered 0, as in mamba_ssm: it is dropped when
        ``seq_idx[b, 0] != 0``.
    seq_idx : integer array (batch, seqlen), optional
        Packed sequences: the state resets to zero at every token whose
        ``seq_idx`` differs from the previous token's (and at token 0 unless
        ``seq_idx[b, 0] == 0``).
    cu_seqlens : integer array (nseq + 1,), optional
        Packed sequences of one row (batch 1): sequence ``i`` is tokens
        ``cu_seqlens[i] .. cu_seqlens[i + 1] - 1``.  Gives ``seq_idx`` when that
        is omitted (mamba_ssm only reads it for ``return_varlen_states``); if
        both are given they must agree.
    dt_softplus : bool
        Apply ``softplus`` to ``dt + dt_bias`` (the identity above 20).
    dt_limit : (float, float)
        ``dt`` is clamped to this interval after the softplus, as in
        mamba_ssm's kernel (the default clamps negative ``dt`` to 0).
    return_final_states : bool
        Also return the state after the last token, (batch, nheads, headdim,
        dstate), in the compute dtype (float32, or float64 for float64 ``x``).
    return_varlen_states : bool
        Also return each packed sequence's state after its last token,
        (nseq, nheads, headdim, dstate) (zeros for an empty sequence); needs
        ``cu_seqlens``.
    method : {'auto', 'fused', 'ops', 'reference'}
        The algorithm.  ``'fused'``: propopt's compiled CPU kernels, each
        chunk's steps fused in one pass over its tokens (no gradients).
        ``'ops'``: the same chunked algorithm in torch tensor ops, on CPU or
        CUDA tensors (differentiable).  ``'reference'``: the token-by-token
        recurrence the tests trust.  ``'auto'``: ``'ops'`` for CUDA tensors
        or when a tensor requires grad, else ``'fused'``.  The spellings
        ``'cpu'`` (now ``'fused'``) and ``'torch'`` (now ``'ops'``) still
        work, with a ``DeprecationWarning``.
    device : {'auto', 'cpu', 'cuda'}
        Where it runs: where the arrays are (``'auto'``); any other value
        must name that place.

    Returns
    -------
    out : array like ``x`` (its dtype); then ``final_states`` and
    ``varlen_states`` if asked, in mamba_ssm's order.

    Notes
    -----
    ``method='fused'`` works in ``O(seqlen (chunk_size / 2 + 2 dstate) nheads
    headdim)`` multiply-adds (the states' two GEMMs and the intra-chunk
    triangle) and ``O(seqlen / chunk_size nheads headdim dstate)`` extra
    memory for the chunk states.  Decays ``exp(dt_{s+1} A + ... + dt_t A)``
    below 2^-64 (float32; 2^-512 in float64) are taken as 0
    (``_cpu.DECAY_FLOOR``: subnormal numbers slow the products ten-fold).
    float32 results agree with a float64 recurrence to within 1e-6 of
    ``max |y|``.  An inf or nan in the inputs gives the recurrence's infs and nans:
    it reaches no earlier token and no other packed sequence, forward or
    backward (each (row, head, sequence) that holds one is recomputed token
    by token, at the cost of ``method='reference'`` for that sequence; see
    ``_nonfinite``).  A decay ``exp(dt A)`` that is exactly 0 (``dt A``
    below -746 in float64: ``A = -inf``, or a float32 ``A = -1e38`` whose
    float32 ``dt A`` would overflow) cuts the head's run, as in the recurrence.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.mamba import ssd_scan
    >>> rng = np.random.default_rng(0)
    >>> x, dt = rng.normal(size=(1, 100, 4, 8)), rng.uniform(0.01, 0.2, (1, 100, 4))
    >>> A, (B, C) = -np.exp(rng.normal(size=4)), rng.normal(size=(2, 1, 100, 1, 16))
    >>> y, last = ssd_scan(x, dt, A, B, C, chunk_size=32, return_final_states=True)
    >>> ref = ssd_scan(x, dt, A, B, C, chunk_size=32, method="reference")
    >>> y.shape, last.shape, bool(np.allclose(y, ref))
    ((1, 100, 4, 8), (1, 4, 8, 16), True)

    References
    ----------
    T. Dao and A. Gu, "Transformers are SSMs: Generalized Models and Efficient
    Algorithms Through Structured State Space Duality", ICML 2024 (the SSD
    algorithm, section 6; ``mamba_chunk_scan_combined`` of
    github.com/state-spaces/mamba).
    """
    method, device = dispatch.method_device("ssd_scan", method, device, BACKENDS, OLD_METHODS)
    dt_softplus = flag("dt_softplus", dt_softplus)
    return_final_states = flag("return_final_states", return_final_states)
    return_varlen_states = flag("return_varlen_states", return_varlen_states)
    named = _checks.native(dict(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
                                initial_states=initial_states))  # fmt: skip
    kind = _checks.check_arrays(named)
    x, dt, A, B, C, D, z, dt_bias, initial_states = named.values()
    nb, L = _check_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states)[:2]
    Q = min(_check_chunk(chunk_size), max(L, 1))  # a chunk longer than the sequence is the sequence
    lo, hi = _check_limit(dt_limit)
    starts, cu = _checks.packing(seq_idx, cu_seqlens, nb, L, kind, x)
    if return_varlen_states and cu is None:
        raise ValueError("return_varlen_states=True needs cu_seqlens (the packed sequences' "
                         "boundaries)")  # fmt: skip
    grad = kind != "numpy" and needs_grad(named.values())
    cdt = compute_dtype(kind, x.dtype)
    plan = _Plan(
        args={k: None if v is None else _cast(v, cdt, kind) for k, v in named.items()},
        chunk=Q,
        flags=dict(softplus=dt_softplus, dt_limit=(lo, hi)),
        starts=starts,
        state_cu=cu if return_varlen_states else None,  # the sequences whose states are returned
        kind=kind,
        needs_grad=grad,
    )
    name = dispatch.choose_on(BACKENDS, method, device, plan, PLACES[kind], AUTO,
                              {("ops", "cpu"): _auto_ops}, "x, dt, ...")  # fmt: skip
    assert name is not None  # 'ops' takes every tensor, 'fused' every NumPy plan
    if L == 0:
        y, final, varlen = _empty(plan.args, kind, plan.state_cu)
    else:
        y, final, varlen = BACKENDS[name].run(plan)
    y = y.astype(x.dtype, copy=False) if kind == "numpy" else y.to(x.dtype)
    res = [y]
    if return_final_states:
        res.append(final)
    if return_varlen_states:
        res.append(varlen)
    return res[0] if len(res) == 1 else tuple(res)


# ------------------------------------------------------------------ backends
@dataclass
class _Plan:
    """A checked SSD scan in its compute dtype: what every backend of :data:`BACKENDS` runs."""

    args: dict[str, Any]
    chunk: int
    flags: dict[str, Any]
    starts: Any
    state_cu: Any
    kind: str
    needs_grad: bool


def _refuse_fused(p: _Plan) -> Exception | None:
    if p.needs_grad:
        return ValueError("method='fused' computes no gradients; use method='ops' (or 'auto') "
                          "for tensors that require grad, or detach them")  # fmt: skip
    return None


def _refuse_ops(p: _Plan) -> Exception | None:
    if p.kind == "numpy":
        return ValueError("method='ops' needs torch tensors; use method='fused' for numpy arrays")
    return None


def _auto_ops(p: _Plan) -> Exception | None:
    """'auto' runs torch ops on the CPU for gradients; the CPU kernels otherwise."""
    if p.needs_grad:
        return None
    return ValueError("the CPU kernels take this plan")


def _backend_cpu(p: _Plan) -> tuple[Any, Any, Any]:
    return _run_cpu(p.args, p.chunk, p.flags, p.starts, p.state_cu, p.kind)


def _backend_torch(p: _Plan) -> tuple[Any, Any, Any]:
    from . import _torch

    a = p.args
    f = p.flags
    y, final, varlen, bad = _torch.forward(
        a["x"], a["dt"], a["A"], a["B"], a["C"], p.chunk, a["D"], a["z"], a["dt_bias"],
        f["softplus"], f["dt_limit"], a["initial_states"], p.starts, p.state_cu)  # fmt: skip
    bad = bad | _nonfinite.nonfinite_outputs(y, final, varlen, p.state_cu)
    return _nonfinite.repair(y, final, varlen, bad, a, starts=p.starts, cu=p.state_cu,
                                 **p.flags)  # fmt: skip


def _backend_reference(p: _Plan) -> tuple[Any, Any, Any]:
    a, f = p.args, p.flags
    return _reference.ssd_reference(  # type: ignore[no-any-return]
        a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
        f["softplus"], f["dt_limit"], a["initial_states"], p.starts, p.state_cu)  # fmt: skip


BACKENDS: dict[tuple[str, str], dispatch.Backend[_Plan, tuple[Any, Any, Any]]] = {
    ("ops", "cpu"): dispatch.Backend(_refuse_ops, _backend_torch),
    ("ops", "cuda"): dispatch.Backend(_refuse_ops, _backend_torch),
    ("fused", "cpu"): dispatch.Backend(_refuse_fused, _backend_cpu),
    **dispatch.on_devices("reference", _backend_reference),
}
"""Every backend of :func:`ssd_scan` by its ``(method, device)``."""

AUTO: tuple[tuple[str, str], ...] = (("ops", "cuda"), ("ops", "cpu"), ("fused", "cpu"))
"""``method='auto'``: the first of these on the arrays' device that accepts (torch ops on
CPU tensors only for gradients: ``_auto_ops``)."""

SSD_METHODS: tuple[str, ...] = ("auto", *dict.fromkeys(m for m, _ in BACKENDS))

#: the retired ``method=`` spellings, and what they now are
OLD_METHODS: dict[str, tuple[str, str]] = {"cpu": ("fused", "cpu"), "torch": ("ops", "auto")}


# ------------------------------------------------------------------ helpers
def _check_shapes(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, dt_bias: Any,
                  initial_states: Any) -> tuple[int, ...]:  # fmt: skip
    bg: tuple[_checks.Layout, ...] = (
        (("batch", "seqlen", "ngroups", "dstate"), "(batch, seqlen, ngroups, dstate)"),
    )
    heads: tuple[_checks.Layout, ...] = (
        (("nheads",), "(nheads,)"),
        (("nheads", "headdim"), "(nheads, headdim)"),
    )
    x4: tuple[_checks.Layout, ...] = (
        (("batch", "seqlen", "nheads", "headdim"), "(batch, seqlen, nheads, headdim)"),
    )
    size = _checks.agree([
        ("x", x, x4),
        ("dt", dt, ((("batch", "seqlen", "nheads"), "(batch, seqlen, nheads)"),)),
        ("A", A, ((("nheads",), "(nheads,): one A per head"),)),
        ("B", B, bg),
        ("C", C, bg),
        ("D", D, heads),
        ("z", z, x4),
        ("dt_bias", dt_bias, ((("nheads",), "(nheads,)"),)),
        ("initial_states", initial_states,
         ((("batch", "nheads", "headdim", "dstate"), "(batch, nheads, headdim, dstate)"),)),
    ])  # fmt: skip
    nb, L, H, P, G, N = (size[d] for d in ("batch", "seqlen", "nheads", "headdim", "ngroups",
                                           "dstate"))  # fmt: skip
    if H < 1 or P < 1:
        raise ValueError(f"x has shape {tuple(x.shape)}; nheads and headdim must be >= 1")
    if G < 1 or H % G or N < 1:
        raise ValueError(f"B has shape {tuple(B.shape)}: ngroups={G} must divide nheads={H} "
                         f"and dstate={N} must be >= 1")  # fmt: skip
    return nb, L, H, P, G, N


def _check_chunk(chunk_size: Any) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
        raise TypeError(f"chunk_size must be an int, got {shown(chunk_size)}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size}, must be >= 1 (64 is fastest on CPU)")
    return int(chunk_size)


def _check_limit(dt_limit: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in dt_limit)
    except (TypeError, ValueError):
        raise ValueError(f"dt_limit={dt_limit!r}; expected a pair (low, high) of floats, "
                         "e.g. (0.0, inf)") from None  # fmt: skip
    if not lo <= hi:
        raise ValueError(f"dt_limit={dt_limit!r}: low must be <= high")
    return lo, hi


def _cast(v: Any, cdt: Any, kind: str) -> Any:
    return v.astype(cdt, copy=False) if kind == "numpy" else v.to(cdt)


def _empty(args: dict[str, Any], kind: str, cu: Any) -> tuple[Any, Any, Any]:
    """seqlen 0: an empty output; the final state is the initial one; no sequence has a state."""
    x, B = args["x"], args["B"]
    shape = (x.shape[0], x.shape[2], x.shape[3], B.shape[3])
    nseq = 0 if cu is None else len(cu) - 1
    if kind == "numpy":
        zeros = lambda s: np.zeros(s, x.dtype)  # noqa: E731
    else:
        zeros = x.new_zeros
    final = args["initial_states"]
    return x * 0, zeros(shape) if final is None else final, zeros((nseq, *shape[1:]))


def _run_cpu(args: dict[str, Any], Q: int, flags: dict[str, Any], starts: Any, cu: Any,
             kind: str) -> tuple[Any, Any, Any]:  # fmt: skip
    a = {k: None if v is None else (v.detach().numpy() if kind == "torch" else v)
         for k, v in args.items()}  # fmt: skip
    st = starts if kind == "numpy" else starts.cpu().numpy()
    y, final, varlen, clean = _host_forward(a, Q, flags, st, cu)
    if not clean:  # an inf or nan: keep it in its sequence (see _nonfinite)
        dtp = _nonfinite.processed_dt(a["dt"], a["dt_bias"], **flags)
        bad = _nonfinite.bad_tokens(a["x"], dtp, a["A"], a["B"], a["C"],
                                        a["initial_states"], st)  # fmt: skip
        fix = ("x", "B", "C", "initial_states")
        zeroed = {k: _nonfinite.finite_or_zero(a[k]) for k in fix}
        if any(zeroed[k] is not a[k] for k in zeroed):  # (prep already zeroes dt and dt A)
            y, final, varlen, _ = _host_forward(dict(a, **zeroed), Q, flags, st, cu)
        bad |= _nonfinite.nonfinite_outputs(y, final, varlen, cu)
        y, final, varlen = _nonfinite.repair(y, final, varlen, bad, a, starts=st, cu=cu,
                                                 **flags)  # fmt: skip
    if kind == "torch":
        import torch

        varlen = None if varlen is None else torch.from_numpy(varlen)
        return torch.from_numpy(y), torch.from_numpy(final), varlen
    return y, final, varlen


def _host_forward(a: dict[str, Any], Q: int, flags: dict[str, Any], st: np.ndarray,
                  cu: Any) -> tuple[Any, Any, Any, bool]:  # fmt: skip
    Q = min(Q, _host.CPU_CHUNK)
    x = np.ascontiguousarray(a["x"])
    T = x.dtype
    H, P = x.shape[2], x.shape[3]
    Dv = None
    if a["D"] is not None:
        Dv = np.ascontiguousarray(np.broadcast_to(a["D"][:, None] if a["D"].ndim == 1 else a["D"],
                                                  (H, P)))  # fmt: skip
    h0 = a["initial_states"]
    h0 = None if h0 is None else np.ascontiguousarray(h0)
    bias = np.zeros(H, T) if a["dt_bias"] is None else np.ascontiguousarray(a["dt_bias"])
    return _host.forward(
        x, np.ascontiguousarray(a["dt"]), np.ascontiguousarray(a["A"]),
        np.ascontiguousarray(a["B"]), np.ascontiguousarray(a["C"]), Q, Dv,
        None if a["z"] is None else np.ascontiguousarray(a["z"]), bias, flags["softplus"],
        flags["dt_limit"], h0, np.ascontiguousarray(st, dtype=np.uint8),
        cu)  # fmt: skip


def phase_times(fn: Any, rounds: int = 3) -> dict[str, float]:
    """Median seconds per kernel and GEMM group of one call of ``fn`` (benchmarks).

    ``fn`` runs :func:`ssd_scan` (``method='fused'``); its numba kernels and its GEMMs are
    wrapped with timers for the calls, then restored.
    """
    names = ("prep", "pass_states", "finish")
    acc: dict[str, list[float]] = {}
    cur: dict[str, float] = {}
    saved = {n: getattr(_cpu, n) for n in names}
    saved_mm = _host._matmul

    def wrap(name: str, f: Any) -> Any:
        def g(*a: Any) -> Any:
            t0 = time.perf_counter()
            r = f(*a)
            cur[name] = cur.get(name, 0.0) + time.perf_counter() - t0
            return r

        return g

    try:
        for n in names:
            setattr(_cpu, n, wrap(n, saved[n]))
        _host._matmul = wrap("GEMMs", saved_mm)
        fn()
        for _ in range(rounds):
            cur.clear()
            t0 = time.perf_counter()
            fn()
            cur["total"] = time.perf_counter() - t0
            for k, v in cur.items():
                acc.setdefault(k, []).append(v)
    finally:
        for n in names:
            setattr(_cpu, n, saved[n])
        _host._matmul = saved_mm
    return {k: float(np.median(v)) for k, v in acc.items()}


gemm_profile = _host.gemm_profile
"""Record ``(seconds, flops)`` of every GEMM :func:`ssd_scan` issues inside the block."""
GEMM_BACKEND = _host.GEMM_BACKEND
