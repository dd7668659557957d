"""Validation of selective-scan arguments at the Python boundary."""

from __future__ import annotations

from typing import Any

from propopt.arrays import NUMPY, TORCH, TORCH_CUDA, array_kind

FLOATS = ("float16", "bfloat16", "float32", "float64")


def kind(x: Any) -> str:
    """'numpy', 'torch' (CPU), 'torch-cuda' (:func:`propopt.arrays.array_kind`), or raise."""
    k = array_kind(x)
    if k not in (NUMPY, TORCH, TORCH_CUDA):
        raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")
    return str(k)


def dtype_name(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def check_arrays(named: dict[str, Any]) -> str:
    """All given arrays are real floats of one library and device; returns the kind."""
    kinds = {}
    for name, x in named.items():
        if x is None:
            continue
        try:
            kinds[name] = kind(x)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        dn = dtype_name(x)
        if dn.startswith("complex"):
            raise TypeError(
                f"{name} has dtype {dn}: complex A, B, C (S4D-Lin) are not supported; "
                "pass real arrays"
            )
        if dn not in FLOATS:
            raise TypeError(f"{name} has dtype {dn}; expected one of {', '.join(FLOATS)}")
    if len(set(kinds.values())) > 1:
        desc = ", ".join(f"{n}: {k}" for n, k in kinds.items())
        raise TypeError(f"arrays must all be numpy, all torch CPU or all torch CUDA; got {desc}")
    return next(iter(kinds.values()))


def _want(name: str, x: Any, shape: tuple[int, ...], text: str) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; expected {text} = {shape}")


def check_scan_shapes(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
    initial_state: Any,
) -> tuple[int, int, int, int]:  # fmt: skip
    """Shapes of mamba_ssm's selective_scan_fn; returns (batch, dim, L, d_state)."""
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
        elif M.ndim == 3:
            _want(name, M, (batch, N, L), "(batch, d_state, L)")
        elif M.ndim == 4:
            G = int(M.shape[1])
            if G < 1 or dim % G:
                raise ValueError(
                    f"{name} has shape {tuple(M.shape)}: groups={G} must divide dim={dim}"
                )
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
