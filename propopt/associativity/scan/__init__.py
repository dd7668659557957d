"""``associative_scan`` and what it is built from.

:mod:`.core` is the verb, about 80 lines: it checks ``fn`` (:mod:`._combine`),
applies the transforms that reduce every call to a scan one backend runs,
and runs the backend its table picks (:mod:`._backends`).  Each transform is
a module of its own: half precision (:mod:`._half`), masked arrays and byte
orders (:mod:`._masked`), the identity of exclusive, masked and segmented
scans (:mod:`._identity`), segmented scans (:mod:`._segments`), the law
check (:mod:`._law_check`) and ``out=`` (:mod:`._out`).  The backends, each
taking a :class:`._plan.ScanPlan`: the monoid's CPU kernels on numba
threads (``propopt.associativity._cpu``, beside ``Monoid``, whose
elementwise combine they also serve), :mod:`._cuda` (numba.cuda),
:mod:`._dask`, :mod:`._generic` (vectorized calls of ``fn``) and
:mod:`._reference` (the sequential fold the tests trust).
"""

from .core import DEVICES, METHODS, associative_scan

__all__ = ["DEVICES", "METHODS", "associative_scan"]
