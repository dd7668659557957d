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


def check_scan_shapes(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
    initial_state: Any, complex_A: bool = False,
) -> tuple[int, int, int, int]:  # fmt: skip
    """Shapes of mamba_ssm's selective_scan_fn; returns (batch, dim, L, d_state).

    With ``complex_A`` a per-token B or C has 2 L numbers on its last axis
    ((real, imag) pairs, mamba_ssm's layout for complex A).
    """
    if u.ndim != 3:
        raise ValueError(f"u has shape {tuple(u.shape)}; expected (batch, dim, L)")
    batch, dim, L = (int(s) for s in u.shape)
    _want("delta", delta, (batch, dim, L), "(batch, dim, L) like u")
    if A.ndim != 2 or A.shape[0] != dim:
        raise ValueError(f"A has shape {tuple(A.shape)}; expected (dim, d_state) = ({dim}, N)")
    N = int(A.shape[1])
    if N < 1:
        raise ValueError(f"A has shape {tuple(A.shape)}; d_state must be >= 1")
    for name, M in (("B", B), ("C", C)):
        if M.ndim == 2:
            _want(name, M, (dim, N), "(dim, d_state)")
        elif M.ndim == 3 and complex_A:
            _want(name, M, (batch, N, 2 * L), "(batch, d_state, 2 L) of (real, imag) pairs, "
                  "for complex A")  # fmt: skip
        elif M.ndim == 3:
            _want(name, M, (batch, N, L), "(batch, d_state, L)")
        elif M.ndim == 4:
            G = int(M.shape[1])
            if G < 1 or dim % G:
                raise ValueError(
                    f"{name} has shape {tuple(M.shape)}: groups={G} must divide dim={dim}"
                )
            if complex_A:
                _want(name, M, (batch, G, N, 2 * L), "(batch, groups, d_state, 2 L) of "
                      "(real, imag) pairs, for complex A")  # fmt: skip
            else:
                _want(name, M, (batch, G, N, L), "(batch, groups, d_state, L)")
        else:
            raise ValueError(
                f"{name} has shape {tuple(M.shape)}; expected (dim, d_state), "
                "(batch, d_state, L) or (batch, groups, d_state, L)"
            )
    if D is not None:
        _want("D", D, (dim,), "(dim,)")
    if z is not None:
        _want("z", z, (batch, dim, L), "(batch, dim, L) like u")
    if delta_bias is not None:
        _want("delta_bias", delta_bias, (dim,), "(dim,)")
    if initial_state is not None:
        _want("initial_state", initial_state, (batch, dim, N), "(batch, dim, d_state)")
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
