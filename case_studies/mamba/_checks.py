"""Validation of selective-scan arguments at the Python boundary."""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt.arrays import NUMPY, TORCH, TORCH_CUDA, array_kind

FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex64", "complex128")


def kind(x: Any) -> str:
    """'numpy', 'torch' (CPU), 'torch-cuda' (:func:`propopt.arrays.array_kind`), or raise."""
    k = array_kind(x)
    if k not in (NUMPY, TORCH, TORCH_CUDA):
        raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")
    return str(k)


def dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def native(named: dict[str, Any]) -> dict[str, Any]:
    """The arrays with NumPy ones of non-native byte order (e.g. ``'>f8'``) swapped to native.

    The kernels and torch take native byte order only; a swapped copy gives
    the same values, as every verb of the library accepts them.
    """
    out = {}
    for name, x in named.items():
        dt = getattr(x, "dtype", None)
        if isinstance(x, np.ndarray) and isinstance(dt, np.dtype) and not dt.isnative:
            x = x.astype(dt.newbyteorder("="))
        out[name] = x
    return out


def check_arrays(named: dict[str, Any], complex_ok: tuple[str, ...] = ()) -> str:
    """All given arrays are floats of one library and device; returns the kind.

    Only the arrays named in ``complex_ok`` may be complex (complex64 or
    complex128); every other one must be real.
    """
    kinds = {}
    for name, x in named.items():
        if x is None:
            continue
        if isinstance(x, np.ma.MaskedArray):  # the kernels would read the masked values
            raise TypeError(
                f"{name} is a masked array, whose mask the scan cannot honour; pass "
                f"{name}.filled(value) with the value the masked entries should take"
            )
        try:
            kinds[name] = kind(x)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        dn = dtype_name(x)
        if dn.startswith("complex"):
            if not complex_ok:
                raise TypeError(
                    f"{name} has dtype {dn}: complex A, B, C (S4D-Lin) are not supported; "
                    "pass real arrays"
                )
            if name not in complex_ok:
                raise TypeError(
                    f"{name} has dtype {dn}; expected one of {', '.join(FLOATS)}: only "
                    f"{', '.join(complex_ok)} may be complex"
                )
            if dn not in COMPLEX:
                raise TypeError(f"{name} has dtype {dn}; expected one of {', '.join(COMPLEX)}")
            continue
        if dn not in FLOATS:
            raise TypeError(f"{name} has dtype {dn}; expected one of {', '.join(FLOATS)}")
    if len(set(kinds.values())) > 1:
        desc = ", ".join(f"{n}: {k}" for n, k in kinds.items())
        raise TypeError(f"arrays must all be numpy, all torch CPU or all torch CUDA; got {desc}")
    return next(iter(kinds.values()))


def is_complex(x: Any) -> bool:
    return x is not None and dtype_name(x).startswith("complex")


def check_complex(A: Any, B: Any, C: Any, initial_state: Any) -> bool:
    """Whether the scan is complex (S4D-Lin: complex ``A``); checks B, C and the state agree.

    mamba_ssm's convention: with complex ``A``, a per-token ``B`` or ``C`` is a
    real array whose last axis holds (real, imag) pairs, 2 L numbers; a shared
    ``(dim, d_state)`` one is complex (a real one counts as complex with zero
    imaginary part).  With real ``A`` everything is real.
    """
    if not is_complex(A):
        for name, M in (("B", B), ("C", C), ("initial_state", initial_state)):
            if is_complex(M):
                raise TypeError(
                    f"{name} has dtype {dtype_name(M)} but A is real ({dtype_name(A)}): "
                    "complex B, C and initial_state need a complex A (S4D-Lin); pass A as "
                    f"complex or {name} as real"
                )
        return False
    for name, M in (("B", B), ("C", C)):
        if M.ndim >= 3 and is_complex(M):
            raise TypeError(
                f"{name} has dtype {dtype_name(M)} and shape {tuple(M.shape)}: with complex A "
                f"a per-token {name} is real, its last axis (real, imag) pairs of 2 L numbers "
                f"(mamba_ssm's layout); pass torch.view_as_real({name}).flatten(-2) "
                f"(NumPy: {name}.view({name}.real.dtype))"
            )
    return True


def complex_cuda_error(named: dict[str, Any]) -> TypeError | None:
    """The CUDA kernel is real only: the error naming the first complex argument and the fix."""
    for name, x in named.items():
        if is_complex(x):
            return TypeError(
                f"{name} has dtype {dtype_name(x)}: method='fused' on CUDA takes real A, B, C "
                "only; for complex A (S4D-Lin) on CUDA tensors use method='parallel' (or 'auto'), "
                "or run on CPU"
            )
    return None


def _want(name: str, x: Any, shape: tuple[int, ...], text: str) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; expected {text} = {shape}")


#: An axis of a layout: a dimension shared by several arguments (``"dim"``),
#: one held ``f`` times over (``("L", 2)``: 2 L numbers of (real, imag)
#: pairs), or None for an axis of the argument's own (B's groups).
Axis = str | tuple[str, int] | None
Layout = tuple[tuple[Axis, ...], str]  # the axes, and how to spell them
Spec = tuple[str, Any, tuple[Layout, ...]]


def agree(specs: list[Spec]) -> dict[str, int]:
    """The size of each shared dimension, and each array's shape checked against them.

    ``specs`` lists ``(name, array or None, layouts)``, a layout per
    accepted number of axes, each with its spelling.  A dimension's size is
    the one most of the arguments holding it agree on (on a tie, that of the
    first), so a shape error names the argument that disagrees, even when it
    comes first, and says which arguments set each size it breaks.
    """
    layout: dict[str, Layout] = {}
    claims: dict[str, list[tuple[Any, str]]] = {}
    for name, x, layouts in specs:
        if x is None:
            continue
        shape = tuple(int(n) for n in x.shape)
        fits = [lay for lay in layouts if len(lay[0]) == len(shape)]
        if not fits:
            raise ValueError(
                f"{name} has shape {shape}; expected {' or '.join(t for _, t in layouts)}"
            )
        layout[name] = fits[0]
        for axis, n in zip(fits[0][0], shape):
            if axis is not None:
                d, f = (axis, 1) if isinstance(axis, str) else axis
                claims.setdefault(d, []).append((n / f if n % f else n // f, name))
    size: dict[str, int] = {}
    by: dict[str, list[str]] = {}
    for d, said in claims.items():
        votes = [v for v, _ in said]
        best = max(votes, key=lambda v: (votes.count(v), -votes.index(v)))
        size[d], by[d] = best, [who for v, who in said if v == best]
    for name, x, _ in specs:
        if x is None:
            continue
        shape = tuple(int(n) for n in x.shape)
        axes, text = layout[name]
        want, why = [], []
        for axis, n in zip(axes, shape):
            if axis is None:
                want.append(n)
                continue
            d, f = (axis, 1) if isinstance(axis, str) else axis
            want.append(size[d] * f)
            if want[-1] != n and by[d]:
                why.append(f"{d} = {size[d]} from {', '.join(by[d])}")
        if tuple(want) != shape:
            raise ValueError(
                f"{name} has shape {shape}; expected {text} = {tuple(want)} ({'; '.join(why)})"
            )
    return size


def check_scan_shapes(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
    initial_state: Any, complex_A: bool = False,
) -> tuple[int, int, int, int]:  # fmt: skip
    """Shapes of mamba_ssm's selective_scan_fn; returns (batch, dim, L, d_state).

    With ``complex_A`` a per-token B or C has 2 L numbers on its last axis
    ((real, imag) pairs, mamba_ssm's layout for complex A).
    """
    L2 = ("L", 2) if complex_A else "L"
    pairs = " of (real, imag) pairs, for complex A" if complex_A else ""
    lt = "2 L" if complex_A else "L"
    bc: tuple[Layout, ...] = (
        (("dim", "d_state"), "(dim, d_state)"),
        (("batch", "d_state", L2), f"(batch, d_state, {lt}){pairs}"),
        (("batch", None, "d_state", L2), f"(batch, groups, d_state, {lt}){pairs}"),
    )
    bdl: tuple[Layout, ...] = ((("batch", "dim", "L"), "(batch, dim, L)"),)
    size = agree([
        ("u", u, bdl),
        ("delta", delta, bdl),
        ("A", A, ((("dim", "d_state"), "(dim, d_state)"),)),
        ("B", B, bc),
        ("C", C, bc),
        ("D", D, ((("dim",), "(dim,)"),)),
        ("z", z, bdl),
        ("delta_bias", delta_bias, ((("dim",), "(dim,)"),)),
        ("initial_state", initial_state, ((("batch", "dim", "d_state"), "(batch, dim, d_state)"),)),
    ])  # fmt: skip
    batch, dim, L, N = (size[d] for d in ("batch", "dim", "L", "d_state"))
    if N < 1:
        raise ValueError(f"A has shape {tuple(A.shape)}; d_state must be >= 1")
    for name, M in (("B", B), ("C", C)):
        G = int(M.shape[1]) if M.ndim == 4 else 1
        if G < 1 or dim % G:
            raise ValueError(f"{name} has shape {tuple(M.shape)}: groups={G} must divide dim={dim}")
    return batch, dim, L, N


def _to_numpy_int(v: Any, name: str) -> np.ndarray:
    if type(v).__module__.startswith("torch"):
        v = v.detach().cpu().numpy()
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} has dtype {a.dtype}; expected integers")
    return a


def packing(seq_idx: Any, cu_seqlens: Any, nb: int, L: int, kind: str,
             x: Any) -> tuple[Any, Any]:  # fmt: skip
    """Sequence starts (b, l) as a bool array of the inputs' library, and cu_seqlens.

    mamba_ssm's meaning, shared by :func:`selective_scan` and :func:`ssd_scan`:
    a state resets to zero at every token whose ``seq_idx`` differs from the
    previous token's, and at token 0 unless ``seq_idx[b, 0] == 0`` (the
    initial state belongs to the sequence numbered 0).
    """
    starts = np.zeros((nb, L), bool)
    cu = None
    if cu_seqlens is not None:
        cu = _to_numpy_int(cu_seqlens, "cu_seqlens").astype(np.int64)
        if cu.ndim != 1 or len(cu) < 2:
            raise ValueError(f"cu_seqlens has shape {cu.shape}; expected (nseq + 1,) with "
                             "nseq >= 1")  # fmt: skip
        if nb != 1:
            raise ValueError(f"cu_seqlens packs sequences into one row, but batch={nb}; "
                             "pack them along seqlen with batch 1")  # fmt: skip
        if cu[0] != 0 or cu[-1] != L or np.any(np.diff(cu) < 0):
            raise ValueError(f"cu_seqlens={cu.tolist()[:8]}...: must start at 0, end at "
                             f"seqlen={L} and never decrease")  # fmt: skip
        inner = cu[1:-1]
        starts[0, inner[inner < L]] = True
    if seq_idx is not None:
        si = _to_numpy_int(seq_idx, "seq_idx")
        if si.shape != (nb, L):
            raise ValueError(f"seq_idx has shape {si.shape}; expected (batch, seqlen) = "
                             f"{(nb, L)}")  # fmt: skip
        from_idx = np.zeros((nb, L), bool)
        if L:
            from_idx[:, 0] = si[:, 0] != 0
            from_idx[:, 1:] = si[:, 1:] != si[:, :-1]
        if cu is not None and not np.array_equal(from_idx[:, 1:], starts[:, 1:]):
            raise ValueError("seq_idx and cu_seqlens disagree on where sequences start; "
                             "pass one of them")  # fmt: skip
        starts = from_idx
    if kind == "numpy":
        return starts, cu
    import torch

    return torch.from_numpy(starts).to(x.device), cu
