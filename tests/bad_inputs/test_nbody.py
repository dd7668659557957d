"""Bad inputs of ``nbody``: one test per case (``_judge``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.bad_inputs._judge import (
    UNCLEAR,
    Case,
    Check,
    Either,
    Error,
    Table,
    Value,
    judge,
    rng,
    to_np,
)
from tests.oracles import gravity_field

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import ml_dtypes
except ImportError:  # the cases that need it are left out
    ml_dtypes = None

pytestmark = pytest.mark.bad_inputs


def nbody_cases(case: Table) -> None:
    from propopt_case_studies import nbody as nb
    from propopt_case_studies.nbody.integrate import leapfrog

    X0, m0 = rng(15).normal(size=(40, 3)), rng(16).uniform(0.5, 1.5, 40)
    X, m = (lambda: X0.copy()), (lambda: m0.copy())
    exact = gravity_field(X0, m0)
    bh = nb.barnes_hut

    def close(rtol: float, scale: float = 1.0, X1: Any = None) -> Check:
        def pred(res: Any) -> tuple[bool, str]:
            acc, pot = res
            a0, p0 = exact if X1 is None else gravity_field(X1, m0)
            acc = to_np(acc) / scale  # compared in the units of the reference (no overflow)
            ea = float(np.max(np.linalg.norm(acc - a0, axis=1) / np.linalg.norm(a0, axis=1)))
            ep = (
                float(np.max(np.abs(to_np(pot) / scale - p0) / np.abs(p0)))
                if pot is not None
                else 0.0
            )
            return (
                ea <= rtol and ep <= rtol,
                f"max relative error: acc {ea:.2g}, pot {ep:.2g} (allowed {rtol:g})",
            )

        return Check(pred)

    case("barnes_hut theta=0 is exact", lambda: bh(X(), m(), theta=0), close(1e-12))
    case("barnes_hut default theta", lambda: bh(X(), m()), close(2e-2))
    case("theta=-1", lambda: bh(X(), m(), theta=-1), Error("theta"))
    case("theta=nan", lambda: bh(X(), m(), theta=float("nan")), Error("theta"))
    case("theta='0.5'", lambda: bh(X(), m(), theta="0.5"), Error("theta"))
    case("theta=np.array(0.0) (0-d)", lambda: bh(X(), m(), theta=np.array(0.0)), close(1e-12))
    case("G=np.array(1.0) (0-d)", lambda: bh(X(), m(), theta=0, G=np.array(1.0)), close(1e-12))
    case("quadrupole='no'", lambda: bh(X(), m(), quadrupole="no"), Error("quadrupole"))
    case("potential='no'", lambda: bh(X(), m(), potential="no"), Error("potential"))
    case("leaf_size=0", lambda: bh(X(), m(), leaf_size=0), Error("leaf_size"))
    case("group_size=2.0", lambda: bh(X(), m(), group_size=2.0), Error("group_size"))
    case("method='fast'", lambda: bh(X(), m(), method="fast"), Error("method"))
    case("device='gpu'", lambda: bh(X(), m(), device="gpu"), Error("device"))
    case("precision='float16'", lambda: bh(X(), m(), precision="float16"), Error("precision"))
    case("softening='x'", lambda: bh(X(), m(), softening="x"), Error("softening"))
    case("G='1'", lambda: bh(X(), m(), G="1"), Error("G"))
    case("negative masses", lambda: bh(X(), -m()), Error("mass"))
    case("complex masses", lambda: bh(X(), m() + 1j), Error("mass"))
    case("complex positions", lambda: bh(X() + 0j, m()), Error("pos"))
    case("positions as a list", lambda: bh(X().tolist(), m(), theta=0), close(1e-12))
    case("positions (n, 2)", lambda: bh(X()[:, :2], m()), Error("pos"))
    case(
        "no bodies",
        lambda: bh(np.zeros((0, 3)), potential=True),
        Value((np.zeros((0, 3)), np.zeros(0))),
    )
    case(
        "one body",
        lambda: bh(np.zeros((1, 3)), potential=True),
        Value((np.zeros((1, 3)), np.zeros(1))),
    )
    case(
        "coincident bodies, eps=0",
        lambda: bh(np.zeros((5, 3)), potential=True),
        Value((np.zeros((5, 3)), np.zeros(5))),
    )

    def huge_check(res: Any) -> tuple[bool, str]:
        acc, pot = (to_np(v) for v in res)
        ep = float(np.max(np.abs(pot * 1e300 - exact[1]) / np.abs(exact[1])))
        amax = float(np.abs(acc).max())
        return (
            ep <= 1e-12 and amax < 1e-307,
            f"pot relative error {ep:.2g}; |acc| <= {amax:.2g} (exact ~1e-600 underflows)",
        )

    case(
        "positions ~1e300",
        lambda: bh(X() * 1e300, m(), theta=0, potential=True),
        Check(huge_check),
    )
    case(
        "positions ~1e-300 (field overflows)",
        lambda: bh(X() * 1e-300, m()),
        Error("pos", "positions"),
    )
    case("masses ~1e300", lambda: bh(X(), m() * 1e300, theta=0), close(1e-12, 1e300))
    case(
        "float16 positions",
        lambda: bh(X().astype(np.float16), m(), theta=0),
        close(1e-12, X1=X0.astype(np.float16)),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16 positions",
            lambda: bh(X().astype(ml_dtypes.bfloat16), m(), theta=0),
            close(1e-12, X1=X0.astype(ml_dtypes.bfloat16).astype(np.float64)),
        )
    case("big-endian positions", lambda: bh(X().astype(">f8"), m(), theta=0), close(1e-12))
    if torch is not None:
        case(
            "torch positions requiring grad",
            lambda: bh(torch.tensor(X0, requires_grad=True), m(), theta=0),
            close(1e-12),
        )
    case("targets 1-D", lambda: bh(X(), m(), targets=np.zeros(3)), Error("targets"))
    case(
        "eps as a list",
        lambda: bh(X(), m(), eps=[0.1] * 40, theta=0, potential=True),
        Value(lambda: gravity_field(X0, m0, eps=0.1), rtol=1e-12),
    )
    case("eps='0.1'", lambda: bh(X(), m(), eps="0.1"), Error("eps"))
    case(
        "Octree.build box not holding the bodies",
        lambda: nb.Octree.build(X(), m(), box=(np.zeros(3), np.ones(3))),
        Error("box", "points"),
    )
    case("Octree.build box='x'", lambda: nb.Octree.build(X(), m(), box="x"), Error("box"))
    case("fmm tol=0", lambda: nb.fmm(X(), m(), tol=0), Error("tol"))
    case("fmm tol='1e-3'", lambda: nb.fmm(X(), m(), tol="1e-3"), Error("tol"))
    case("fmm tol=nan", lambda: nb.fmm(X(), m(), tol=float("nan")), Error("tol"))
    case("fmm quantile=0.9", lambda: nb.fmm(X(), m(), quantile=0.9), Error("quantile"))
    case("fmm quantile=True", lambda: nb.fmm(X(), m(), quantile=True), Error("quantile"))
    case("fmm quantile='0.5'", lambda: nb.fmm(X(), m(), quantile="0.5"), Error("quantile"))
    case("fmm order=2.5", lambda: nb.fmm(X(), m(), order=2.5), Error("order"))
    case("fmm theta=-1", lambda: nb.fmm(X(), m(), theta=-1), Error("theta"))
    case("fmm potential='no'", lambda: nb.fmm(X(), m(), potential="no"), Error("potential"))
    case(
        "fmm tol=np.float32(1e-6), G=np.array(1.0)",
        lambda: nb.fmm(X(), m(), tol=np.float32(1e-6), G=np.array(1.0), potential=True),
        close(1e-5),
    )
    case("fmm tol=1e-6", lambda: nb.fmm(X(), m(), tol=1e-6, potential=True), close(1e-5))
    case(
        "fmm no bodies",
        lambda: nb.fmm(np.zeros((0, 3)), potential=True),
        Value((np.zeros((0, 3)), np.zeros(0))),
    )
    case(
        "fmm coincident bodies",
        lambda: nb.fmm(np.zeros((5, 3)), potential=True),
        Value((np.zeros((5, 3)), np.zeros(5))),
    )
    case(
        "fmm positions ~1e-300 (field overflows)",
        lambda: nb.fmm(X() * 1e-300, m()),
        Error("pos", "positions"),
    )
    case("fmm leaf_size=0", lambda: nb.fmm(X(), m(), leaf_size=0), Error("leaf_size"))
    case("leapfrog dt=0", lambda: leapfrog(X(), X(), m(), dt=0, steps=1), Error("dt"))
    case("leapfrog steps=1.0", lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1.0), Error("steps"))
    case(
        "leapfrog vel of another shape",
        lambda: leapfrog(X(), X()[:5], m(), dt=0.1, steps=1),
        Error("vel"),
    )
    case(
        "leapfrog eps='0.1'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, eps="0.1"),
        Error("eps"),
    )
    case(
        "leapfrog theta='a'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, theta="a"),
        Error("theta"),
    )
    case(
        "leapfrog without pos",
        lambda: leapfrog(dt=0.1, steps=1),
        Error("pos"),
        reading=(UNCLEAR, "says 'pos has dtype object' when pos is missing", "dtype object"),
    )
    case("leapfrog without vel", lambda: leapfrog(X(), dt=0.1, steps=1), Error("vel"))
    case(
        "leapfrog quadrupole='no'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, method="direct", quadrupole="no"),
        Error("quadrupole"),
    )
    case(
        "leapfrog progress='no'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, method="direct", progress="no"),
        Error("progress"),
    )
    case("plummer_sphere(-1)", lambda: nb.plummer_sphere(-1), Error("n"))
    case("plummer_sphere(2.0)", lambda: nb.plummer_sphere(2.0), Error("n"))
    case("plummer_sphere(a='1')", lambda: nb.plummer_sphere(5, a="1"), Error("a"))
    case(
        "plummer_sphere(dtype=np.int32)",
        lambda: nb.plummer_sphere(5, dtype=np.int32),
        Error("dtype"),
    )
    case(
        "plummer_sphere(dtype='banana')",
        lambda: nb.plummer_sphere(5, dtype="banana"),
        Error("dtype"),
    )
    case("plummer_sphere(seed='a')", lambda: nb.plummer_sphere(5, seed="a"), Error("seed"))
    case(
        "plummer_sphere(dtype=np.float32)",
        lambda: nb.plummer_sphere(5, dtype=np.float32),
        Value(lambda: tuple(v.astype(np.float32) for v in nb.plummer_sphere(5)), dtype="float32"),
    )
    case(
        "plummer_sphere(1)",
        lambda: nb.plummer_sphere(1),
        Value((np.zeros((1, 3)), np.zeros((1, 3)), np.ones(1))),
    )
    case(
        "nbody_naive of int arrays",
        lambda: nb.nbody_naive(np.array([[0, 0, 0], [2, 0, 0]]), np.array([1, 3]), potential=True),
        Either(
            Value((np.array([[0.75, 0, 0], [-0.25, 0, 0]]), np.array([-1.5, -0.5])), rtol=1e-9),
            "pos",
        ),
    )
    case(
        "nbody_naive of lists",
        lambda: nb.nbody_naive([[0, 0, 0], [1, 0, 0]], [1, 1], potential=True),
        Either(Value(lambda: gravity_field([[0, 0, 0], [1, 0, 0]]), rtol=1e-9), "pos"),
    )
    F = nb.field
    case("field method='direct' is exact", lambda: F(X(), m(), method="direct",
                                                     potential=True), close(1e-12))  # fmt: skip
    case("field method='fmm'", lambda: F(X(), m(), method="fmm", potential=True), close(1e-3))
    case("field method='fast'", lambda: F(X(), m(), method="fast"), Error("method"))
    case("field device='gpu'", lambda: F(X(), m(), device="gpu"), Error("device"))
    case("field fmm on cuda", lambda: F(X(), m(), method="fmm", device="cuda"), Error("device"))
    case("field tol with the tree", lambda: F(X(), m(), method="tree", tol=1e-3), Error("tol"))
    case("field theta with direct", lambda: F(X(), m(), method="direct", theta=0.5),
         Error("theta"))  # fmt: skip
    case("field fmm theta=1", lambda: F(X(), m(), method="fmm", theta=1.0), Error("theta"))
    case(
        "field auto tol, quantile=0.9",
        lambda: F(X(), m(), tol=1e-4, quantile=0.9),
        Error("quantile"),
    )
    case("field tree negative masses", lambda: F(X(), -m(), method="tree"), Error("mass"))
    case("field fmm negative masses", lambda: F(X(), -m(), method="fmm"), Error("mass"))
    case("field direct negative masses", lambda: F(X(), -m(), method="direct"), Error("mass"))
    case("field auto negative masses", lambda: F(X(), -m()), Error("mass"))
    case("field dask without client", lambda: F(X(), m(), device="dask", targets=X()),
         Error("client"))  # fmt: skip


NBODY = Table("nbody", nbody_cases)


@pytest.mark.parametrize("c", NBODY.params())
def test_nbody(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
