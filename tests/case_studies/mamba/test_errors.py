"""Bad input: messages name the argument and the expected shape."""

import numpy as np
import pytest

from case_studies.mamba import chapter_scan, selective_scan, step

from ._data import inputs


def _d(**kw):
    d = inputs(batch=2, dim=4, L=5, N=3, extras=True)
    d.update(kw)
    return d


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("delta", np.ones((2, 4, 6)), r"delta has shape \(2, 4, 6\); expected \(batch, dim, L\)"),
        ("A", np.ones((5, 3)), r"A has shape \(5, 3\); expected \(dim, d_state\) = \(4, N\)"),
        ("B", np.ones((2, 3, 4)), r"B has shape \(2, 3, 4\); expected \(batch, d_state, L\)"),
        ("C", np.ones((2, 3, 3, 5)), r"C has shape .*groups=3 must divide dim=4"),
        ("C", np.ones(3), r"C has shape \(3,\); expected \(dim, d_state\)"),
        ("D", np.ones(5), r"D has shape \(5,\); expected \(dim,\) = \(4,\)"),
        ("z", np.ones((2, 4, 4)), r"z has shape \(2, 4, 4\); expected"),
        ("delta_bias", np.ones((4, 1)), r"delta_bias has shape \(4, 1\)"),
        ("initial_state", np.ones((2, 4, 2)), r"initial_state has shape \(2, 4, 2\); expected"),
        ("u", np.ones((4, 5)), r"u has shape \(4, 5\); expected \(batch, dim, L\)"),
    ],
)
def test_shape_errors_name_the_argument(name, value, match):
    with pytest.raises(ValueError, match=match):
        selective_scan(**_d(**{name: value}))


def test_type_and_option_errors():
    d = _d()
    with pytest.raises(ValueError, match=r"method='gpu' is not one of 'auto', 'reference'"):
        selective_scan(**d, method="gpu")
    with pytest.raises(TypeError, match="complex A, B, C"):
        selective_scan(**_d(A=d["A"].astype(np.complex64)))
    with pytest.raises(TypeError, match="int64; expected one of"):
        selective_scan(**_d(u=np.ones((2, 4, 5), np.int64)))
    with pytest.raises(TypeError, match="D: expected a numpy array or a torch tensor, got list"):
        selective_scan(**_d(D=[1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match="method='cuda' needs torch CUDA tensors"):
        selective_scan(**d, method="cuda")


def test_mixed_libraries_rejected():
    torch = pytest.importorskip("torch")
    d = _d()
    d["u"] = torch.from_numpy(d["u"])
    with pytest.raises(
        TypeError, match="must all be numpy, all torch CPU or all torch CUDA; got u: torch"
    ):
        selective_scan(**d)


def test_step_and_chapter_errors():
    state = np.zeros((2, 4, 3))
    with pytest.raises(ValueError, match=r"dt has shape \(2, 5\); expected \(batch, dim\)"):
        step(state, np.ones((2, 4)), np.ones((2, 5)), np.ones((4, 3)), np.ones((2, 3)),
             np.ones((2, 3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"B has shape \(2, 3, 3\); expected \(batch, d_state\)"):
        step(state, np.ones((2, 4)), np.ones((2, 4)), np.ones((4, 3)), np.ones((2, 3, 3)),
             np.ones((2, 3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"x has shape \(2, 4\); expected 3 dimensions"):
        chapter_scan(np.ones((2, 4)), np.ones((4, 3)), np.ones((2, 1, 3)), np.ones((2, 1, 3)),
                     np.ones((2, 1, 4)))  # fmt: skip
