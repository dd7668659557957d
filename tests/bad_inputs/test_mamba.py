"""Bad inputs of ``mamba``: one test per case (``_judge``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge, rng
from tests.oracles import mamba_ref

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import ml_dtypes
except ImportError:  # the cases that need it are left out
    ml_dtypes = None

pytestmark = pytest.mark.bad_inputs


def mamba_cases(case: Table) -> None:
    from propopt_case_studies import mamba as mb

    r = rng(14)
    b, d, L, N = 1, 3, 5, 2
    u0, dl0 = r.normal(size=(b, d, L)), r.uniform(0.1, 1, (b, d, L))
    A0 = -np.exp(r.normal(size=(d, N)))
    B0, C0, D0, z0 = (
        r.normal(size=(b, N, L)),
        r.normal(size=(b, N, L)),
        r.normal(size=d),
        r.normal(size=(b, d, L)),
    )
    u, dl, A, B, C = (
        (lambda: u0.copy()),
        (lambda: dl0.copy()),
        (lambda: A0.copy()),
        (lambda: B0.copy()),
        (lambda: C0.copy()),
    )
    ss = mb.selective_scan
    ref = lambda **kw: mamba_ref(u0, dl0, A0, B0, C0, **kw)  # noqa: E731
    case(
        "selective_scan basic",
        lambda: ss(u(), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "D, z, delta_bias, softplus",
        lambda: ss(u(), dl(), A(), B(), C(), D=D0, z=z0, delta_bias=D0, delta_softplus=True),
        Value(lambda: ref(D=D0, z=z0, bias=D0, sp=True), rtol=1e-12),
    )
    case(
        "u as a list",
        lambda: ss(u().tolist(), dl(), A(), B(), C()),
        Either(Value(lambda: ref(), rtol=1e-12), "u"),
    )
    case("u 2-D", lambda: ss(u()[0], dl(), A(), B(), C()), Error("u"))
    case("A transposed", lambda: ss(u(), dl(), A().T, B(), C()), Error("A"))
    case("D of the wrong length", lambda: ss(u(), dl(), A(), B(), C(), D=np.ones(5)), Error("D"))
    case("complex A", lambda: ss(u(), dl(), A() + 0j, B(), C()), Error("A"))
    case("int u", lambda: ss(np.ones((b, d, L), int), dl(), A(), B(), C()), Error("u"))
    case("bool u", lambda: ss(u() > 0, dl(), A(), B(), C()), Error("u"))
    case(
        "float32 u, float64 rest",
        lambda: ss(u().astype(np.float32), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-5, dtype="float32"),
    )
    case(
        "float16 u and delta",
        lambda: ss(u().astype(np.float16), dl().astype(np.float16), A(), B(), C()),
        Value(
            lambda: mamba_ref(u0.astype(np.float16), dl0.astype(np.float16), A0, B0, C0),
            rtol=2e-3,
            dtype="float16",
        ),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16 u and delta",
            lambda: ss(
                u().astype(ml_dtypes.bfloat16), dl().astype(ml_dtypes.bfloat16), A(), B(), C()
            ),
            Value(
                lambda: mamba_ref(
                    u0.astype(ml_dtypes.bfloat16), dl0.astype(ml_dtypes.bfloat16), A0, B0, C0
                ),
                rtol=1e-2,
                dtype="bfloat16",
            ),
        )
    case(
        "big-endian u",
        lambda: ss(u().astype(">f8"), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "negative-stride u",
        lambda: ss(u()[:, :, ::-1], dl(), A(), B(), C()),
        Value(lambda: mamba_ref(u0[:, :, ::-1], dl0, A0, B0, C0), rtol=1e-12),
    )
    case(
        "Fortran-order u",
        lambda: ss(np.asfortranarray(u()), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "read-only inputs",
        lambda: ss(*(np.broadcast_to(v, v.shape) for v in (u(), dl(), A(), B(), C()))),
        Value(lambda: ref(), rtol=1e-12),
    )
    case("method='gpu'", lambda: ss(u(), dl(), A(), B(), C(), method="gpu"), Error("method"))
    case(
        "device='cuda' on numpy",
        lambda: ss(u(), dl(), A(), B(), C(), device="cuda"),
        Error("device", "u"),
    )
    case(
        "method='reference'",
        lambda: ss(u(), dl(), A(), B(), C(), method="reference"),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "method='parallel'",
        lambda: ss(u(), dl(), A(), B(), C(), method="parallel"),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "delta_softplus='no'",
        lambda: ss(u(), dl(), A(), B(), C(), delta_softplus="no"),
        Error("delta_softplus"),
    )
    case(
        "return_last_state='no'",
        lambda: ss(u(), dl(), A(), B(), C(), return_last_state="no"),
        Error("return_last_state"),
    )
    case(
        "L=0",
        lambda: ss(u()[:, :, :0], dl()[:, :, :0], A(), B()[:, :, :0], C()[:, :, :0]),
        Value(np.zeros((b, d, 0))),
    )
    case(
        "batch=0", lambda: ss(u()[:0], dl()[:0], A(), B()[:0], C()[:0]), Value(np.zeros((0, d, L)))
    )
    case(
        "d_state=0",
        lambda: ss(u(), dl(), A()[:, :0], B()[:, :0], C()[:, :0]),
        Either(Value(np.zeros((b, d, L))), "A"),
    )
    case(
        "NaN in u propagates",
        lambda: ss(np.where(u0 > 0, np.nan, u0), dl(), A(), B(), C()),
        Value(lambda: mamba_ref(np.where(u0 > 0, np.nan, u0), dl0, A0, B0, C0), rtol=1e-12),
    )
    case(
        "delta ~1e300",
        lambda: ss(u(), dl() * 1e300, A(), B(), C()),
        Value(lambda: mamba_ref(u0, dl0 * 1e300, A0, B0, C0), rtol=1e-12),
    )
    case(
        "initial_state of the wrong shape",
        lambda: ss(u(), dl(), A(), B(), C(), initial_state=np.zeros((b, d))),
        Error("initial_state"),
    )
    case(
        "seq_idx of floats",
        lambda: ss(u(), dl(), A(), B(), C(), seq_idx=np.zeros((b, L))),
        Error("seq_idx"),
    )
    case(
        "seq_idx with u as a list",
        lambda: ss(u().tolist(), dl(), A(), B(), C(), seq_idx=np.zeros((b, L), int)),
        Error("u"),
    )
    case(
        "cu_seqlens not ending at L",
        lambda: ss(u(), dl(), A(), B(), C(), cu_seqlens=np.array([0, 3])),
        Error("cu_seqlens"),
    )
    case(
        "groups not dividing dim",
        lambda: ss(u(), dl(), A(), np.ones((b, 2, N, L)), C()),
        Error("B", "groups"),
    )
    case(
        "delta_bias as a Python float",
        lambda: ss(u(), dl(), A(), B(), C(), delta_bias=0.5),
        Either(Value(lambda: ref(bias=np.full(d, 0.5)), rtol=1e-12), "delta_bias"),
    )
    if torch is not None:
        case(
            "torch requiring grad",
            lambda: ss(*(torch.tensor(v, requires_grad=True) for v in (u0, dl0, A0, B0, C0))),
            Value(lambda: ref(), rtol=1e-12),
        )
        case(
            "torch u, numpy rest",
            lambda: ss(torch.tensor(u0), dl(), A(), B(), C()),
            Error("u", "delta"),
        )
        case("torch int u", lambda: ss(torch.tensor(u0).int(), dl(), A(), B(), C()), Error("u"))
    x3, dlt = np.ones((1, 3, 2)), np.full((1, 3, 2), 0.5)

    def chapter_ref() -> np.ndarray:
        h, out = 0.0, []
        for _ in range(3):
            h = math.exp(-0.5) * h + 1.0
            out.append(h)
        return np.array(out)

    case(
        "chapter_scan",
        lambda: mb.chapter_scan(x3, -np.ones((2, 1)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt)[
            0, :, 0
        ],
        Value(chapter_ref, rtol=1e-12),
    )
    case(
        "chapter_scan A of the wrong shape",
        lambda: mb.chapter_scan(x3, -np.ones((1, 2)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt),
        Error("A"),
    )
    case(
        "chapter_scan method='fast'",
        lambda: mb.chapter_scan(
            x3, -np.ones((2, 1)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt, method="fast"
        ),
        Error("method"),
    )
    s1 = lambda: np.zeros((1, 2, 1))  # noqa: E731

    def step_args() -> tuple[np.ndarray, ...]:
        return np.ones((1, 2)), np.ones((1, 2)), -np.ones((2, 1)), np.ones((1, 1)), np.ones((1, 1))

    case("step basic", lambda: mb.step(s1(), *step_args()), Value(np.array([[1.0, 1.0]])))
    case(
        "step on a read-only state",
        lambda: mb.step(np.broadcast_to(np.zeros((1, 2, 1)), (1, 2, 1)), *step_args()),
        Error("state"),
    )
    case(
        "step on an int state",
        lambda: mb.step(np.zeros((1, 2, 1), int), *step_args()),
        Error("state"),
    )
    case("step on a list state", lambda: mb.step([[[0.0], [0.0]]], *step_args()), Error("state"))
    case(
        "step state_batch_indices out of range",
        lambda: mb.step(np.zeros((3, 2, 1)), *step_args(), state_batch_indices=np.array([5])),
        Error("state_batch_indices"),
    )
    case(
        "step state_batch_indices of floats",
        lambda: mb.step(np.zeros((3, 2, 1)), *step_args(), state_batch_indices=np.array([1.0])),
        Error("state_batch_indices"),
    )
    case(
        "step with x aliasing the state",
        lambda: (
            lambda s: mb.step(
                s, s[:, :, 0], np.ones((1, 2)), -np.ones((2, 1)), np.ones((1, 1)), np.ones((1, 1))
            )
        )(np.ones((1, 2, 1))),
        Value(np.full((1, 2), math.exp(-1) + 1)),
    )

    def step_noncontig() -> Any:
        s = np.zeros((1, 1, 2)).transpose(0, 2, 1)
        mb.step(s, *step_args())
        return s

    case("step writes a non-contiguous state", step_noncontig, Value(np.ones((1, 2, 1))))
    case(
        "step dt_softplus='no'",
        lambda: mb.step(s1(), *step_args(), dt_softplus="no"),
        Error("dt_softplus"),
    )
    case(
        "exps_only of a list",
        lambda: mb.exps_only([[[0.1] * 64]], np.ones((64, 1))),
        Value(np.full((1, 64), math.exp(0.1)), rtol=1e-12),
    )
    case(
        "exps_only of ints",
        lambda: mb.exps_only(np.ones((1, 1, 64), int), np.ones((64, 1), int)),
        Either(Value(np.full((1, 64), math.e), rtol=1e-6), "delta"),
    )
    case(
        "exps_only of complex",
        lambda: mb.exps_only(np.ones((1, 1, 64), complex), np.ones((64, 1))),
        Error("delta"),
    )
    case(
        "exps_only of float16",
        lambda: mb.exps_only(np.ones((1, 1, 64), np.float16), np.ones((64, 1))),
        Either(Value(np.full((1, 64), math.e), rtol=1e-3), "delta"),
    )
    case(
        "exps_only d_model=63",
        lambda: mb.exps_only(np.ones((1, 1, 63)), np.ones((63, 1))),
        Error("delta"),
    )
    # Mamba-2
    H, Pd, G, Ns, L2 = 2, 2, 1, 2, 6
    x2, dt2 = r.normal(size=(1, L2, H, Pd)), r.uniform(0.1, 1, (1, L2, H))
    A2, B2, C2 = (
        -np.exp(r.normal(size=H)),
        r.normal(size=(1, L2, G, Ns)),
        r.normal(size=(1, L2, G, Ns)),
    )

    def ssd_ref() -> np.ndarray:
        y = np.zeros((1, L2, H, Pd))
        for h in range(H):
            s = np.zeros((Pd, Ns))
            for t in range(L2):
                a = math.exp(dt2[0, t, h] * A2[h])
                s = a * s + dt2[0, t, h] * np.outer(x2[0, t, h], B2[0, t, 0])
                y[0, t, h] = s @ C2[0, t, 0]
        return y

    ssd = lambda **kw: mb.ssd_scan(x2.copy(), dt2.copy(), A2.copy(), B2.copy(), C2.copy(), **kw)  # noqa: E731
    case("ssd_scan chunk_size=4", lambda: ssd(chunk_size=4), Value(ssd_ref, rtol=1e-12))
    case("ssd_scan chunk_size=1", lambda: ssd(chunk_size=1), Value(ssd_ref, rtol=1e-12))
    case("ssd_scan chunk_size=0", lambda: ssd(chunk_size=0), Error("chunk_size"))
    case("ssd_scan chunk_size=2.0", lambda: ssd(chunk_size=2.0), Error("chunk_size"))
    case(
        "ssd_scan dt_limit reversed",
        lambda: ssd(chunk_size=4, dt_limit=(1.0, 0.0)),
        Error("dt_limit"),
    )
    case("ssd_scan dt_limit='a'", lambda: ssd(chunk_size=4, dt_limit="a"), Error("dt_limit"))
    case("ssd_scan method='fast'", lambda: ssd(chunk_size=4, method="fast"), Error("method"))
    case(
        "ssd_scan dt_softplus='no'",
        lambda: ssd(chunk_size=4, dt_softplus="no"),
        Error("dt_softplus"),
    )
    case(
        "ssd_scan return_final_states='no'",
        lambda: ssd(chunk_size=4, return_final_states="no"),
        Error("return_final_states"),
    )
    case(
        "ssd_scan return_varlen_states='no'",
        lambda: ssd(chunk_size=4, cu_seqlens=np.array([0, L2]), return_varlen_states="no"),
        Error("return_varlen_states"),
    )
    case(
        "ssd_scan A of shape (2, 1)",
        lambda: mb.ssd_scan(x2, dt2, A2[:, None], B2, C2, chunk_size=4),
        Error("A"),
    )


MAMBA = Table("mamba", mamba_cases)


@pytest.mark.parametrize("c", MAMBA.params())
def test_mamba(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
