"""The capstone's six-property audit of one function, as a table.

:func:`audit_table` takes a binary operator ``fn(a, b)``, a pair function
``f(x_i, x_j)`` over points, or a radial kernel ``k(r)``, runs the checks of
:mod:`propopt.audit` that apply to that kind of function, and returns one
verdict per property of the chapter (associativity, separability, locality,
sparsity, redundancy, symmetry): ``applies``, ``partial``, ``no`` or ``n/a``
(the property is not one a function of this kind can have), with the
evidence measured and the propopt primitive that exploits it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import _validate
from ..arrays import renamed
from ..associativity.monoid import Monoid
from ._separability import check_decay, check_low_rank
from ._symmetry import check_symmetric

PROPERTIES = ("associativity", "separability", "locality", "sparsity", "redundancy", "symmetry")
KINDS = ("auto", "operator", "pair", "kernel")

NEGLIGIBLE = 1e-7
"""A pair value below this fraction of the largest one counts as zero (sparsity)."""

FAR = 8.0
"""Distance, in cluster diameters, of the far cluster in the redundancy test."""


@dataclass
class Verdict:
    """One line of the table."""

    property: str
    verdict: str  # applies | partial | no | n/a
    evidence: str
    primitive: str = ""


@dataclass
class AuditTable:
    """The six-property audit of one function (``str()`` prints the table)."""

    name: str
    kind: str
    rows: list[Verdict] = field(default_factory=list)

    def __getitem__(self, prop: str) -> Verdict:
        for r in self.rows:
            if r.property == prop:
                return r
        raise KeyError(f"property={prop!r}; valid: {', '.join(PROPERTIES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "rows": [asdict(r) for r in self.rows]}

    def __str__(self) -> str:
        head = ("property", "verdict", "evidence", "exploit with")
        body = [(r.property, r.verdict, r.evidence, r.primitive or "-") for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        lines = [f"property audit of {self.name} ({self.kind})", ""]
        for i, row in enumerate([head, *body]):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _name(fn: Any) -> str:
    return _validate.name_of(fn, qualified=True)


def _n_params(fn: Callable[..., Any]) -> int | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL,) for p in params):
        return None
    return sum(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in params
    )


def _guess_kind(fn: Any) -> str:
    if isinstance(fn, Monoid):
        return "operator"
    n = _n_params(fn)
    if n == 1:
        return "kernel"
    if n == 2:
        return "operator"
    raise TypeError(
        f"cannot tell what kind of function {_name(fn)} is (it takes {n} required "
        "arguments); pass kind='operator' for fn(a, b), 'pair' for f(x_i, x_j) over "
        "points, or 'kernel' for k(r)"
    )


@renamed(dim="ndim")
def audit_table(fn: Any, kind: str = "auto", *, ndim: int = 3, seed: int = 0) -> AuditTable:
    """Audit the six properties of the chapter for ``fn``.

    Parameters
    ----------
    fn : Monoid or callable
        ``kind='operator'``: ``fn(a, b)`` combining two batches of elements
        elementwise (the :func:`propopt.associative_scan` convention).
        ``kind='pair'``: ``f(xi, xj)`` with ``xi``, ``xj`` of shape ``(n, ndim)``
        returning the ``n`` pair values, shape ``(n,)`` or ``(n, k)``.
        ``kind='kernel'``: ``k(r)`` of distances ``r`` (shape ``(n,)``), audited
        as the pair function ``k(|xi - xj|)``.
    kind : {'auto', 'operator', 'pair', 'kernel'}
        ``'auto'``: a :class:`~propopt.Monoid` or a two-argument callable is an
        operator, a one-argument callable a kernel.
    ndim : int
        Point dimension for pair functions and kernels.
    seed : int
        Seed of the random samples.

    Returns
    -------
    AuditTable
        One :class:`Verdict` per property, in the chapter's order.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.audit import audit_table
    >>> t = audit_table(np.maximum)
    >>> t["associativity"].verdict, t["symmetry"].verdict, t["redundancy"].verdict
    ('applies', 'applies', 'applies')
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {', '.join(map(repr, KINDS))}")
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is a {type(fn).__name__}, not a callable")
    if not isinstance(ndim, (int, np.integer)) or ndim < 1:
        raise ValueError(f"ndim={ndim!r}: give a point dimension >= 1")
    if kind == "auto":
        kind = _guess_kind(fn)
    rng = np.random.default_rng(seed)
    if kind == "operator":
        rows = _operator_rows(fn, rng)
    else:
        pair = fn if kind == "pair" else _radial(fn)
        rows = _pair_rows(pair, int(ndim), rng, kind)
    return AuditTable(_name(fn), kind, rows)


# ---------------------------------------------------------------- operators
def _operator_rows(fn: Any, rng: np.random.Generator) -> list[Verdict]:
    from ..associativity.laws import check_associative, check_commutative

    x = rng.normal(size=512) * np.exp(rng.normal(size=512))
    if isinstance(fn, Monoid) and fn.arity > 1:
        samples: Any = tuple(rng.uniform(0.5, 1.5, 512) for _ in range(fn.arity))
    else:
        samples = x
    assoc = check_associative(fn, samples, seed=int(rng.integers(1 << 31)))
    comm = check_commutative(fn, samples, seed=int(rng.integers(1 << 31)))
    na = "a property of pair interactions, not of a binary operator"
    rows = [
        Verdict(
            "associativity",
            "applies" if assoc.ok else "no",
            _brief(assoc),
            "associative_scan, chunked and tree reductions" if assoc.ok else "",
        ),
        Verdict("separability", "n/a", na),
        Verdict("locality", "n/a", na),
        Verdict("sparsity", "n/a", na),
        _idempotence(fn, samples),
        Verdict(
            "symmetry",
            "applies" if comm.ok else "no",
            ("commutative: " if comm.ok else "not commutative: ") + _brief(comm),
            "merge partial results in any order (dask tree reductions)" if comm.ok else "",
        ),
    ]
    return rows


def _brief(report: Any) -> str:
    if report.ok:
        return f"holds on {report.trials} samples (worst {report.worst:.2g} of tolerance)"
    return f"fails: worst violation {report.worst:.3g} x tolerance on {report.trials} samples"


def _idempotence(fn: Any, samples: Any) -> Verdict:
    """``fn(a, a) == a``: repeated elements change nothing (max, min, gcd, or)."""
    from .. import _pytree

    leaves = _pytree.flatten(samples, "samples")[0]
    if isinstance(fn, Monoid):
        got = list(fn.combine_leaves(leaves, leaves))
    else:
        got = _pytree.flatten(fn(samples, samples))[0]
    same = all(np.array_equal(np.asarray(g), np.asarray(x)) for g, x in zip(got, leaves))
    if same:
        return Verdict(
            "redundancy",
            "applies",
            "idempotent: fn(a, a) == a on every sample",
            "skip duplicates; overlapping windows and re-merged summaries are exact",
        )
    return Verdict("redundancy", "no", "not idempotent: fn(a, a) != a")


# ----------------------------------------------------------- pair functions
def _radial(k: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    def pair(xi: np.ndarray, xj: np.ndarray) -> Any:
        return k(np.sqrt(np.sum((xi - xj) ** 2, axis=-1)))

    pair.__name__ = getattr(k, "__name__", "kernel")
    return pair


def _values(f: Callable[[Any, Any], Any], xi: np.ndarray, xj: np.ndarray) -> np.ndarray:
    v = np.asarray(f(xi, xj), dtype=np.float64)
    if v.shape[:1] != (len(xi),):
        raise ValueError(
            f"a pair function must return one value (or vector) per pair: given {len(xi)} "
            f"pairs it returned shape {v.shape}"
        )
    return v.reshape(len(xi), -1)


def _pair_rows(f: Any, dim: int, rng: np.random.Generator, kind: str) -> list[Verdict]:
    n = 2000
    xi, xj = rng.uniform(-1, 1, (n, dim)), rng.uniform(-1, 1, (n, dim))
    v = _values(f, xi, xj)
    finite = np.isfinite(v).all(axis=1)
    rows = []

    # associativity: the per-target sum of contributions regroups
    parts = v[finite].reshape(-1, v.shape[1])
    fwd = parts.sum(axis=0)
    tree = parts[: len(parts) // 2].sum(axis=0) + parts[len(parts) // 2 :][::-1].sum(axis=0)
    scale = np.abs(parts).sum(axis=0).max() or 1.0
    diff = float(np.abs(fwd - tree).max() / scale)
    rows.append(
        Verdict(
            "associativity",
            "applies" if diff < 1e-12 else "partial",
            f"contributions are summed: regrouped sums differ by {diff:.1e} "
            "of the sum of magnitudes",
            "threaded and tree reductions of the per-target sums",
        )
    )

    rank = check_low_rank(f, ndim=dim, seed=int(rng.integers(1 << 31)))
    rows.append(
        Verdict(
            "separability",
            rank.verdict,
            str(rank.evidence),
            "propopt.low_rank, multipole moments (propopt.separability)"
            if rank.verdict != "no"
            else "",
        )
    )
    decay = check_decay(f, ndim=dim, seed=int(rng.integers(1 << 31)))
    rows.append(
        Verdict(
            "locality",
            decay.verdict,
            str(decay.evidence),
            "Morton order and tiles (propopt.locality); near/far split"
            if decay.verdict != "no"
            else "",
        )
    )
    rows.append(_sparsity(v))
    rows.append(_far_field(f, dim, rng))
    sym = check_symmetric(f, np.concatenate([xi[:256], xj[:256]]), seed=int(rng.integers(1 << 31)))
    anti = check_symmetric(
        f, np.concatenate([xi[:256], xj[:256]]), antisymmetric=True, seed=int(rng.integers(1 << 31))
    )
    if sym.ok or anti.ok:
        which = "symmetric f(j, i) = f(i, j)" if sym.ok else "antisymmetric f(j, i) = -f(i, j)"
        rows.append(
            Verdict("symmetry", "applies", which, "propopt.pairwise_sum: each unordered pair once")
        )
    else:
        rows.append(
            Verdict(
                "symmetry",
                "no",
                f"neither symmetric (worst {sym.worst:.2g} x tol) nor "
                f"antisymmetric (worst {anti.worst:.2g} x tol)",
            )
        )
    return rows


def _sparsity(v: np.ndarray) -> Verdict:
    mag = np.linalg.norm(np.where(np.isfinite(v), v, 0.0), axis=1)
    top = mag.max() if mag.size else 0.0
    if top == 0:
        return Verdict(
            "sparsity", "applies", "every sampled pair value is zero", "skip the computation"
        )
    zero = float(np.mean(mag <= NEGLIGIBLE * top))
    order = np.sort(mag)[::-1]
    share = float(order[: max(1, len(order) // 10)].sum() / order.sum())
    ev = (
        f"{zero:.0%} of random pairs negligible (< {NEGLIGIBLE:g} of the largest); "
        f"the strongest 10% carry {share:.0%} of the total"
    )
    if zero >= 0.5:
        return Verdict(
            "sparsity",
            "applies",
            ev,
            "cut off: visit only non-negligible pairs (Morton-ordered cells, propopt.locality)",
        )
    if share >= 0.5:
        return Verdict(
            "sparsity",
            "partial",
            ev,
            "treat the strong near field exactly, approximate the rest (Barnes-Hut)",
        )
    return Verdict("sparsity", "no", ev)


def _far_field(f: Any, dim: int, rng: np.random.Generator) -> Verdict:
    """A far cluster's summed effect approximated by its centre's, times its size."""
    m = 64
    src = rng.uniform(-0.5, 0.5, (m, dim))
    direction = rng.normal(size=dim)
    target = (FAR * np.sqrt(dim)) * direction / np.linalg.norm(direction)
    exact = _values(f, np.repeat(target[None], m, 0), src).sum(axis=0)
    approx = m * _values(f, target[None], src.mean(axis=0)[None])[0]
    scale = np.linalg.norm(exact)
    if not np.isfinite(scale):
        return Verdict("redundancy", "no", "the far-field sum is not finite")
    if scale == 0:
        return Verdict(
            "redundancy",
            "no",
            f"nothing to approximate: the field vanishes "
            f"{FAR:g} cluster diameters away (see sparsity)",
        )
    err = float(np.linalg.norm(approx - exact) / scale)
    ev = f"a cluster {FAR:g} diameters away acts like its centre to {err:.1e}"
    if err <= 1e-2:
        return Verdict(
            "redundancy", "applies", ev, "approximate far clusters by their moments (Barnes-Hut)"
        )
    if err <= 1e-1:
        return Verdict("redundancy", "partial", ev, "multipole moments beyond the monopole")
    return Verdict("redundancy", "no", ev)
