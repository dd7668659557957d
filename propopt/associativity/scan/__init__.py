"""``associative_scan`` and what it is built from.

:mod:`.core` is the verb; it runs three stages (:mod:`._stages`):
``normalize`` checks the arguments into a request (``fn`` by :mod:`._combine`,
the identity by :mod:`._identity`, ``out=`` by :mod:`._out`), ``plan``
applies the transforms that reduce every call to a scan one backend runs and
picks the backend its table gives (:mod:`._backends`), and ``run`` checks
the law (:mod:`._law_check`), runs it and undoes the transforms.  Each
transform is a module of its own with one ``enter(leaves, ...) -> (leaves,
undo)``: half precision (:mod:`._half`), masked arrays (:mod:`._masked`) and
segmented scans (:mod:`._segments`); :mod:`._arrays` is the one array
namespace they and the generic paths share.  The backends, each
taking a :class:`._plan.ScanPlan`: the monoid's CPU kernels on numba
threads (``propopt.associativity._cpu``, beside ``Monoid``, whose
elementwise combine they also serve), :mod:`._cuda` (numba.cuda),
:mod:`._dask`, :mod:`._generic` (vectorized calls of ``fn``) and
:mod:`._reference` (the sequential fold the tests trust).
"""

from .core import DEVICES, METHODS, associative_scan

__all__ = ["DEVICES", "METHODS", "associative_scan"]
