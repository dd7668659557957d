"""Cartesian multipole moments of point masses: build, merge, shift, evaluate.

Separability of the far field: for a target far from a cluster of radius
``R``, ``1/|r - x_j|`` is a short Taylor series in ``x_j - c`` about the
cluster's centre of mass ``c``, so the field of all ``n`` masses is a few
numbers (mass, quadrupole, octupole) evaluated in ``O(1)`` per target,
with relative error ``O((R/|r - c|)^(p+1))`` at order ``p``.

The moments of a union are computed from the moments of its parts by
shifting each part to the common centre of mass and adding (parallel-axis
theorem), which is the law a tree code's bottom-up pass relies on::

    moments(A u B) == merge_moments(moments(A), moments(B))

``merge`` is associative and commutative and the zero moments (an empty set)
are its identity: a commutative monoid, exact up to rounding.

This module is the object API (:class:`Moments`, :func:`moments`); the numba
building blocks it runs on (``moments_of_points``, ``merge_rows``,
``moments_segments``, ``merge_segments``, ``shift_add``, ``multipole_accel``,
``evaluate_rows``) are public in :mod:`propopt.separability` for use inside
other numba code, such as an octree walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import threads
from ..arrays import flag, per_point, plain, renamed
from . import _kernels as K

__all__ = ["Moments", "RawMoments", "merge_moments", "moments"]

_ORDERS = (0, 1, 2, 3)
_I2 = np.array([[4, 5, 6], [5, 7, 8], [6, 8, 9]])
_I3 = np.empty((3, 3, 3), dtype=np.int64)
for _i in range(3):
    for _k in range(3):
        for _l in range(3):
            _a, _b, _c = sorted((_i, _k, _l))
            # position of (a <= b <= c) in xxx xxy xxz xyy xyz xzz yyy yyz yzz zzz
            _I3[_i, _k, _l] = 10 + [
                (0, 0, 0),
                (0, 0, 1),
                (0, 0, 2),
                (0, 1, 1),
                (0, 1, 2),
                (0, 2, 2),
                (1, 1, 1),
                (1, 1, 2),
                (1, 2, 2),
                (2, 2, 2),
            ].index((_a, _b, _c))


class RawMoments(NamedTuple):
    """Moments about an arbitrary point ``p`` (``y_j = x_j - p``): see :meth:`Moments.about`."""

    mass: float
    dipole: np.ndarray  # sum m y, (3,)
    second: np.ndarray  # sum m y y, (3, 3)
    third: np.ndarray  # sum m y y y, (3, 3, 3)


def _points(name: str, x: Any) -> np.ndarray:
    a = plain(name, x)
    if a.dtype.kind not in "fiub":  # complex would lose its imaginary part, strings fail
        raise TypeError(f"{name} has dtype {a.dtype}: pass real Cartesian coordinates")
    a = a.astype(np.float64, copy=False)
    if a.ndim == 1 and a.shape[0] == 3:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(
            f"{name} has shape {a.shape}: must be (n, 3) Cartesian points "
            "(or one point of shape (3,))"
        )
    bad = ~np.isfinite(a).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {a[i].tolist()} is not finite: coordinates must be finite")
    return np.ascontiguousarray(a)


def _order(order: Any) -> int:
    if order not in _ORDERS or isinstance(order, bool):
        raise ValueError(f"order={order!r}: must be one of {list(_ORDERS)}")
    return int(order)


def _eps2(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.number)):
        raise TypeError(f"eps={eps!r}: must be a finite number >= 0")
    e = float(eps)
    if not (np.isfinite(e) and e >= 0):
        raise ValueError(f"eps={eps!r}: must be finite and >= 0")
    return e * e


@dataclass(frozen=True, eq=False)
class Moments:
    """Multipole moments of a set of point masses about its centre of mass.

    Build with :func:`moments`; combine with ``a + b`` (:meth:`merge`).

    Attributes
    ----------
    row : ndarray (20,)
        The packed moment row of :mod:`propopt.separability._kernels`: mass,
        centre of mass, ``S2`` (6), ``S3`` (10).  This is what the numba
        building blocks take.
    """

    row: np.ndarray

    @classmethod
    def zero(cls) -> Moments:
        """Moments of the empty set: mass 0, centre 0; the identity of :meth:`merge`."""
        return cls(np.zeros(K.NMOM))

    @property
    def mass(self) -> float:
        return float(self.row[0])

    @property
    def center(self) -> np.ndarray:
        """Centre of mass ``(3,)``; the origin for zero mass."""
        return self.row[1:4].copy()

    @property
    def second(self) -> np.ndarray:
        """``S2_ik = sum m y_i y_k`` about the centre of mass, ``(3, 3)``."""
        return self.row[_I2]

    @property
    def quadrupole(self) -> np.ndarray:
        """Traceless quadrupole ``Q_ik = sum m (3 y_i y_k - |y|^2 delta_ik)``, ``(3, 3)``."""
        s = self.second
        return 3.0 * s - np.trace(s) * np.eye(3)

    @property
    def third(self) -> np.ndarray:
        """``S3_ikl = sum m y_i y_k y_l`` about the centre of mass, ``(3, 3, 3)``."""
        return self.row[_I3]

    @property
    def octupole(self) -> np.ndarray:
        """Traceless octupole, ``(3, 3, 3)``.

        ``O_ikl = sum m (15 y_i y_k y_l - 3 |y|^2 (d_ik y_l + d_il y_k + d_kl y_i))``.
        """
        t = self.third
        v = np.einsum("iil->l", t)
        e = np.eye(3)
        sym = np.einsum("ik,l->ikl", e, v) + np.einsum("il,k->ikl", e, v)
        sym += np.einsum("kl,i->ikl", e, v)
        return 15.0 * t - 3.0 * sym

    @property
    def radius(self) -> float:
        """RMS distance of the mass from its centre, ``sqrt(tr(S2) / M)`` (0 for no mass)."""
        m = self.mass
        return float(np.sqrt(max(self.row[4] + self.row[7] + self.row[9], 0.0) / m)) if m else 0.0

    def merge(self, *others: Moments) -> Moments:
        """Moments of the union: shift every part to the common centre of mass and add.

        ``moments(A u B) == moments(A).merge(moments(B))`` up to rounding;
        associative, commutative, with :meth:`zero` as identity.
        """
        for o in others:
            if not isinstance(o, Moments):
                raise TypeError(
                    f"merge takes Moments, got {type(o).__name__}; build them with "
                    "propopt.moments(points, masses)"
                )
        rows = np.stack([self.row, *(o.row for o in others)])
        out = np.empty(K.NMOM)
        K.merge_rows(rows, 0, rows.shape[0], out)
        return _finite(Moments(out))

    def __add__(self, other: Moments) -> Moments:
        if not isinstance(other, Moments):
            return NotImplemented
        return self.merge(other)

    def about(self, point: Any) -> RawMoments:
        """Moments about another ``point`` (parallel-axis shift), with the dipole it creates.

        With ``d = c - point``: ``dipole = M d``, ``second = S2 + M d d``,
        ``third = S3 + (d_i S2_kl + d_k S2_il + d_l S2_ik) + M d d d``.
        """
        p = _points("point", point)[0]
        row = np.zeros(K.NMOM)
        K.shift_add(self.row, p[0], p[1], p[2], row)
        d = self.center - p if self.mass else np.zeros(3)
        return RawMoments(self.mass, self.mass * d, row[_I2], row[_I3])

    def shift(self, point: Any) -> RawMoments:
        """The moments re-expressed about ``point``: the same as :meth:`about`."""
        return self.about(point)

    @renamed(softening="eps")
    @threads.parallel
    def field(
        self, targets: Any, *, order: int = 3, eps: float = 0.0, potential: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(acceleration (t, 3), potential (t,) or None)`` at ``targets`` (G = 1).

        ``phi(r) ~= -sum_j m_j / sqrt(|r - x_j|^2 + eps^2)`` and ``a = -grad phi``,
        truncated at Taylor order ``order`` (0/1 monopole, 2 quadrupole, 3
        octupole) about the centre of mass; relative error
        ``O((R / |r - c|)^(order + 1))`` for targets outside the set's radius
        ``R`` (0 and 1 coincide and both fall as ``(R/r)^2``: the dipole vanishes).
        Cost ``O(t)``.

        ``eps`` is the Plummer softening length (``softening=`` before this
        release; ``softening`` names the kernel in the N-body verbs).  The
        potential is None unless ``potential=True``, as in every N-body verb
        (until this release it was always computed and returned).
        """
        p = _order(order)
        e2 = _eps2(eps)
        potential = flag("potential", potential)
        x = _points("targets", targets)
        acc = np.empty((x.shape[0], 3))
        pot = np.empty(x.shape[0])
        K.evaluate_rows(self.row[None, :], x, p, e2, acc, pot)
        return acc, (pot if potential else None)

    @renamed(softening="eps")
    def potential(self, targets: Any, *, order: int = 3, eps: float = 0.0) -> np.ndarray:
        """Potential ``(t,)`` at ``targets``; see :meth:`field`."""
        pot = self.field(targets, order=order, eps=eps, potential=True)[1]
        assert pot is not None
        return pot

    @renamed(softening="eps")
    def acceleration(self, targets: Any, *, order: int = 3, eps: float = 0.0) -> np.ndarray:
        """Acceleration (the field ``-grad phi``) ``(t, 3)`` at ``targets``; see :meth:`field`."""
        return self.field(targets, order=order, eps=eps)[0]

    def __repr__(self) -> str:
        c = ", ".join(f"{v:.4g}" for v in self.row[1:4])
        return f"Moments(mass={self.mass:.6g}, center=[{c}], radius={self.radius:.4g})"


@threads.parallel
@renamed(masses="mass")
def moments(points: Any, mass: Any = None) -> Moments:
    """Multipole moments (to octupole order) of point masses about their centre of mass.

    Parameters
    ----------
    points : array (n, 3)
        Finite Cartesian coordinates; ``n = 0`` gives :meth:`Moments.zero`.
    mass : array (n,) or float, optional
        Finite, ``>= 0``; default 1 each (``mass=`` as in every N-body verb;
        the former ``masses=`` is still taken, with a ``DeprecationWarning``,
        for one release).  Negative masses are refused: the
        moments are taken about the centre of mass, which masses of both
        signs can put anywhere (their total may be 0), and the truncation
        error bound then fails.  Take the moments of each sign apart.

    Returns
    -------
    Moments
        Mass ``M = sum m``, centre ``c = sum m x / M`` (0 when ``M = 0``),
        ``S2``, ``S3`` (and the traceless ``quadrupole`` and ``octupole``).

    Raises
    ------
    OverflowError
        When a moment is beyond float64 (coordinates near 1e300 have second
        moments near 1e600): never an inf or NaN in the row.

    Notes
    -----
    ``O(n)``, two passes in float64.  The law ``moments(A u B) ==
    moments(A) + moments(B)`` (see :meth:`Moments.merge`) lets a tree compute
    every node's moments bottom-up.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import moments
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(1000, 3))
    >>> mo = moments(x)
    >>> far = np.array([[30.0, 0.0, 0.0]])
    >>> exact = -np.sum(1.0 / np.linalg.norm(far - x, axis=1))
    >>> bool(abs(mo.potential(far, order=3)[0] - exact) < 1e-6 * abs(exact))
    True
    >>> a, b = moments(x[:400]), moments(x[400:])
    >>> bool(np.allclose((a + b).row, mo.row))
    True
    """
    x = _points("points", points) if np.size(points) else np.zeros((0, 3))
    w = per_point("mass", mass, x.shape[0], 1.0, "masses", nonnegative=False)
    if (w < 0).any():
        i = int(np.argmax(w < 0))
        where = f"mass={w[i]}" if np.ndim(mass) == 0 else f"mass[{i}] = {w[i]}"
        raise ValueError(
            f"{where}: masses must be finite and >= 0 (the moments are about the "
            "centre of mass, which masses of both signs put anywhere); take the moments of "
            "each sign apart"
        )
    # exact units: coordinates and masses divided by powers of two near their
    # largest, the row multiplied back; the same bits for ordinary inputs, and
    # points near 1e150 keep S2 ~ 1e300 where y**2 * y would overflow on the way
    lexp = int(np.frexp(np.abs(x).max())[1]) if x.size else 0
    mexp = int(np.frexp(w.max())[1]) if w.size and w.max() > 0 else 0
    out = np.empty(K.NMOM)
    K.moments_of_points(np.ldexp(x, -lexp), np.ldexp(w, -mexp), 0, x.shape[0], out)
    scale = [mexp, lexp, mexp + 2 * lexp, mexp + 3 * lexp]  # mass, centre, S2, S3
    with np.errstate(over="ignore"):
        for part, e in zip((slice(0, 1), slice(1, 4), slice(4, 10), slice(10, 20)), scale):
            out[part] = np.ldexp(out[part], e)
    return _finite(Moments(out))


def _finite(mo: Moments) -> Moments:
    """``mo``, or an ``OverflowError`` if a moment is beyond float64 (inf, or NaN of inf - inf)."""
    if not np.isfinite(mo.row).all():
        raise OverflowError(
            f"the moments overflow float64 (mass {mo.row[0]:.3g}, second moments up to "
            f"{np.abs(mo.row[4:10]).max():.3g}): express points and masses in units "
            "that bring them nearer 1"
        )
    return mo


def merge_moments(*parts: Moments) -> Moments:
    """Moments of the union of sets given by their moments (zero moments for no parts)."""
    if not parts:
        return Moments.zero()
    return parts[0].merge(*parts[1:])
