"""Sampling for the law audits: validated samples, gathered batches, calls of ``fn``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _kinds, _pytree, _validate
from .._kinds import half_name
from .monoid import Monoid

Leaves = list[Any]

MAX_POSITIONS = 1024
"""For a :class:`~propopt.Monoid` (an elementwise combine), at most this many
positions across the non-sampled axes are audited, chosen at random."""


def check_trials(trials: Any) -> None:
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be an int >= 1 (the number of samples), got {trials!r}")


def check_tolerances(rtol: Any, atol: Any) -> None:
    """``rtol`` and ``atol``: None or a number >= 0 (inf tolerates everything, NaN nothing)."""
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}={v!r}: must be a number >= 0 or None (the default)")
        if not v >= 0:  # NaN too
            raise ValueError(f"{name}={v!r}: must be >= 0, e.g. {name}=1e-6 (None: the default)")


def check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed={seed!r}: must be an int >= 0, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed={seed}: must be an int >= 0 (numpy seeds are non-negative)")


def to_numpy(x: Any) -> np.ndarray:
    kind = _kinds.array_kind(x)
    if kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
        x = x.detach().cpu().resolve_conj()
        return (x.float() if half_name(x.dtype) == "bfloat16" else x).numpy()
    if kind == _kinds.DASK:
        return np.asarray(x.compute())
    if kind == _kinds.CUDA and hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


class Samples:
    """Validated samples: structure, sampled axis, and how to gather and call."""

    def __init__(self, fn: Any, samples: Any, axis: Any) -> None:
        if not (isinstance(fn, Monoid) or callable(fn)):
            raise TypeError(f"fn={fn!r} is not callable: pass fn(a, b) or a propopt.Monoid")
        leaves, self.td = _pytree.flatten(samples, "samples")
        if not leaves:
            raise ValueError("samples holds no arrays; pass an array or a pytree of arrays")
        paths = _pytree.leaf_paths(self.td, "samples")
        self.kind = _kinds.common_kind(leaves, paths)
        self.ax = _validate.check_axis(axis, leaves, paths)
        self.n = int(leaves[0].shape[self.ax])
        if self.n < 1:
            raise ValueError(
                f"samples has length {self.n} along axis {self.ax} (shape "
                f"{tuple(leaves[0].shape)}); the audit needs at least one candidate element"
            )
        self.fn, self.name, self.leaves = fn, _validate.name_of(fn), leaves
        self.is_monoid = isinstance(fn, Monoid)
        # a plain callable sees the array type it was written for
        self.native = not self.is_monoid and self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA)
        # a monoid over floats combines half precision in float32, as associative_scan does
        self.widen = self.is_monoid and half_name(leaves[0].dtype) is not None and "f" in fn.kinds
        if self.is_monoid:
            if len(leaves) != fn.arity:
                raise ValueError(
                    f"monoid {fn.name!r} combines elements of {fn.arity} array(s) but samples "
                    f"has {len(leaves)} leaves ({', '.join(paths)})"
                )
            dtype = _validate.np_dtype(leaves[0].dtype)
            if not self.widen and (dtype is None or not fn.accepts(dtype)):
                raise TypeError(
                    f"monoid {fn.name!r} cannot combine samples of dtype {leaves[0].dtype} (it "
                    f"accepts dtype kinds {fn.kinds!r}); cast the samples first"
                )

    def gather(self, rows: np.ndarray, seed: int) -> Leaves:
        """The elements ``rows`` along the axis, for every leaf (one gather per leaf).

        For a monoid with many positions across the other axes, a random
        subset of ``MAX_POSITIONS`` of them is taken and the axis becomes 0.
        """
        shape = tuple(self.leaves[0].shape)
        other = shape[: self.ax] + shape[self.ax + 1 :]
        index: tuple[Any, ...] = (slice(None),) * self.ax + (rows,)
        if self.is_monoid and int(np.prod(other)) > MAX_POSITIONS:
            flat = np.random.default_rng(seed + 1).choice(
                int(np.prod(other)), MAX_POSITIONS, replace=False
            )
            pos = [p[None, :] for p in np.unravel_index(np.sort(flat), other)]
            index = (*pos[: self.ax], rows[:, None], *pos[self.ax :])
            self.ax = 0
        return [self._take(x, index) for x in self.leaves]

    def _take(self, x: Any, index: tuple[Any, ...]) -> Any:
        if self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
            import torch

            idx = tuple(
                i if isinstance(i, slice) else torch.as_tensor(i, device=x.device) for i in index
            )
            with torch.no_grad():
                out = x[idx]
            return out if self.native else self._wide(to_numpy(out))
        if self.kind == _kinds.DASK:
            fancy = sum(not isinstance(i, slice) for i in index) > 1
            return self._wide(to_numpy(x.vindex[index] if fancy else x[index]))
        return self._wide(to_numpy(x)[index])

    def _wide(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32) if self.widen else x

    def split(self, leaves: Leaves, parts: int) -> list[Leaves]:
        """Cut gathered leaves into ``parts`` equal batches along the axis."""
        size = int(leaves[0].shape[self.ax]) // parts
        pre = (slice(None),) * self.ax
        return [[x[pre + (slice(p * size, (p + 1) * size),)] for x in leaves] for p in range(parts)]

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Context for calling ``fn``: no floating-point warnings from the sampled
        combinations (they are judged, not reported), no autograd graph for torch."""
        with np.errstate(all="ignore"):
            if self.native:
                import torch

                with torch.no_grad():
                    yield
            else:
                yield

    def call(self, a: Leaves, b: Leaves) -> Leaves:
        """``fn(a, b)`` on leaf lists, checking structure and shapes."""
        if self.is_monoid:
            return list(self.fn.combine_leaves(a, b))
        return _pytree.apply(self.fn, self.td, a, b)

    def identity(self) -> tuple[Any, ...]:
        if self.widen:
            return self.fn.identity(np.dtype(np.float32))
        return self.fn.identity(_validate.np_dtype(self.leaves[0].dtype))
