"""Beyond one machine: evaluate a tree's field at a large target set on a Dask cluster.

The tree is built once and scattered once (``client.scatter(tree,
broadcast=True, hash=False)``, a fresh key each time): every worker holds a
copy, and each task ships only its chunk of targets and gets back its chunk
of accelerations and potentials.
At ``theta = 0`` (the exact sum) a target's sum does not depend on how the
targets are split, so the result equals :meth:`Octree.field` on all targets
at once, bit for bit.  At ``theta > 0`` the cells accepted for a target depend
on the group of nearby targets it is walked with, and groups are formed inside
each chunk, so the two agree to the tree's accuracy, not bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt.arrays import count, flag, points

from .barnes_hut import Octree

__all__ = ["field_dask", "scatter_tree"]


def _check_client(client: Any) -> None:
    """A ``distributed.Client`` (anything with its scatter, submit and gather), or a TypeError."""
    missing = [m for m in ("scatter", "submit", "gather") if not callable(getattr(client, m, None))]
    if missing:
        raise TypeError(
            f"client= is a {type(client).__name__}, which has no {', '.join(missing)}; pass a "
            "distributed.Client (from dask.distributed import Client; client = Client())"
        )


def scatter_tree(client: Any, tree: Octree) -> Any:
    """Send ``tree`` to every worker once; returns the future to pass to :func:`field_dask`."""
    _check_client(client)
    if not isinstance(tree, Octree):
        raise TypeError(f"tree has type {type(tree).__name__}: pass an Octree")
    # hash=False: a fresh key per scatter.  With the content hash as key, a call
    # scattering the same tree again while the previous call's future is being
    # released reused that key, and the release could drop the new copy ("lost
    # dependencies", about one call in 100-500 back to back).
    return client.scatter(tree, broadcast=True, hash=False)


def _chunk_field(tree: Octree, targets: np.ndarray, kwargs: dict) -> tuple[np.ndarray, np.ndarray]:
    return tree.field(targets, **kwargs)


def field_dask(
    client: Any,
    tree: Any,
    targets: Any,
    *,
    chunk: int = 250_000,
    **field_kwargs: Any,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Accelerations (and potentials) of ``tree`` at ``targets``, in chunks on a Dask cluster.

    :func:`propopt_case_studies.nbody.field` with ``device='dask'`` builds the tree
    and calls this.

    Parameters
    ----------
    client : distributed.Client
    tree : Octree or Future
        A tree, scattered here, or the future of :func:`scatter_tree` (reuse
        it across calls to send the tree only once).
    targets : array (m, 3)
    chunk : int
        Targets per task.
    **field_kwargs
        Passed to :meth:`Octree.field` (``theta``, ``quadrupole``, ``target_eps``
        as a scalar, ``G``, ``potential``, ...).

    Returns
    -------
    acc : ndarray (m, 3)
    pot : ndarray (m,) or None
        None unless ``potential=True`` (the default of :meth:`Octree.field`,
        ``True`` until this release).
    """
    _check_client(client)
    chunk = count("chunk", chunk)
    T = points("targets", targets, 3)
    if "target_eps" in field_kwargs and np.ndim(field_kwargs["target_eps"]) != 0:
        raise ValueError(
            "target_eps must be a scalar for field_dask (per-target softening: split it yourself)"
        )
    for name in ("quadrupole", "potential"):  # refused here, not on every worker
        if name in field_kwargs:
            flag(name, field_kwargs[name])
    if T.shape[0] == 0:  # nothing to send (and no tree to scatter)
        return Octree.build(np.zeros((0, 3))).field(T, **field_kwargs)
    fut = scatter_tree(client, tree) if isinstance(tree, Octree) else tree
    parts = [
        client.submit(_chunk_field, fut, T[s : s + chunk], field_kwargs, pure=False)
        for s in range(0, T.shape[0], chunk)
    ]
    res = client.gather(parts)
    acc = np.concatenate([r[0] for r in res])
    pot = None if res[0][1] is None else np.concatenate([r[1] for r in res])  # potential=False
    return acc, pot
