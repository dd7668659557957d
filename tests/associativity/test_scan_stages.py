"""The stages of ``associative_scan`` one at a time: normalize, plan, run, and the transforms.

Every expected value is written here with plain loops or ``np.cumsum`` in
float64, sharing no code with the library.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import propopt as pp
from propopt.associativity.scan import _arrays, _backends, _half, _masked, _segments, _stages
from propopt.audit import AssociativityError


def _loop_cumsum(x: np.ndarray) -> np.ndarray:
    out, acc = np.empty(len(x)), 0.0
    for i, v in enumerate(x):
        acc += float(v)
        out[i] = acc
    return out


# ---------------------------------------------------------------- normalize
def test_normalize_flattens_and_resolves_once():
    x, y = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    req = _stages.normalize(lambda a, b: a, {"b": y, "a": x}, axis=-1, exclusive=True,
                            identity={"a": 0.0, "b": 1.0})  # fmt: skip
    assert req.axis == 1 and req.kind == "numpy" and req.paths == ("elems['a']", "elems['b']")
    assert req.leaves[0] is x and req.leaves[1] is y
    assert (req.method, req.device) == ("auto", "auto")
    assert [np.asarray(e).tolist() for e in req.identity] == [[[0.0], [0.0]], [[1.0], [1.0]]]
    assert req.mask is None and req.outs is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.axis = 0  # type: ignore[misc]


def test_normalize_a_monoid_keeps_its_own_identity():
    req = _stages.normalize(pp.add, np.arange(4.0), identity=0.0, exclusive=True)
    assert req.identity is None  # checked equal to add's own, which every stage uses
    with pytest.raises(ValueError, match=r"identity=1\.0 is not the identity of monoid 'add'"):
        _stages.normalize(pp.add, np.arange(4.0), identity=1.0)


def test_normalize_unmasks_and_fills_the_sample():
    x = np.ma.array([1.0, 5.0, 2.0], mask=[False, True, False])
    req = _stages.normalize(pp.add, x)
    assert type(req.leaves[0]) is np.ndarray and req.mask.tolist() == [False, True, False]
    assert req.sample.tolist() == [1.0, 0.0, 2.0]  # the law check sees the identity


def test_normalize_refuses_bad_flags():
    with pytest.raises(TypeError, match="reverse"):
        _stages.normalize(pp.add, np.ones(3), reverse="yes")
    with pytest.raises(ValueError, match="holds no arrays"):
        _stages.normalize(pp.add, ())


# ---------------------------------------------------------------------- plan
def test_plan_without_transforms_writes_out_directly():
    x, out = np.arange(5.0), np.empty(5)
    staged = _stages.plan(_stages.normalize(pp.add, x, out=out))
    assert staged.backend == ("tiled", "cpu") and staged.undo == ()
    assert staged.scan.out is not None and np.shares_memory(staged.scan.out[0], out)
    with pytest.raises(dataclasses.FrozenInstanceError):
        staged.scan.exclusive = True  # type: ignore[misc]


def test_plan_stacks_the_transforms_in_order():
    x = np.ma.array(np.arange(1.0, 5.0, dtype=np.float16), mask=[0, 1, 0, 0])
    staged = _stages.plan(_stages.normalize(pp.add, x, reset=np.array([1, 0, 1, 0], bool)))
    assert len(staged.undo) == 3  # half, mask, segments
    assert staged.scan.leaves[1].dtype == np.float32  # widened, after the flags
    assert staged.scan.leaves[1].tolist() == [1.0, 0.0, 3.0, 4.0]  # the masked one is 0
    assert staged.scan.fn.name != "add" and not staged.scan.exclusive


def test_plan_a_plain_callable_goes_generic():
    staged = _stages.plan(_stages.normalize(lambda a, b: a + b, np.ones(4), check=False))
    assert staged.backend == ("generic", "cpu") and staged.scan.identity is None


# ----------------------------------------------------------------------- run
def test_run_undoes_in_reverse_and_rebuilds_the_tree():
    x = np.ma.array([1.0, 2.0, 4.0, 8.0], mask=[0, 1, 0, 0])
    got = _stages.run(_stages.plan(_stages.normalize(pp.add, {"x": x})))
    assert isinstance(got["x"], np.ma.MaskedArray)
    assert got["x"].mask.tolist() == [False, True, False, False]
    assert got["x"].filled(-1).tolist() == [1.0, -1.0, 5.0, 13.0]


def test_run_checks_the_law():
    req = _stages.normalize(lambda a, b: a - b, np.arange(10.0), check=True)
    with pytest.raises(AssociativityError):
        _stages.run(_stages.plan(req))


# ------------------------------------------------------- transforms, backends
def test_half_enter_and_undo():
    x = np.array([1.0, 2.0, 3.0], np.float16)
    leaves, undo = _half.enter([x], kind="numpy", what="monoid 'add'")
    assert leaves[0].dtype == np.float32
    back = undo([leaves[0] * 2])
    assert back[0].dtype == np.float16 and back[0].tolist() == [2.0, 4.0, 6.0]


def test_masked_enter_and_undo():
    mask = np.array([False, True])
    leaves, undo = _masked.enter([np.array([3.0, 7.0])], mask=mask, fn=pp.mul, identity=None,
                                 paths=("elems",))  # fmt: skip
    assert leaves[0].tolist() == [3.0, 1.0]
    out = undo([np.array([3.0, 3.0])])
    assert out[0].mask.tolist() == [False, True]


def test_segments_enter_and_undo_exclusive_reverse():
    x = np.arange(1.0, 6.0)
    reset = np.array([1, 0, 0, 1, 0], bool)
    leaves, undo = _segments.enter([x], fn=pp.add, reset=reset, kind="numpy", axis=0,
                                   reverse=True, exclusive=True, identity=None)  # fmt: skip
    assert len(leaves) == 2 and leaves[0].tolist() == [0.0, 0.0, 1.0, 0.0, 1.0]
    fn, _ = _segments.wrap(pp.add, pp.add.combine_leaves)
    scanned = pp.associative_scan(fn, tuple(leaves), reverse=True, method="reference")
    got = undo(list(scanned))[0]
    # reverse exclusive per segment [1, 2, 3] [4, 5]: suffix sums after i
    assert got.tolist() == [5.0, 3.0, 0.0, 5.0, 0.0]


def test_one_array_namespace():
    x = np.array([1, 2, 3])
    assert _arrays.where(x > 1, x, 0).tolist() == [0, 2, 3]
    assert _arrays.concat([x, x], 0).tolist() == [1, 2, 3, 1, 2, 3]
    assert _arrays.filled_like(np.array([True, False, True]), np.ones(3, np.float32),
                               "numpy").tolist() == [1.0, 0.0, 1.0]  # fmt: skip
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 2.0])
    assert _arrays.own(np.array([True, False]), "torch", t).dtype == torch.bool
    assert _arrays.host(t).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("key", [("tiled", "cpu"), ("generic", "cpu"), ("reference", "cpu")])
def test_every_host_backend_takes_no_elements_and_an_exclusive_start(key):
    staged = _stages.plan(_stages.normalize(pp.add, np.arange(1.0, 6.0), exclusive=True))
    got = _backends.BACKENDS[key].run(staged.scan)
    expected = np.concatenate([[0.0], _loop_cumsum(np.arange(1.0, 5.0))])
    np.testing.assert_array_equal(np.asarray(got[0]), expected)
    empty = dataclasses.replace(staged.scan, leaves=[np.zeros((2, 0))], axis=1)
    out = _backends.BACKENDS[key].run(empty)
    assert out[0].shape == (2, 0)


def test_a_monoid_identity_is_checked_in_the_kernels_dtype_for_half_precision():
    torch = pytest.importorskip("torch")
    x = torch.arange(1.0, 5.0).to(torch.bfloat16)
    req = _stages.normalize(pp.add, x, identity=0.0, exclusive=True)
    assert req.identity is None  # bfloat16 has no NumPy dtype: checked on a float32 element
    with pytest.raises(ValueError, match=r"identity=2\.0 is not the identity of monoid 'add'"):
        _stages.normalize(pp.add, x, identity=2.0)
    got = _stages.run(_stages.plan(req))
    assert got.dtype == torch.bfloat16 and got.tolist() == [0.0, 1.0, 3.0, 6.0]
