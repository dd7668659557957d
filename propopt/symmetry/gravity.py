"""The direct gravitational sum, built on :func:`pairwise_sum`.

With Plummer softening ``eps`` the field of mass ``m_j`` at ``x_j`` on ``x_i`` is

.. math:: a_i = G \\sum_{j \\ne i} m_j \\frac{x_j - x_i}{(|x_j - x_i|^2 + \\epsilon^2)^{3/2}},
          \\qquad
          \\phi_i = -G \\sum_{j \\ne i} \\frac{m_j}{(|x_j - x_i|^2 + \\epsilon^2)^{1/2}}.

The pair function ``(x_j - x_i)/s^3`` is antisymmetric and ``-1/s`` is
symmetric (Newton's third law), so :func:`pairwise_sum` with the masses as
weights evaluates each unordered pair once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba.extending import register_jitable

from .. import _kinds, threads
from ..arrays import flag, plain, points, real
from .pairs import METHODS, Symmetry, _check_method, pairwise_sum

GRAVITY_SYMMETRY: tuple[Symmetry, ...] = (
    "antisymmetric",
    "antisymmetric",
    "antisymmetric",
    "symmetric",
)
"""Laws of the outputs of :func:`plummer`: field antisymmetric, potential symmetric."""


def plummer(xi: Any, xj: Any, eps2: float) -> tuple[float, float, float, float]:
    """Softened pair field: ``((x_j - x_i)/s^3, -1/s)`` with ``s^2 = r^2 + eps^2``.

    A coincident pair with ``eps = 0`` contributes 0 (it has no direction).
    This is the kernel :func:`direct_gravity` hands to :func:`pairwise_sum`.
    """
    dx = xj[0] - xi[0]
    dy = xj[1] - xi[1]
    dz = xj[2] - xi[2]
    s2 = dx * dx + dy * dy + dz * dz + eps2
    if s2 == 0.0:
        return 0.0, 0.0, 0.0, 0.0
    inv = 1.0 / math.sqrt(s2)
    inv3 = inv * inv * inv
    return dx * inv3, dy * inv3, dz * inv3, -inv


def plummer_per_body(xi: Any, xj: Any) -> tuple[float, float, float, float]:
    """:func:`plummer` with each point's ``eps^2`` in its 4th column, softened by their mean.

    ``eps_ij^2 = (eps_i^2 + eps_j^2) / 2`` is symmetric in ``i, j``, so the
    laws of :data:`GRAVITY_SYMMETRY` hold and the sum still halves.
    """
    dx = xj[0] - xi[0]
    dy = xj[1] - xi[1]
    dz = xj[2] - xi[2]
    s2 = dx * dx + dy * dy + dz * dz + 0.5 * (xi[3] + xj[3])
    if s2 == 0.0:
        return 0.0, 0.0, 0.0, 0.0
    inv = 1.0 / math.sqrt(s2)
    inv3 = inv * inv * inv
    return dx * inv3, dy * inv3, dz * inv3, -inv


@register_jitable
def spline_kernel(r2: float, h: float) -> tuple[float, float]:
    """``(g, p)`` of the M4 cubic spline of support ``h`` at squared distance ``r2``.

    The acceleration of a unit mass is ``g * (x_j - x_i)`` and its potential
    ``p``: Newtonian (``g = r^-3``, ``p = -1/r``) from ``r = h`` outwards,
    the spline's inside (Monaghan and Lattanzio 1985; the Gadget and
    pytreegrav kernel).  Callable from Python, numba and CUDA kernels (the
    Barnes-Hut walk of ``propopt_case_studies.nbody`` uses it too).
    """
    r = math.sqrt(r2)
    if r >= h:
        inv = 1.0 / r
        return inv * inv * inv, -inv
    hinv = 1.0 / h
    q = r * hinv
    h3 = hinv * hinv * hinv
    if q <= 0.5:
        g = (32.0 / 3.0 + q * q * (32.0 * q - 38.4)) * h3
        p = (-2.8 + q * q * (16.0 / 3.0 + q * q * (6.4 * q - 9.6))) * hinv
    else:
        g = (
            64.0 / 3.0 - 48.0 * q + 38.4 * q * q - 32.0 / 3.0 * q * q * q - 1.0 / 15.0 / (q * q * q)
        ) * h3
        inner = 32.0 / 3.0 + q * (-16.0 + q * (9.6 - 32.0 / 15.0 * q))
        p = (-3.2 + 1.0 / 15.0 / q + q * q * inner) * hinv
    return g, p


def spline_per_body(xi: Any, xj: Any) -> tuple[float, float, float, float]:
    """Gravity of a cubic-spline mass distribution: each point's support radius ``h`` in its
    4th column, a pair softened with ``h = max(h_i, h_j)`` (pytreegrav's convention).

    Beyond ``h`` the pair is Newtonian; inside, :func:`spline_kernel`.
    ``max`` is symmetric, so the pair laws hold and the sum halves.  A
    coincident pair with ``h = 0`` contributes nothing.
    """
    dx = xj[0] - xi[0]
    dy = xj[1] - xi[1]
    dz = xj[2] - xi[2]
    r2 = dx * dx + dy * dy + dz * dz
    h = max(xi[3], xj[3])
    if r2 == 0.0 and h == 0.0:
        return 0.0, 0.0, 0.0, 0.0
    g, p = spline_kernel(r2, h)
    return dx * g, dy * g, dz * g, p


SOFTENINGS = ("plummer", "spline")
"""``'plummer'``: ``1/sqrt(r^2 + eps^2)``; ``'spline'``: a cubic-spline mass of support ``eps``."""


def _lengths(name: str, v: Any, n: int) -> np.ndarray | None:
    """A softening length per point (None for one scalar length), validated.

    The dtype is checked before any cast: ``float()`` of a complex length
    would fail inside NumPy, and ``astype`` would drop its imaginary part.
    """
    if np.ndim(v) == 0:
        x = real(name, v)  # refuses a string, a bool or a complex number
        if not math.isfinite(x):
            raise ValueError(f"{name}={x!r}: the softening length must be a finite number >= 0")
        if x < 0:
            raise ValueError(f"{name}={x!r}: the softening length must be >= 0")
        return None
    a = plain(name, v)
    if a.dtype.kind not in "fiub":
        raise TypeError(
            f"{name} has dtype {a.dtype}: softening lengths must be real numbers (float32 or "
            "float64), one per point"
        )
    a = a.astype(np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} has shape {a.shape}: must be a scalar or ({n},), one per point")
    bad = ~np.isfinite(a) | (a < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {a[i]}: softening lengths must be finite and >= 0")
    return a


@threads.parallel
def direct_gravity(
    pos: Any,
    mass: Any = None,
    *,
    eps: Any = 0.0,
    G: float = 1.0,
    targets: Any = None,
    target_eps: Any = None,
    softening: str = "plummer",
    method: str = "auto",
    device: str = "auto",
    tile: int | None = None,
    potential: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Accelerations (and potentials) of point masses by the direct ``O(n^2)`` sum.

    .. math:: a_i = G \\sum_{j \\ne i} m_j (x_j - x_i) / (r_{ij}^2 + \\epsilon^2)^{3/2},
              \\quad \\phi_i = -G \\sum_{j \\ne i} m_j / (r_{ij}^2 + \\epsilon^2)^{1/2}

    Newton's third law (the pair field is antisymmetric, the pair potential
    symmetric) halves the work: each unordered pair is visited once.

    Parameters
    ----------
    pos : array (n, 3)
        Source positions, float32 or float64.
    mass : array (n,) or scalar, optional
        Finite masses ``>= 0`` (1 by default), the rule of every gravity verb
        (:data:`NEGATIVE_MASS`): the sum itself would be exact for either
        sign, but a tree or an expansion, which places a cell at its centre
        of mass, would not, and one rule lets code move between methods.
        Sources of both signs (charges) are :func:`pairwise_sum` with
        :func:`plummer` and signed ``weights`` (docs/nbody.md, Masses).
    eps : float or array (n,)
        Plummer softening length, ``>= 0``, one for all or one per body; a
        pair is softened with ``eps_ij^2 = (eps_i^2 + eps_j^2) / 2``
        (symmetric, so the sum still halves).  With ``eps_ij = 0`` a
        coincident pair contributes nothing.
    G : float
        Gravitational constant (1 by default: N-body units); a NumPy scalar
        or 0-d array is taken.
    targets : array (m, 3), optional
        Evaluate the field of all sources at these points instead (e.g. to
        measure a tree code's error at sample targets).  Every source counts,
        also one at the very position of a target (it adds ``-G m/eps`` to
        the potential and nothing to the acceleration).  No halving is
        possible for separate targets: ``m * n`` kernel calls.
    target_eps : float or array (m,), optional
        Softening of the targets (default: ``eps`` when it is one number,
        else 0).
    softening : {'plummer', 'spline'}
        ``'plummer'``: ``eps`` is the Plummer length and a pair uses the
        mean of the squares.  ``'spline'``: ``eps`` is the support radius
        ``h`` of a cubic-spline mass (pytreegrav's and Gadget's meaning of
        the softening), a pair uses ``max(h_i, h_j)``, and pairs farther
        apart than that are exactly Newtonian.
    method : {'auto', 'halved', 'full', 'untiled', 'reference'}
        The algorithm, as in :func:`pairwise_sum`.
    device : {'auto', 'cpu', 'cuda'}
        Where it runs, as in :func:`pairwise_sum`.
    tile : int, optional
        Points per block.
    potential : bool
        Also return the potentials (``False`` by default, as for every
        N-body verb of ``propopt_case_studies.nbody``; the pair kernel computes them
        either way, at the cost of one addition per pair).

    Returns
    -------
    acc : ndarray (n, 3) or (m, 3)
    pot : ndarray (n,) or (m,), or None
        In the dtype of ``pos`` (float64 accumulation); ``None`` unless
        ``potential=True``.  Always a pair: ``acc, pot = direct_gravity(...)``
        (before ``potential`` existed the potentials were always returned;
        pass ``potential=True`` for them).

    Raises
    ------
    OverflowError
        When the field is beyond the range of the result's dtype (two unit
        masses 1e-200 apart): never an ``inf`` or NaN.

    Notes
    -----
    ``n(n-1)/2`` pair evaluations (about 20 flops each) on numba threads;
    with targets ``m n``.  The total momentum ``sum_i m_i a_i`` vanishes up
    to rounding (the tests check it).

    The sum runs in exact units: positions and softening lengths divided by
    a power of two at least the spread of the points, masses by one near the
    largest, and the results multiplied back (an ``O(n)`` pass).  So bodies
    1e-110 or 1e110 apart get their field (``1e220``, ``1e-220``) where
    ``r^3`` or ``r^2`` would overflow in the user's units, and any other
    input gets the same bits as without the scaling.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import direct_gravity
    >>> x, m = np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0])
    >>> acc, pot = direct_gravity(x, m, potential=True)
    >>> acc.tolist(), pot.tolist()
    ([[0.75, 0.0, 0.0], [-0.25, 0.0, 0.0]], [-1.5, -0.5])
    """
    _check_method(method, device)
    if device == "auto" and _kinds.array_kind(pos) in (_kinds.CUDA, _kinds.TORCH_CUDA):
        device = "cuda"
    if softening not in SOFTENINGS:
        raise ValueError(
            f"softening={softening!r} is not one of {', '.join(map(repr, SOFTENINGS))}"
        )
    potential = flag("potential", potential)
    X = points("pos", _maybe_host(pos), 3)
    # masses and lengths may live on the GPU with the positions: the host reads them once
    mass, eps, target_eps = (_maybe_host(v) for v in (mass, eps, target_eps))
    e = _lengths("eps", eps, X.shape[0])
    G = real("G", G)  # a NumPy scalar or 0-d array too
    if not math.isfinite(G):
        raise ValueError(f"G={G!r}: the gravitational constant must be a finite number")
    m = check_masses(mass, X.shape[0])
    T = None if targets is None else points("targets", _maybe_host(targets), 3)
    if T is None and target_eps is not None:
        raise ValueError("target_eps is given without targets: pass targets=, or leave it out")
    te = None if T is None or target_eps is None else _lengths("target_eps", target_eps, len(T))
    spline = softening == "spline"
    per_point = spline or e is not None or (T is not None and target_eps is not None)
    e_all = np.full(X.shape[0], float(eps)) if e is None else e
    t_all = None
    if T is not None:
        if te is not None:
            t_all = te
        else:
            t_eps = (
                float(target_eps) if target_eps is not None else (float(eps) if e is None else 0.0)
            )
            t_all = np.full(len(T), t_eps)
    # exact units: lengths of 2**lexp, masses of 2**mexp (see _units)
    lexp, mexp = _units(X, T, e_all, t_all, m)
    X = np.ldexp(X, -lexp).astype(X.dtype, copy=False)
    T = None if T is None else np.ldexp(T, -lexp).astype(T.dtype, copy=False)
    e_all = np.ldexp(e_all, -lexp)
    if per_point:
        # each point's eps^2 (Plummer) or h (spline) rides along as a 4th column
        power = 1 if spline else 2
        X = np.column_stack([X, (e_all**power).astype(X.dtype)])
        if T is not None and t_all is not None:
            t_all = np.ldexp(t_all, -lexp)
            T = np.column_stack([T, (t_all**power).astype(T.dtype)])
    res = pairwise_sum(
        spline_per_body if spline else (plummer_per_body if per_point else plummer),
        X,
        np.ldexp(m, -mexp),
        symmetry=GRAVITY_SYMMETRY,
        args=() if per_point else (float(e_all[0]) ** 2 if len(e_all) else 0.0,),
        targets=T,
        method=method,
        device=device,
        tile=tile,
    )
    where = "pos" if T is None else "targets"
    return _unscale(res, X.dtype, G, lexp, mexp, where, potential)


NEGATIVE_MASS = (
    "masses must be >= 0 in every gravity verb (a tree cell or a multipole expansion acts "
    "through its centre of mass, which masses of both signs put anywhere); for sources of "
    "both signs use propopt.pairwise_sum, whose weights take either sign (docs/nbody.md)"
)
"""The one mass rule of :func:`direct_gravity` and every N-body verb, and the way out."""


def check_masses(mass: Any, n: int, name: str = "mass") -> np.ndarray:
    """``(n,)`` float64 masses (1 each for None): finite and ``>= 0``, the rule of every
    gravity verb (:data:`NEGATIVE_MASS`); errors name the body to fix."""
    if mass is None:
        return np.ones(n)
    a = plain(name, mass)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}: pass real numbers")
    if a.ndim != 0 and a.shape != (n,):
        raise ValueError(f"{name} has shape {a.shape}: must be a scalar or ({n},), one per body")
    f = np.full(n, float(a)) if a.ndim == 0 else a.astype(np.float64, copy=False)
    bad = ~np.isfinite(f) | (f < 0)
    if bad.any():
        i = int(np.argmax(bad))
        where = f"{name}={float(a)!r}" if a.ndim == 0 else f"{name}[{i}] = {f[i]}"
        if not math.isfinite(f[i]):
            fix = "" if a.ndim == 0 else f" (fix or drop body {i})"
            raise ValueError(f"{where}: masses must be finite and >= 0{fix}")
        raise ValueError(f"{where}: {NEGATIVE_MASS}")
    return np.ascontiguousarray(f)


def _exponent(x: float) -> int:
    """``e`` with ``x < 2**e`` (0 for 0): a power of two at least ``x``."""
    return int(np.frexp(x)[1]) if x > 0 else 0


def _units(
    X: np.ndarray, T: np.ndarray | None, e: np.ndarray, te: np.ndarray | None, m: np.ndarray
) -> tuple[int, int]:
    """Exponents of the units of the sum: lengths ``2**lexp``, masses ``2**mexp``.

    ``2**lexp`` exceeds the side of the cube around every source and target
    and every softening length, so that in these units no ``r^2`` can
    overflow (bodies 1e110 apart) and ``r^-3`` underflows or overflows only
    for pairs closer than about 1e-100 of the spread (not two bodies 1e-110
    apart).  Dividing by a power of two is exact, so for every ordinary
    input the result has the same bits as the sum in the user's units.  An
    ``O(n)`` pass.
    """
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for P in (X, T):
        if P is not None and P.shape[0]:
            lo = np.minimum(lo, P[:, :3].min(axis=0))
            hi = np.maximum(hi, P[:, :3].max(axis=0))
    # half the side: hi - lo itself may overflow
    half = float((0.5 * hi - 0.5 * lo).max()) if np.isfinite(lo).all() else 0.0
    for v in (e, te):
        if v is not None and v.size:
            half = max(half, 0.5 * float(v.max()))
    big = float(np.abs(m).max()) if m.size else 0.0
    return _exponent(half) + 1 if half > 0 else 0, _exponent(big) - 1 if big > 0 else 0


def _power(e: int) -> str:
    """``2**e`` for a message: ``'1.0e+10'``, or ``'2**1100'`` beyond float64."""
    return f"{math.ldexp(1.0, e):.1e}" if -1070 < e < 1020 else f"2**{e}"


def _unscale(
    res: np.ndarray,
    dtype: np.dtype,
    G: float,
    lexp: int,
    mexp: int,
    where: str,
    potential: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``res`` (field and potential in the units of :func:`_units`, G = 1) in the user's units.

    ``G = g 2**ge`` with ``1/2 <= |g| < 1``, so that ``res * g`` cannot overflow
    and the rest is an exact power of two.  A field beyond ``dtype`` is an
    ``OverflowError``, not inf or NaN; without ``potential`` the potential is
    neither checked nor returned (None).
    """
    g, ge = np.frexp(float(G))
    r = np.asarray(res, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        acc = np.ldexp(r[:, :3] * g, mexp - 2 * lexp + int(ge)).astype(dtype)
        pot = np.ldexp(r[:, 3] * g, mexp - lexp + int(ge)).astype(dtype)
    bad = ~(np.isfinite(acc).all(axis=1) & (np.isfinite(pot) if potential else True))
    if bad.any():
        i = int(np.argmax(bad))
        raise OverflowError(
            f"the field at {where}[{i}] overflows {np.dtype(dtype).name}: bodies about "
            f"{_power(lexp)} apart with masses up to {_power(mexp + 1)} (G={G}) pull harder "
            f"than {np.finfo(dtype).max:.1e}, or two bodies are closer than "
            f"{'1e-12' if dtype == np.float32 else '1e-100'} of that spread; express "
            f"positions and masses in larger units{' or pass float64' * (dtype == np.float32)}"
        )
    return np.ascontiguousarray(acc), (np.ascontiguousarray(pot) if potential else None)


def _maybe_host(x: Any) -> Any:
    from .pairs import _host

    return _host(x)


__all__ = [
    "GRAVITY_SYMMETRY",
    "METHODS",
    "NEGATIVE_MASS",
    "SOFTENINGS",
    "check_masses",
    "direct_gravity",
    "plummer",
    "spline_kernel",
    "spline_per_body",
]
