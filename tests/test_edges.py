"""An array passed where a number belongs gives one short line, not NumPy's wrapped repr."""

import numpy as np
import pytest

import propopt as pp
from propopt.arrays import shown
from propopt.redundancy import MisraGries

BIG = np.arange(100_000.0)  # NumPy's repr of it spans two lines


def _leapfrog(**kw):
    from propopt_case_studies.nbody.integrate import leapfrog

    x = np.random.default_rng(0).random((8, 3))
    return leapfrog(x, x, np.ones(8), **({"dt": 0.1, "steps": 1} | kw))


def _ssd(chunk_size):
    from propopt_case_studies.mamba import ssd_scan

    one = np.ones
    return ssd_scan(one((1, 4, 2, 3)), one((1, 4, 2)), -one(2), one((1, 4, 1, 3)),
                    one((1, 4, 1, 3)), chunk_size=chunk_size)  # fmt: skip


def _plummer(n):
    from propopt_case_studies.nbody import plummer_sphere

    return plummer_sphere(n)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("k", lambda: pp.topk(np.ones(4), BIG)),
        ("k", lambda: pp.TopK.empty(BIG, np.float64)),
        ("start", lambda: pp.TopK.empty(3, np.float64, start=BIG)),
        ("offset", lambda: pp.TopK.empty(3, np.float64).update(np.ones(2), offset=BIG)),
        ("axis", lambda: pp.associative_scan(pp.add, np.ones(4), axis=BIG)),
        ("m", lambda: MisraGries(BIG)),
        ("threshold", lambda: MisraGries(3).heavy_hitters(threshold=BIG)),
        ("rank", lambda: pp.low_rank(np.ones((5, 5)), BIG)),
        ("n", lambda: pp.set_num_threads(BIG)),
        ("dt", lambda: _leapfrog(dt=BIG)),
        ("steps", lambda: _leapfrog(steps=BIG)),
        ("chunk_size", lambda: _ssd(BIG)),
        ("n", lambda: _plummer(BIG)),
    ],
)
def test_an_array_for_a_number_is_one_short_line(name, call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 200, msg
    assert name in msg and "<array of shape (100000,), dtype float64>" in msg


def test_shown():
    assert shown(BIG) == "<array of shape (100000,), dtype float64>"
    assert shown(2.5) == "2.5" and shown("3") == "'3'" and shown(np.array([3])) == "array([3])"
    assert shown("x" * 100) == "'" + "x" * 56 + "..." and len(shown("x" * 100)) == 60

    class TwoLines:
        def __repr__(self):
            return "first\n  second"

    assert shown(TwoLines()) == "first second"
