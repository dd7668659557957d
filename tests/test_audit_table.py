"""The six-property audit table (``propopt.audit.audit_table``, ``python -m propopt audit``)."""

import json

import numpy as np
import pytest

import propopt as pp
from propopt import cli
from propopt.audit import audit_table
from propopt.audit._table import PROPERTIES


def _verdicts(table):
    return {r.property: r.verdict for r in table.rows}


def test_table_lists_the_six_properties_in_the_chapters_order():
    t = audit_table(np.add)
    assert [r.property for r in t.rows] == list(PROPERTIES)
    text = str(t)
    for p in PROPERTIES:
        assert p in text


@pytest.mark.parametrize(
    "fn, expected",
    [
        (np.add, {"associativity": "applies", "symmetry": "applies", "redundancy": "no"}),
        (np.maximum, {"associativity": "applies", "symmetry": "applies", "redundancy": "applies"}),
        (np.subtract, {"associativity": "no", "symmetry": "no", "redundancy": "no"}),
        (
            lambda a, b: (a + b) / 2,
            {"associativity": "no", "symmetry": "applies", "redundancy": "applies"},
        ),
        (pp.linear_recurrence, {"associativity": "applies", "symmetry": "no"}),
        (pp.matmul2x2, {"associativity": "applies", "symmetry": "no"}),
    ],
)
def test_operator_verdicts(fn, expected):
    v = _verdicts(audit_table(fn))
    for prop, verdict in expected.items():
        assert v[prop] == verdict, prop
    assert v["separability"] == v["locality"] == v["sparsity"] == "n/a"


def test_properties_that_hold_name_a_primitive():
    t = audit_table(np.maximum)
    assert "associative_scan" in t["associativity"].primitive
    assert t["redundancy"].primitive


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"kind='tree'.*'operator'"):
        audit_table(np.add, kind="tree")
    with pytest.raises(TypeError, match="not a callable"):
        audit_table(3.0)
    with pytest.raises(TypeError, match="kind='operator'"):
        audit_table(lambda a, b, c: a)
    with pytest.raises(KeyError, match="valid: associativity"):
        audit_table(np.add)["speed"]


def test_cli_audit_prints_the_table(capsys):
    assert cli.main(["audit", "numpy:maximum"]) == 0
    out = capsys.readouterr().out
    assert "associativity" in out and "applies" in out
    assert cli.main(["audit", "numpy:subtract", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["property"]: r["verdict"] for r in rows}["associativity"] == "no"


def _gravity(xi, xj):
    d = xj - xi
    return d / ((d**2).sum(-1) + 1e-4)[:, None] ** 1.5


def _lopsided(xi, xj):
    return 2 * xi[:, 0] + xj[:, 0]


def test_gravity_has_five_of_six_properties():
    v = _verdicts(audit_table(_gravity, kind="pair"))
    assert v["symmetry"] == v["separability"] == v["redundancy"] == "applies"
    assert v["associativity"] == "applies"
    assert v["locality"] in ("applies", "partial") and v["sparsity"] in ("applies", "partial")
    assert "antisymmetric" in audit_table(_gravity, kind="pair")["symmetry"].evidence


def test_short_range_kernel_is_sparse_and_symmetric():
    t = audit_table(lambda r: np.exp(-(r**2) / 0.01))  # one argument: a radial kernel
    assert t.kind == "kernel"
    v = _verdicts(t)
    assert v["sparsity"] == v["symmetry"] == v["locality"] == "applies"


def test_lopsided_pair_function_is_not_symmetric():
    v = _verdicts(audit_table(_lopsided, kind="pair", ndim=2))
    assert v["symmetry"] == "no" and v["locality"] == "no"


def test_pair_function_must_return_one_value_per_pair():
    with pytest.raises(ValueError, match="one value"):
        audit_table(lambda xi, xj: np.zeros(3), kind="pair")
