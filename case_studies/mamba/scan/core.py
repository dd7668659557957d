"""``selective_scan``, ``step`` and ``chapter_scan``: the public verbs of the case study.

Semantics are those of mamba_ssm's ``selective_scan_fn`` /
``selective_scan_ref`` (layout (batch, dim, L)), computed by one of

* ``'cpu'``: the fused numba kernel (:mod:`._cpu`), differentiable through
  :class:`._autograd.SelectiveScanFn` when a torch tensor requires grad;
* ``'parallel'``: :func:`propopt.associative_scan` with
  :data:`propopt.linear_recurrence` on (batch, dim, L, d_state) arrays
  (the chapter's derivation; torch autograd differentiates it);
* ``'cuda'``: the numba.cuda kernel, for torch CUDA tensors (forward);
* ``'reference'``: a sequential loop over tokens (:mod:`.._reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from propopt import dispatch
from propopt.arrays import PLACES, array_module, flag

from .. import _checks, _reference
from .._compute import compute_dtype, needs_grad
from . import _complex, _host, _parallel

Method = Literal["auto", "fused", "parallel", "reference"]
Device = Literal["auto", "cpu", "cuda"]

#: The arguments of :func:`selective_scan` that may be complex (S4D-Lin).
COMPLEX_ARGS = ("A", "B", "C", "initial_state")


def selective_scan(
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    delta_bias: Any = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    initial_state: Any = None,
    seq_idx: Any = None,
    cu_seqlens: Any = None,
    *,
    method: Method = "auto",
    device: Device = "auto",
) -> Any:
    r"""Mamba's selective scan (mamba_ssm ``selective_scan_fn`` semantics), on CPU or CUDA.

    For each batch ``b``, channel ``d`` and state ``n``, with
    ``dt = softplus(delta + delta_bias)`` (or ``delta + delta_bias``)::

        h_t[n]  = exp(dt_t A[d, n]) h_{t-1}[n] + dt_t B_t[n] u_t      (h_{-1} = initial_state)
        out_t   = (sum_n C_t[n] h_t[n] + D[d] u_t) * silu(z_t)

    The recurrence is a composition of affine maps ``h -> a h + b``, which is
    associative: ``(a1, b1) . (a2, b2) = (a1 a2, a2 b1 + b2)``.  The parallel
    path scans these maps; the fused CPU and CUDA kernels instead keep the
    d_state numbers of ``h`` in registers and stream over the tokens.

    Parameters
    ----------
    u, delta : array (batch, dim, L)
        Input and time steps.  numpy arrays or torch tensors (CPU or CUDA),
        float16, bfloat16, float32 or float64; half precisions are computed
        in float32 and returned in their own dtype.
    A : array (dim, d_state)
        State matrix (diagonal per channel).  Mamba uses ``A = -exp(A_log) < 0``,
        so ``exp(dt A) <= 1``; with positive ``A`` the state grows as
        ``exp(dt A t)`` and overflows for long sequences.  Complex (S4D-Lin)
        for methods 'fused' on the CPU, 'parallel' and 'reference': see Notes.
    B, C : array
        ``(dim, d_state)`` shared by all tokens, ``(batch, d_state, L)`` per
        token, or ``(batch, groups, d_state, L)`` with channel ``d`` in group
        ``d // (dim // groups)``.  With complex ``A``, per-token ones hold
        (real, imag) pairs: ``(batch, [groups,] d_state, 2 L)``, real.
    D : array (dim,), optional
        Skip connection ``D * u``.
    z : array (batch, dim, L), optional
        Gate: the output is multiplied by ``silu(z) = z sigmoid(z)``.
    delta_bias : array (dim,), optional
        Added to ``delta`` before the softplus.
    delta_softplus : bool
        Apply ``softplus(x) = log(1 + e^x)`` (``x`` itself above 20, as mamba_ssm).
    return_last_state : bool
        Also return ``h_{L-1}``, shape (batch, dim, d_state), in the compute
        dtype (float32, or float64 for float64 inputs; complex64 or complex128
        for complex ``A``).  Differentiable.
    initial_state : array (batch, dim, d_state), optional
        ``h_{-1}`` (zeros if omitted), for chunked processing; differentiable.
        With ``seq_idx`` it belongs to the sequence numbered 0 (dropped when
        ``seq_idx[b, 0] != 0``), as in :func:`ssd_scan`.
    seq_idx : integer array (batch, L), optional
        Packed sequences, with mamba_ssm's meaning (as :func:`ssd_scan`): the
        state resets to zero before every token whose ``seq_idx`` differs
        from the previous token's (and before token 0 unless
        ``seq_idx[b, 0] == 0``), so each sequence gives exactly what it gives
        alone, forward and backward.
    cu_seqlens : integer array (nseq + 1,), optional
        Packed sequences of one row (batch 1): sequence ``i`` is tokens
        ``cu_seqlens[i] .. cu_seqlens[i + 1] - 1``; if ``seq_idx`` is also
        given they must agree.
    method : {'auto', 'fused', 'parallel', 'reference'}
        The algorithm.  ``'fused'``: propopt's compiled kernels, sequential
        in time and parallel over channels, with every step fused in one pass
        (numba threads on the CPU, one CUDA kernel for the forward on the
        GPU).  ``'parallel'``: the associative scan of the affine maps in
        array ops (differentiable by torch).  ``'reference'``: the sequential
        loop the tests trust.  ``'auto'``: ``'fused'``, except ``'parallel'``
        for CUDA tensors that require grad or are complex.  The spellings
        ``'cpu'`` and ``'cuda'`` (now ``'fused'`` on that device) still work,
        with a ``DeprecationWarning``.
    device : {'auto', 'cpu', 'cuda'}
        Where it runs: where the arrays are (``'auto'``); any other value
        must name that place.

    Returns
    -------
    out : array (batch, dim, L), dtype of ``u``; and the last state if asked.

    Notes
    -----
    Work ``O(batch dim L d_state)``.  The CPU kernel reads each input once
    and writes the output once; its extra memory is ``O(batch dim d_state)``
    (``O(batch dim L d_state / 64)`` checkpoints when differentiating).  In
    float32, ``exp`` is a polynomial accurate to 1.5 ulp (:mod:`._exp`), and
    the result agrees with a float64 scan to about 1e-6 relative to its
    largest magnitude.  NaN and inf propagate.

    Complex ``A`` (S4D-Lin) follows mamba_ssm's ``selective_scan_ref``: the
    state ``h`` is complex, ``exp(dt A)`` and ``dt B_t u_t`` are complex, and
    the output is ``2 Re(sum_n C_t[n] h_t[n]) + D u_t`` (gated by ``z``).  A
    per-token ``B`` or ``C`` is real with (real, imag) pairs on its last
    axis, ``B_t[n] = B[..., n, 2t] + 1j B[..., n, 2t+1]`` (a complex one is
    refused; ``torch.view_as_real(B).flatten(-2)`` gives the pairs); a shared
    ``(dim, d_state)`` one is complex, or real for a zero imaginary part.
    ``initial_state`` may be complex; ``u``, ``delta``, ``D``, ``z`` and
    ``delta_bias`` are real.  Computed in complex64 (complex128 for float64
    ``u``); gradients of complex inputs are ``dL/dRe + i dL/dIm`` (torch's
    convention).  ``'cpu'`` runs a numba kernel (:mod:`._complex`), forward
    and backward; the CUDA kernel is real only, so ``'auto'`` takes
    ``'parallel'`` for complex CUDA tensors and ``'cuda'`` refuses them.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.mamba import selective_scan
    >>> rng = np.random.default_rng(0)
    >>> u, delta = rng.normal(size=(1, 4, 8)), rng.uniform(0.1, 1, (1, 4, 8))
    >>> A, B, C = -np.exp(rng.normal(size=(4, 2))), rng.normal(size=(1, 2, 8)), np.ones((4, 2))
    >>> out, h = selective_scan(u, delta, A, B, C, return_last_state=True)
    >>> ref = selective_scan(u, delta, A, B, C, method="reference")
    >>> out.shape, h.shape, bool(np.allclose(out, ref))
    ((1, 4, 8), (1, 4, 2), True)

    References
    ----------
    A. Gu and T. Dao, "Mamba: Linear-Time Sequence Modeling with Selective
    State Spaces", 2023 (Algorithm 2 and the ``selective_scan_ref`` of
    github.com/state-spaces/mamba).
    """
    softplus = flag("delta_softplus", delta_softplus)
    return_last_state = flag("return_last_state", return_last_state)
    out, last = _dispatch(u, delta, A, B, C, D, z, delta_bias, softplus, initial_state,
                          (method, device), scale_b=True,
                          packed=(seq_idx, cu_seqlens))  # fmt: skip
    return (out, last) if return_last_state else out


def chapter_scan(x: Any, A: Any, B: Any, C: Any, delta: Any, *, method: Method = "auto",
                 device: Device = "auto") -> Any:  # fmt: skip
    """The chapter's ``mamba_scan_naive`` (same layout and meaning), computed fast.

    ``x``, ``delta``: (batch, L, d_model); ``A``: (d_model, d_state); ``B``,
    ``C``: (batch, L, d_state).  ``h_t = exp(delta_t A) h_{t-1} + B_t x_t`` and
    ``y_t = C_t . h_t``: unlike :func:`selective_scan`, ``B`` is not scaled by
    ``delta``.  Returns ``y`` of shape (batch, L, d_model).  The CPU kernel
    reads the (batch, L, d_model) arrays in place.  ``method`` and ``device``
    as for :func:`selective_scan`.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.mamba import chapter_scan
    >>> x, delta = np.ones((1, 3, 2)), np.full((1, 3, 2), 0.5)
    >>> A, B, C = -np.ones((2, 1)), np.ones((1, 3, 1)), np.ones((1, 3, 1))
    >>> chapter_scan(x, A, B, C, delta)[0, :, 0].round(4).tolist()
    [1.0, 1.6065, 1.9744]
    """
    # checked here, in the caller's names and layout: the scan sees them transposed
    named = _checks.native(dict(x=x, A=A, B=B, C=C, delta=delta))
    _checks.check_arrays(named)
    x, A, B, C, delta = named.values()
    for name, v in (("x", x), ("delta", delta), ("B", B), ("C", C)):
        if v.ndim != 3:
            raise ValueError(
                f"{name} has shape {tuple(v.shape)}; expected 3 dimensions "
                "(batch, L, d_model) for x and delta, (batch, L, d_state) for B and C"
            )
    bld: tuple[_checks.Layout, ...] = ((("batch", "L", "d_model"), "(batch, L, d_model)"),)
    bln: tuple[_checks.Layout, ...] = ((("batch", "L", "d_state"), "(batch, L, d_state)"),)
    size = _checks.agree([
        ("x", x, bld),
        ("delta", delta, bld),
        ("A", A, ((("d_model", "d_state"), "(d_model, d_state)"),)),
        ("B", B, bln),
        ("C", C, bln),
    ])  # fmt: skip
    if size["d_state"] < 1:
        raise ValueError(f"A has shape {tuple(A.shape)}; d_state must be >= 1")
    xs, ds, Bs, Cs = (_swap_last_two(v) for v in (x, delta, B, C))
    out, _ = _dispatch(xs, ds, A, Bs, Cs, None, None, None, False, None, (method, device),
                       scale_b=False)  # fmt: skip
    return _swap_last_two(out)


def _swap_last_two(v: Any) -> Any:
    """(batch, L, d) <-> (batch, d, L): a view, for NumPy arrays and torch tensors."""
    return array_module(v).swapaxes(v, 1, 2)


@dataclass
class _Plan:
    """A checked selective scan: what every backend of :data:`BACKENDS` receives."""

    named: dict[str, Any]
    kind: str
    cplx: bool
    needs_grad: bool
    softplus: bool
    scale_b: bool
    starts: np.ndarray | None


def _refuse_cuda(p: _Plan) -> Exception | None:
    if p.cplx:
        return _checks.complex_cuda_error(p.named)
    if p.needs_grad:
        return ValueError("method='fused' computes the forward only on CUDA; for gradients "
                          "on CUDA tensors use method='parallel' (or 'auto')")  # fmt: skip
    return None


def _starts_on(p: _Plan) -> Any:
    """The sequence starts on the arrays' device (None: one sequence per row)."""
    if p.starts is None or p.kind == "numpy":
        return p.starts
    import torch

    return torch.from_numpy(p.starts).to(p.named["u"].device)


def _run_cpu(p: _Plan) -> tuple[Any, Any]:
    if p.cplx:
        args = _to_compute(p.named, p.kind, complex_A=True)
        if p.kind == "torch" and p.needs_grad:
            from ._autograd import ComplexScanFn

            return ComplexScanFn.apply(  # type: ignore[no-any-return]
                *(args[k] for k in _complex.NAMES), p.softplus, p.starts
            )
        if p.kind == "torch":
            import torch

            arrs = {k: None if v is None else v.detach().numpy() for k, v in args.items()}
            out, last = _complex.scan_numpy(arrs, p.softplus, p.starts)
            return torch.from_numpy(out), torch.from_numpy(last)
        return _complex.scan_numpy(args, p.softplus, p.starts)
    if p.kind == "torch" and p.needs_grad:
        from ._autograd import SelectiveScanFn

        n = p.named
        return SelectiveScanFn.apply(  # type: ignore[no-any-return]
            n["u"], n["delta"], n["A"], n["B"], n["C"], n["D"], n["z"], n["delta_bias"],
            n["initial_state"], p.softplus, p.scale_b, p.starts,
        )  # fmt: skip
    args = _to_compute(p.named, p.kind)
    return _cpu_numpy(args, p.softplus, p.scale_b, p.kind, p.starts)


_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _run_cuda(p: _Plan) -> tuple[Any, Any]:
    from ._cuda import scan_torch

    args = _to_compute(p.named, p.kind)
    return scan_torch(*(args[k] for k in _ARGS), p.softplus, args["initial_state"], p.scale_b,
                      _starts_on(p))  # fmt: skip


def _run_parallel(p: _Plan) -> tuple[Any, Any]:
    args = _to_compute(p.named, p.kind, complex_A=p.cplx)
    scale_b = True if p.cplx else p.scale_b
    return _parallel.scan(*(args[k] for k in _ARGS), p.softplus, args["initial_state"], scale_b,
                          _starts_on(p))  # fmt: skip


def _run_reference(p: _Plan) -> tuple[Any, Any]:
    args = _to_compute(p.named, p.kind, complex_A=p.cplx)
    if p.cplx:
        return _reference.reference(**args, delta_softplus=p.softplus, starts=_starts_on(p))
    return _reference.reference(**args, delta_softplus=p.softplus, scale_b=p.scale_b,
                                starts=_starts_on(p))  # fmt: skip


BACKENDS: dict[tuple[str, str], dispatch.Backend[_Plan, tuple[Any, Any]]] = {
    ("fused", "cuda"): dispatch.Backend(_refuse_cuda, _run_cuda),
    ("fused", "cpu"): dispatch.Backend(dispatch.takes_any, _run_cpu),
    **dispatch.on_devices("parallel", _run_parallel),
    **dispatch.on_devices("reference", _run_reference),
}
"""Every backend of :func:`selective_scan` by its ``(method, device)``."""

AUTO: tuple[tuple[str, str], ...] = (("fused", "cuda"), ("parallel", "cuda"), ("fused", "cpu"))
"""``method='auto'``: the first of these on the arrays' device that accepts (the fused
CUDA kernel for a forward on CUDA tensors, torch ops there otherwise, the CPU kernel on
the host)."""

METHODS: tuple[str, ...] = ("auto", *dict.fromkeys(m for m, _ in BACKENDS))
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")

#: the retired ``method=`` spellings that named a place, and what they now are
OLD_METHODS: dict[str, tuple[str, str]] = {"cpu": ("fused", "cpu"), "cuda": ("fused", "cuda")}


def _dispatch(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
              softplus: bool, initial_state: Any, where: tuple[str, str], scale_b: bool,
              packed: tuple[Any, Any] = (None, None)) -> tuple[Any, Any]:  # fmt: skip
    """Check the arrays into a plan, then run the backend of :data:`BACKENDS` that
    ``where = (method, device)`` picks.

    ``packed`` is ``(seq_idx, cu_seqlens)``.
    """
    verb = "selective_scan" if scale_b else "chapter_scan"
    method, device = dispatch.method_device(verb, *where, BACKENDS, OLD_METHODS, stacklevel=4)
    named = _checks.native(dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z,
                                delta_bias=delta_bias, initial_state=initial_state))  # fmt: skip
    kind = _checks.check_arrays(named, complex_ok=COMPLEX_ARGS if scale_b else ())
    u, delta, A, B, C, D, z, delta_bias, initial_state = named.values()
    cplx = _checks.check_complex(A, B, C, initial_state)
    nb, _, L, _ = _checks.check_scan_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state,
                                            complex_A=cplx)  # fmt: skip
    starts = None
    if packed[0] is not None or packed[1] is not None:  # read after u is known to be an array
        starts = _checks.packing(*packed, nb, L, "numpy", u)[0]
    if starts is not None and not starts.any():
        starts = None  # one sequence per row: nothing to reset
    grad = kind != "numpy" and needs_grad(named.values())
    plan = _Plan(named, kind, cplx, grad, softplus, scale_b, starts)
    name = dispatch.choose_on(BACKENDS, method, device, plan, PLACES[kind], AUTO,
                              what="u, delta, ...")  # fmt: skip
    assert name is not None  # 'parallel' takes every CUDA plan, 'fused' every host plan
    out, last = BACKENDS[name].run(plan)
    if kind == "numpy":
        return out.astype(u.dtype, copy=False), last
    return out.to(u.dtype), last


def _to_compute(named: dict[str, Any], kind: str, complex_A: bool = False) -> dict[str, Any]:
    cdt = compute_dtype(kind, named["u"].dtype)
    if complex_A:  # A, B, C and the state complex (B, C from their (real, imag) pairs)
        if kind == "numpy":
            ct: Any = _complex.complex_dtype(np.dtype(cdt))
        else:
            import torch

            ct = torch.complex128 if cdt == torch.float64 else torch.complex64
        out = {}
        for k, v in named.items():
            if v is None:
                out[k] = None
            elif k in ("B", "C"):
                out[k] = _reference.complex_pairs(v, ct)
            elif k in ("A", "initial_state"):
                out[k] = v.astype(ct) if kind == "numpy" else v.to(ct)
            else:
                out[k] = v.astype(cdt, copy=False) if kind == "numpy" else v.to(cdt)
        return out
    if kind == "numpy":
        return {k: None if v is None else v.astype(cdt, copy=False) for k, v in named.items()}
    return {k: None if v is None else v.to(cdt) for k, v in named.items()}


def _cpu_numpy(args: dict[str, Any], softplus: bool, scale_b: bool, kind: str,
               starts: np.ndarray | None = None) -> tuple[Any, Any]:  # fmt: skip
    if kind == "torch":
        arrs = {k: None if v is None else v.detach().numpy() for k, v in args.items()}
    else:
        arrs = args
    u = arrs["u"]
    p = _host.prepare(arrs["u"], arrs["delta"], arrs["A"], arrs["B"], arrs["C"], arrs["D"],
                      arrs["z"], arrs["delta_bias"], arrs["initial_state"], softplus, scale_b,
                      u.dtype, starts)  # fmt: skip
    out = None
    if not u.flags.c_contiguous:  # the chapter's layout: write the output in it too
        out = np.empty((u.shape[0], u.shape[2], u.shape[1]), u.dtype).transpose(0, 2, 1)
    out, last, _ = _host.forward(p, save=False, out=out)
    if kind == "torch":
        import torch

        return torch.from_numpy(out), torch.from_numpy(last)
    return out, last


def step(state: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any = None, z: Any = None,
         dt_bias: Any = None, dt_softplus: bool = False,
         state_batch_indices: Any = None) -> Any:  # fmt: skip
    """One token of generation with a cached state (mamba_ssm ``selective_state_update``).

    Mamba-1: ``state`` (batch, dim, d_state) is updated in place to
    ``exp(dt A) state + dt B x`` and the token's output
    ``(C . state + D x) silu(z)`` (batch, dim) is returned.  ``x``, ``dt``, ``z``:
    (batch, dim); ``A``: (dim, d_state); ``B``, ``C``: (batch, d_state) or
    (batch, groups, d_state); ``D``, ``dt_bias``: (dim,).

    Mamba-2 (a 4-D state, (batch, nheads, headdim, dstate)): ``x``, ``z``:
    (batch, nheads, headdim); ``dt``: (batch, nheads) or (batch, nheads,
    headdim); ``A``: (nheads,) (one per head, the Mamba-2 layer) or (nheads,
    headdim, dstate); ``B``, ``C``: (batch, ngroups, dstate) with ngroups
    dividing nheads; ``D``, ``dt_bias``: (nheads,) or (nheads, headdim).  Returns
    (batch, nheads, headdim).

    ``state_batch_indices`` (batch,): ``state`` is a cache of slots (its first
    axis need not be the batch) and row ``i`` uses slot
    ``state_batch_indices[i]``; the other slots are left alone (continuous
    batching).  Running ``step`` over the tokens of a sequence gives the
    outputs and last state of :func:`selective_scan` (3-D state) or
    :func:`ssd_scan` (4-D state), up to rounding.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.mamba import step
    >>> state = np.zeros((1, 2, 1))
    >>> step(state, np.ones((1, 2)), np.ones((1, 2)), -np.ones((2, 1)),
    ...      np.ones((1, 1)), np.ones((1, 1))).tolist()
    [[1.0, 1.0]]
    >>> cache = np.zeros((3, 2, 1, 1))                       # 3 slots, 2 heads
    >>> y = step(cache, np.ones((1, 2, 1)), np.ones((1, 2)), -np.ones(2),
    ...          np.ones((1, 1, 1)), np.ones((1, 1, 1)), state_batch_indices=np.array([2]))
    >>> cache[:, 0, 0, 0].tolist()
    [0.0, 0.0, 1.0]
    """
    dt_softplus = flag("dt_softplus", dt_softplus)
    named = _checks.native(dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z,
                                dt_bias=dt_bias))  # fmt: skip
    kind = _checks.check_arrays(named)
    x, dt, A, B, C, D, z, dt_bias = (named[k] for k in ("x", "dt", "A", "B", "C", "D", "z",
                                                        "dt_bias"))  # fmt: skip
    if kind == "numpy" and not state.flags.writeable:
        raise ValueError(f"state (shape {state.shape}, {state.dtype}) is read-only, and step "
                         "writes the new state into it in place: pass a writable array, "
                         "e.g. state.copy()")  # fmt: skip
    if state.ndim not in (3, 4):
        raise ValueError(f"state has shape {tuple(state.shape)}; expected (batch, dim, d_state) "
                         "(Mamba-1) or (batch, nheads, headdim, dstate) (Mamba-2)")  # fmt: skip
    batch = int(state.shape[0]) if state_batch_indices is None else int(x.shape[0])
    idx = None
    if state_batch_indices is not None:
        from ._step import check_indices

        idx = check_indices(state_batch_indices, batch, int(state.shape[0]))
    if state.ndim == 4:
        return _step_heads(state, named, kind, batch, idx, dt_softplus)
    rows = "batch" if int(state.shape[0]) == batch else None  # not with state_batch_indices
    bd: tuple[_checks.Layout, ...] = ((("batch", "dim"), "(batch, dim)"),)
    bc: tuple[_checks.Layout, ...] = (
        (("batch", "d_state"), "(batch, d_state)"),
        (("batch", None, "d_state"), "(batch, groups, d_state)"),
    )
    size = _checks.agree([
        ("state", state, (((rows, "dim", "d_state"), "(batch, dim, d_state)"),)),
        ("x", x, bd),
        ("dt", dt, bd),
        ("A", A, ((("dim", "d_state"), "(dim, d_state)"),)),
        ("B", B, bc),
        ("C", C, bc),
        ("D", D, ((("dim",), "(dim,)"),)),
        ("z", z, bd),
        ("dt_bias", dt_bias, ((("dim",), "(dim,)"),)),
    ])  # fmt: skip
    dim = size["dim"]
    for name, M in (("B", B), ("C", C)):
        if M.ndim == 3 and (M.shape[1] < 1 or dim % M.shape[1]):
            raise ValueError(
                f"{name} has shape {tuple(M.shape)}; expected (batch, d_state) "
                f"or (batch, groups, d_state) with groups dividing dim={dim}"
            )
    a = _to_compute(dict(named, u=x), kind)
    if idx is not None:
        a["state"] = a["state"][idx if kind == "numpy" else _torch_index(idx, state)]
    xp = array_module(a["x"])
    d = a["dt"] if dt_bias is None else a["dt"] + a["dt_bias"]
    if dt_softplus:
        d = xp.where(d <= 20, xp.log1p(xp.exp(d.clip(max=20))), d)

    def per_channel(M: Any) -> Any:
        if M.ndim == 2:
            return M[:, None, :]
        rep = dim // M.shape[1]
        return xp.repeat(M, rep, 1) if kind == "numpy" else M.repeat_interleave(rep, 1)

    new = xp.exp(d[..., None] * a["A"]) * a["state"] + (d * a["x"])[..., None] * per_channel(a["B"])
    y = (new * per_channel(a["C"])).sum(-1)
    if D is not None:
        y = y + a["D"] * a["x"]
    if z is not None:
        y = y * (a["z"] / (1 + xp.exp(-a["z"])))
    _store(state, new, idx, kind)
    return y.astype(x.dtype, copy=False) if kind == "numpy" else y.to(x.dtype)


def _torch_index(idx: np.ndarray, like: Any) -> Any:
    import torch

    return torch.from_numpy(idx).to(like.device)


def _store(state: Any, new: Any, idx: np.ndarray | None, kind: str) -> None:
    """Write the updated rows back into ``state`` (in place; into slots ``idx`` if given)."""
    if kind == "numpy":
        if idx is None:
            state[...] = new
        else:
            state[idx] = new
    elif idx is None:
        state.copy_(new)
    else:
        state[_torch_index(idx, state)] = new.to(state.dtype)


def _step_heads(state: Any, named: dict[str, Any], kind: str, batch: int,
                idx: np.ndarray | None, softplus: bool) -> Any:  # fmt: skip
    from ._step import shapes_heads, update_heads

    n = named
    shapes_heads(state, n["x"], n["dt"], n["A"], n["B"], n["C"], n["D"], n["z"], n["dt_bias"],
                 batch)  # fmt: skip
    a = _to_compute(dict(named, u=n["x"]), kind)
    s = a["state"]
    if idx is not None:
        s = s[idx if kind == "numpy" else _torch_index(idx, state)]
    new, y = update_heads(s, a, softplus, kind)
    _store(state, new, idx, kind)
    x = n["x"]
    return y.astype(x.dtype, copy=False) if kind == "numpy" else y.to(x.dtype)
