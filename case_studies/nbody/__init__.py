"""Problem 3 of the capstone: gravitational N-body by Barnes-Hut.

:func:`~.api.field` is the one entry point: ``field(pos, mass, method='tree' |
'fmm' | 'direct', device='auto' | 'cpu' | 'cuda' | 'dask', potential=False, ...)``
returns ``(acc, pot or None)``, as every verb below does.

:func:`~.naive.nbody_naive` (the chapter's double loop; the exact sum done
properly is :func:`propopt.direct_gravity`), :class:`~.barnes_hut.Octree`
and :func:`~.barnes_hut.barnes_hut` (the tree code), :func:`~.fmm.fmm` (the fast multipole method,
error as the knob), :func:`~.integrate.leapfrog`
(kick-drift-kick with diagnostics and snapshots), :func:`~.plummer.plummer_sphere`
(initial conditions), :func:`~.distributed.field_dask` (targets on a Dask cluster).

``METHODS`` and ``DEVICES`` are :func:`field`'s; :meth:`Octree.field` takes
``barnes_hut.METHODS`` (``'tree'``, ``'direct'``) and ``barnes_hut.DEVICES``.
"""

from .api import DEVICES, METHODS, field
from .barnes_hut import THETA, Octree, barnes_hut
from .fmm import TOL_TABLE, fmm, fmm_parameters
from .naive import nbody_naive
from .plummer import plummer_sphere

__all__ = [
    "DEVICES",
    "METHODS",
    "THETA",
    "TOL_TABLE",
    "Octree",
    "barnes_hut",
    "field",
    "fmm",
    "fmm_parameters",
    "nbody_naive",
    "plummer_sphere",
]
