"""Bad inputs of ``direct_gravity / pairwise_sum``: one test per case (``_judge``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge
from tests.oracles import gravity_field

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

pytestmark = pytest.mark.bad_inputs


def symmetry_cases(case: Table) -> None:
    DG = lambda *a, **kw: pp.direct_gravity(*a, potential=True, **kw)  # noqa: E731
    P = lambda: np.array([[0.0, 0, 0], [1, 0, 0], [0, 2, 0]])  # noqa: E731
    ref = lambda **kw: gravity_field(P(), **kw)  # noqa: E731
    case("basic", lambda: DG(P()), Value(lambda: ref(), rtol=1e-14))
    case(
        "potential by default: None",
        lambda: pp.direct_gravity(P())[1] is None,
        Value(True),
    )
    case("potential='no'", lambda: pp.direct_gravity(P(), potential="no"), Error("potential"))
    case("eps=-1", lambda: DG(P(), eps=-1), Error("eps"))
    case("eps='0.1'", lambda: DG(P(), eps="0.1"), Error("eps"))
    case("eps=nan", lambda: DG(P(), eps=float("nan")), Error("eps"))
    case("eps of the wrong length", lambda: DG(P(), eps=np.ones(2)), Error("eps"))
    case(
        "eps as a list",
        lambda: DG(P(), eps=[0.1, 0.1, 0.1]),
        Value(lambda: ref(eps=0.1), rtol=1e-13),
    )
    case("eps with a complex entry", lambda: DG(P(), eps=[0.1 + 1j, 0.1, 0.1]), Error("eps"))
    case("eps (3, 1)", lambda: DG(P(), eps=np.ones((3, 1))), Error("eps"))
    case("G='1'", lambda: DG(P(), G="1"), Error("G"))
    case("G=nan", lambda: DG(P(), G=float("nan")), Error("G"))
    case("G=1j", lambda: DG(P(), G=1j), Error("G"))
    case("G=np.float32(2)", lambda: DG(P(), G=np.float32(2)), Value(lambda: ref(G=2.0), rtol=1e-14))
    case(
        "G=np.array(2.0) (0-d)",
        lambda: DG(P(), G=np.array(2.0)),
        Value(lambda: ref(G=2.0), rtol=1e-14),
    )
    case("G=True", lambda: DG(P(), G=True), Error("G"))
    case("eps=np.array(0.1) (0-d)", lambda: DG(P(), eps=np.array(0.1)), Value(lambda: ref(eps=0.1)))
    case("eps=0.1+0j", lambda: DG(P(), eps=0.1 + 0j), Error("eps"))
    case("negative masses", lambda: DG(P(), -np.ones(3)), Error("mass"))
    case("complex masses", lambda: DG(P(), np.ones(3) + 1j), Error("mass"))
    case("inf mass", lambda: DG(P(), np.array([1, np.inf, 1])), Error("mass"))
    case("mass='1'", lambda: DG(P(), "1"), Error("mass"))
    case("mass (3, 1)", lambda: DG(P(), np.ones((3, 1))), Error("mass"))
    case("pos (3, 2)", lambda: DG(np.ones((3, 2))), Error("pos"))
    case("complex pos", lambda: DG(P() + 0j), Error("pos"))
    case(
        "object pos",
        lambda: DG(P().astype(object)),
        Either(Value(lambda: ref(), rtol=1e-14), "pos"),
    )
    case("string pos", lambda: DG(np.array([["a", "b", "c"]])), Error("pos"))
    case(
        "bool pos",
        lambda: DG(P() > 0),
        Value(lambda: gravity_field((P() > 0).astype(float)), rtol=1e-14),
    )
    case(
        "int pos",
        lambda: DG(np.array([[0, 0, 0], [1, 0, 0]])),
        Value(lambda: gravity_field(np.array([[0.0, 0, 0], [1, 0, 0]])), rtol=1e-14),
    )
    case(
        "list pos",
        lambda: DG([[0, 0, 0], [1, 0, 0]]),
        Value(lambda: gravity_field(np.array([[0.0, 0, 0], [1, 0, 0]])), rtol=1e-14),
    )
    case("generator pos", lambda: DG(p for p in [[0, 0, 0], [1, 0, 0]]), Error("pos"))
    if torch is not None:
        case(
            "torch pos requiring grad",
            lambda: DG(torch.tensor(P(), requires_grad=True)),
            Value(lambda: ref(), rtol=1e-14),
        )
    case("method='fast'", lambda: DG(P(), method="fast"), Error("method"))
    case("device='gpu'", lambda: DG(P(), device="gpu"), Error("device"))
    case("softening='gauss'", lambda: DG(P(), softening="gauss"), Error("softening"))
    case("tile=0", lambda: DG(P(), tile=0), Error("tile"))
    case("tile=2.0", lambda: DG(P(), tile=2.0), Error("tile"))
    case("target_eps without targets", lambda: DG(P(), target_eps=0.1), Error("target_eps"))
    case("targets (2, 2)", lambda: DG(P(), targets=np.ones((2, 2))), Error("targets"))
    case(
        "one target of shape (3,)",
        lambda: DG(P(), targets=np.array([5.0, 0, 0])),
        Either(Value(lambda: gravity_field(P(), targets=[[5.0, 0, 0]]), rtol=1e-14), "targets"),
    )
    case(
        "targets with method='halved'",
        lambda: DG(P(), targets=P(), method="halved"),
        Error("method", "targets"),
    )
    case(
        "bodies 1e300 apart",
        lambda: DG(np.array([[0.0, 0, 0], [1e300, 0, 0]])),
        Value(lambda: gravity_field(np.array([[0.0, 0, 0], [1e300, 0, 0]])), rtol=1e-14),
    )
    case(
        "bodies 1e-150 apart (field 1e300)",
        lambda: DG(np.array([[0.0, 0, 0], [1e-150, 0, 0]])),
        Value(
            lambda: (np.array([[1e300, 0, 0], [-1e300, 0, 0]]), np.array([-1e150, -1e150])),
            rtol=1e-14,
        ),
    )
    case(
        "bodies 1e-300 apart (field overflows)",
        lambda: DG(np.array([[0.0, 0, 0], [1e-300, 0, 0]])),
        Error("pos"),
    )
    case(
        "coincident bodies, eps=0",
        lambda: DG(np.zeros((2, 3))),
        Value((np.zeros((2, 3)), np.zeros(2))),
    )
    case("float16 pos", lambda: DG(P().astype(np.float16)), Value(lambda: ref(), rtol=1e-6))
    case(
        "float32 field overflows",
        lambda: DG(np.array([[0.0, 0, 0], [1e-30, 0, 0]], np.float32)),
        Error("pos"),
    )
    case("no bodies", lambda: DG(np.zeros((0, 3))), Value((np.zeros((0, 3)), np.zeros(0))))
    case("one body", lambda: DG(np.zeros((1, 3))), Value((np.zeros((1, 3)), np.zeros(1))))
    case(
        "per-body eps, float32",
        lambda: DG(P().astype(np.float32), eps=np.array([0.1, 0.2, 0.3])),
        Value(lambda: ref(eps=np.array([0.1, 0.2, 0.3])), rtol=1e-6),
    )
    case(
        "Fortran, negative-stride pos",
        lambda: DG(np.asfortranarray(P())[::-1]),
        Value(lambda: gravity_field(P()[::-1]), rtol=1e-14),
    )
    case(
        "big-endian pos and masses",
        lambda: DG(P().astype(">f8"), np.array([1.0, 2, 3]).astype(">f8")),
        Value(lambda: ref(mass=np.array([1.0, 2, 3])), rtol=1e-14),
    )
    PS = pp.pairwise_sum

    def inv(xi: Any, xj: Any) -> float:
        return 1.0 / ((xi[0] - xj[0]) ** 2 + (xi[1] - xj[1]) ** 2 + (xi[2] - xj[2]) ** 2) ** 0.5

    def pinv(w: Any = None) -> np.ndarray:
        X = P()
        return np.array(
            [
                sum(
                    (1.0 if w is None else w[j]) / float(np.linalg.norm(X[i] - X[j]))
                    for j in range(3)
                    if j != i
                )
                for i in range(3)
            ]
        )

    case("pairwise_sum basic", lambda: PS(inv, P()), Value(lambda: pinv(), rtol=1e-14))
    case(
        "pairwise_sum method='reference'",
        lambda: PS(inv, P(), method="reference"),
        Value(lambda: pinv(), rtol=1e-14),
    )
    case(
        "pairwise_sum method='untiled'",
        lambda: PS(inv, P(), method="untiled"),
        Value(lambda: pinv(), rtol=1e-14),
    )
    case("kernel=None", lambda: PS(None, P()), Error("kernel"))
    case("symmetry='sym'", lambda: PS(inv, P(), symmetry="sym"), Error("symmetry"))
    case(
        "symmetry list of the wrong length",
        lambda: PS(inv, P(), symmetry=["symmetric", "symmetric"]),
        Error("symmetry"),
    )
    case("args as a list", lambda: PS(inv, P(), args=[1.0]), Error("args"))
    case("args holding a string", lambda: PS(lambda a, b, c: c, P(), args=("a",)), Error("args"))
    case("kernel of one argument", lambda: PS(lambda a: 1.0, P()), Error("kernel"))
    case("kernel returning an array", lambda: PS(lambda a, b: a - b, P()), Error("kernel"))
    case("kernel returning a string", lambda: PS(lambda a, b: "x", P()), Error("kernel"))
    case("kernel returning complex", lambda: PS(lambda a, b: 1j, P()), Error("kernel"))
    case("kernel returning an int", lambda: PS(lambda a, b: 1, P()), Value(np.full(3, 2.0)))
    case(
        "kernel numba cannot compile", lambda: PS(lambda a, b: {}.get(1, 1.0), P()), Error("kernel")
    )
    case(
        "weights with NaN", lambda: PS(inv, P(), weights=np.array([1, np.nan, 1])), Error("weights")
    )
    case(
        "negative weights",
        lambda: PS(inv, P(), weights=np.array([1, -1, 1.0])),
        Value(lambda: pinv([1, -1, 1.0]), rtol=1e-14),
    )
    case("X 1-D", lambda: PS(inv, np.ones(3)), Error("X"))
    case("X with 0 columns", lambda: PS(inv, np.ones((3, 0))), Error("X"))
    case(
        "targets of another dimension",
        lambda: PS(inv, P(), targets=np.ones((2, 2))),
        Error("targets"),
    )
    case("pairwise_sum device='gpu'", lambda: PS(inv, P(), device="gpu"), Error("device"))
    case("float16 X", lambda: PS(inv, P().astype(np.float16)), Value(lambda: pinv(), rtol=1e-6))


SYMMETRY = Table("direct_gravity / pairwise_sum", symmetry_cases)


@pytest.mark.parametrize("c", SYMMETRY.params())
def test_symmetry(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
