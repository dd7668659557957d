"""Bad input to topk and TopK: errors name the argument, the value and the fix."""

import numpy as np
import pytest

from propopt.associativity import TopK, merge_topk, topk


def test_k_must_be_nonnegative_for_topk_and_summaries():
    with pytest.raises(ValueError, match="k=-3: k must be >= 0"):
        topk(np.ones(4), -3)
    with pytest.raises(ValueError, match="k=-3: k must be >= 0"):
        TopK.empty(-3, np.float32)


def test_k_must_be_int():
    with pytest.raises(TypeError, match=r"k must be an int, got 2\.5"):
        topk(np.ones(4), 2.5)


def test_unknown_options_list_valid_ones():
    with pytest.raises(ValueError, match="nan='drop' is not one of 'ignore', 'largest'"):
        topk(np.ones(4), 1, nan="drop")
    with pytest.raises(ValueError, match="method='gpu' is not one of 'auto', 'select', 'ref"):
        topk(np.ones(4), 1, method="gpu")
    with pytest.raises(ValueError, match=r"device='cuda', but the data \(x\) is on 'cpu'"):
        topk(np.ones(4), 1, device="cuda")
    with pytest.warns(DeprecationWarning, match="pass method='select', device='cpu'"):
        assert topk(np.arange(4.0), 1, method="cpu")[1].tolist() == [3]


def test_axis_and_input_type():
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        topk(np.ones((2, 3)), 1, axis=2)
    with pytest.raises(TypeError, match="x must be a NumPy array or a torch tensor"):
        topk([1, 2, 3], 1)
    with pytest.raises(ValueError, match="k=2: a 0-d x holds one value"):
        topk(np.array(1.0), 2)
    with pytest.raises(TypeError, match="dtype=complex128 cannot be ranked"):
        topk(np.ones(3, complex), 1)


def test_mismatched_ids_and_scores():
    s = TopK.empty(2, np.float64)
    with pytest.raises(ValueError, match="ids has 3 elements but scores has 4"):
        s.update(np.ones(4), ids=np.arange(3))
    with pytest.raises(TypeError, match="ids must be integers"):
        s.update(np.ones(2), ids=np.ones(2))
    with pytest.raises(ValueError, match="scores must be 1-D"):
        s.update(np.ones((2, 2)))


def test_scores_dtype_must_fit():
    with pytest.raises(TypeError, match="scores of dtype float64 do not fit this TopK of dtype"):
        TopK.empty(2, np.float32).update(np.ones(3))
    TopK.empty(2, np.float64).update(np.ones(3, np.float32))  # safe cast is fine


@pytest.mark.parametrize(
    "other, field",
    [
        (TopK.empty(3, np.float32), "k"),
        (TopK.empty(2, np.float32, largest=False), "largest"),
        (TopK.empty(2, np.float64), "dtype"),
        (TopK.empty(2, np.float32, nan="largest"), "nan"),
    ],
)
def test_merge_refuses_different_summaries(other, field):
    with pytest.raises(ValueError, match=f"cannot merge TopK summaries with {field}="):
        merge_topk(TopK.empty(2, np.float32), other)
    with pytest.raises(TypeError, match="b must be a TopK"):
        merge_topk(TopK.empty(2, np.float32), [1, 2])


def test_future_version_is_refused():
    data = bytearray(TopK.empty(2, np.float32).to_bytes())
    data[6] = 9
    with pytest.raises(ValueError, match="format version 9; this propopt reads versions 1 and 2"):
        TopK.from_bytes(bytes(data))


def test_merging_summaries_that_numbered_the_same_positions_is_refused():
    x = np.arange(100, dtype=np.float32)
    a = TopK.empty(5, np.float32).update(x[:60])
    b = TopK.empty(5, np.float32).update(x[60:])  # also numbered from 0
    with pytest.raises(
        ValueError, match=r"cannot merge: both summaries numbered scores by position as ids 0\.\.39"
    ):
        a.merge(b)
    good = TopK.empty(5, np.float32).update(x[60:], offset=60)
    assert a.merge(good).result()[1].tolist() == [99, 98, 97, 96, 95]
    # explicit ids are the caller's: no span is recorded for them
    c = TopK.empty(5, np.float32).update(x[60:], ids=np.arange(1000, 1040))
    assert a.merge(c).result()[1].tolist() == [1039, 1038, 1037, 1036, 1035]


def test_numbering_a_position_twice_is_refused_and_leaves_the_summary_unchanged():
    s = TopK.empty(3, np.float32).update(np.array([1, 2, 3], np.float32))
    before = s.copy()
    with pytest.raises(ValueError, match=r"update would number scores by position as ids 1\.\.2"):
        s.update(np.array([9, 9], np.float32), offset=1)
    assert s == before and s._spans == ((0, 3),)
    with pytest.raises(TypeError, match=r"offset=1\.0: must be an int"):
        s.update(np.array([9], np.float32), offset=1.0)


def test_spans_survive_serialization_and_old_format_is_read():
    import struct
    import zlib

    s = TopK.empty(2, np.float32).update(np.array([1, 5, 3], np.float32))
    s = s.merge(TopK.empty(2, np.float32, start=10).update(np.array([4, 2], np.float32)))
    t = TopK.from_bytes(s.to_bytes())
    assert t == s and t._spans == ((0, 3), (10, 12))
    with pytest.raises(ValueError, match="cannot merge"):
        t.merge(TopK.empty(2, np.float32, start=11).update(np.array([0], np.float32)))
    # a version-1 blob (no spans): positions from start over n_seen
    body = s.to_bytes()[: -4 - 8 - 16 * 2]
    body = body[:6] + struct.pack("<H", 1) + body[8:]
    old = TopK.from_bytes(body + struct.pack("<I", zlib.crc32(body)))
    assert old._spans == ((0, 5),) and old.result()[1].tolist() == s.result()[1].tolist()


def test_backends_come_from_one_table():
    from propopt import _kinds
    from propopt.associativity.topk import _backends as tb

    assert set(tb.BACKENDS) == {("select", "cpu"), ("select", "cuda"), ("reference", "cpu")}
    assert tb.METHODS == ("auto", "select", "reference")
    plan = tb.TopKPlan(np.ones(5), 2, 0, True, False, True, _kinds.NUMPY)
    assert tb.choose("auto", "auto", plan) == ("select", "cpu")  # where x is
    assert tb.BACKENDS[("reference", "cpu")].refuse(plan) is None
    with pytest.raises(ValueError, match=r"device='cuda', but the data \(x\) is on 'cpu'"):
        tb.choose("select", "cuda", plan)
    ref = tb.BACKENDS[("reference", "cpu")].run(plan)
    cpu = tb.BACKENDS[("select", "cpu")].run(plan)
    np.testing.assert_array_equal(ref[1], cpu[1])


def test_cuda_input_without_a_usable_gpu_is_a_clear_error(monkeypatch):
    from propopt import _kinds
    from propopt.associativity.topk import _backends as tb

    monkeypatch.setattr(tb, "_cuda_available", lambda: False)
    plan = tb.TopKPlan(np.ones(5), 2, 0, True, False, True, _kinds.TORCH_CUDA)
    for method in ("auto", "select"):  # 'auto' has no host backend to fall back to here
        with pytest.raises(RuntimeError, match=r"numba.cuda cannot use the GPU"):
            tb.choose(method, "auto", plan)
    with pytest.raises(ValueError, match=r"device='cpu', but the data \(x\) is on 'cuda'"):
        tb.choose("select", "cpu", plan)
    with pytest.raises(ValueError, match="method='reference' runs on device 'cpu'"):
        tb.choose("reference", "auto", plan)


def test_out_read_only_names_out():
    x = np.array([3.0, 1.0, 4.0])
    frozen = np.broadcast_to(np.empty(1), (2,))
    with pytest.raises(ValueError, match=r"out\[0\] is read-only"):
        topk(x, 2, out=(frozen, np.empty(2, np.int64)))


@pytest.mark.parametrize(
    "scores", [np.array([2**53 + 1, 1]), np.array([2**64 - 1], np.uint64)], ids=["int64", "uint64"]
)
def test_update_refuses_integers_float64_rounds(scores):
    """NumPy calls int64 -> float64 a safe cast, but 2**53 + 1 becomes 2**53."""
    with pytest.raises(TypeError, match=r"scores\[0\] = \d+ cannot be held exactly"):
        TopK.empty(2, np.float64).update(scores)
    s, i = TopK.empty(2, np.float64).update(np.array([2**53, 7])).result()
    assert s.tolist() == [2.0**53, 7.0] and i.tolist() == [0, 1]


def test_out_with_inputs_or_outputs_that_require_grad_is_refused():
    torch = pytest.importorskip("torch")
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    out = (torch.empty(2), torch.empty(2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"out= .*x requires grad.*drop out="):
        topk(x, 2, out=out)
    with pytest.raises(ValueError, match=r"out\[0\] requires grad"):
        topk(x.detach(), 2, out=(torch.empty(2, requires_grad=True), out[1]))
    with torch.no_grad():
        v, i = topk(x, 2, out=out)
    assert v.tolist() == [3.0, 2.0] and i.tolist() == [0, 2]
