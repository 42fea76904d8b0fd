"""What the DAG decoder rejects at the door (422, a path in the message)
instead of letting a tuning job fail later: empty or negative extents, symbolic shapes
when tuning, division by zero in index expressions, non-finite floats where integers go,
and long op chains (no RecursionError anywhere)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from scheduler_core import ComputeDAG, InvalidWorkloadError, te
from scheduler_core.dag.access_bounds import check_access_bounds
from scheduler_core.dag.dag_json import dag_to_json, tensors_from_json
from scheduler_core.ir.expr import BinaryOp, IntImm, Reduce
from tests import workloads

from .test_compute_dag import matmul_add, scan_cumsum, softmax

REPO = Path(__file__).resolve().parents[3]

# matmul_add(4, 4, 4): ops A, B, matmul (a sum over k = vars[2]), C, out (= matmul + C,
# axes vars[3], vars[4]).
MM_REDUCE = ("ops", 2, "body", "axis", 0)
OUT_INDEX = ("ops", 4, "body", "a", "indices")  # out's read of matmul[i, j]


def payload() -> dict:
    return dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))


def scan_payload() -> dict:
    return dag_to_json(ComputeDAG(workloads.cumsum_scan(9, 10)))


def put(obj: dict, keys: tuple, value) -> dict:
    node = obj
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return obj


def var(i: int) -> dict:
    return {"kind": "var", "id": i}


def binary(op: str, a, b) -> dict:
    return {"kind": "binary", "op": op, "a": a, "b": b, "dtype": "int32"}


def rejected(obj, path: str, match: str, **kw) -> InvalidWorkloadError:
    with pytest.raises(InvalidWorkloadError, match=match) as e:
        ComputeDAG.from_json(obj, **kw)
    assert e.value.path == path, (e.value.path, str(e.value))
    assert str(e.value).startswith(f"{path}: "), str(e.value)  # the 422 detail names the path
    return e.value


# ---------------------------------------------------------------------------
# 1. extents and shape dimensions: at least 1
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, -1, -4])
def test_reduce_extent_must_be_positive(value):
    word = "zero" if value == 0 else "negative"
    rejected(put(payload(), MM_REDUCE + ("extent",), value), "ops[2].body.axis[0].extent",
             rf"reduce axis's extent is {word} \({value}\); it must be at least 1")


@pytest.mark.parametrize("op,value", [(0, 0), (1, -2), (2, 0), (3, 0), (4, -1)])
def test_shape_dimension_must_be_positive(op, value):
    word = "zero" if value == 0 else "negative"
    obj = put(payload(), ("ops", op, "shape", 1), value)
    rejected(obj, f"ops[{op}].shape[1]", rf"shape dimension is {word} \({value}\)")


def test_constant_expression_extents_are_checked_after_folding():
    rejected(put(payload(), MM_REDUCE + ("extent",), binary("sub", 4, 4)), "ops[2].body.axis[0].extent",
             "is zero")
    rejected(put(payload(), ("ops", 0, "shape", 0), binary("sub", 2, 7)), "ops[0].shape[0]", "is negative")


@pytest.mark.parametrize("value", [0, -3])
def test_scan_extent_must_be_positive(value):
    obj = scan_payload()
    assert ComputeDAG.from_json(copy.deepcopy(obj)).workload_key
    rejected(put(obj, ("ops", 4, "scan_axis", "extent"), value), "ops[4].scan_axis.extent",
             "scan's extent is")


def test_scan_start_may_be_zero_but_not_negative():
    obj = scan_payload()
    rejected(put(copy.deepcopy(obj), ("ops", 4, "scan_axis", "min"), -1), "ops[4].scan_axis.min",
             r"scan's start is negative \(-1\); it must be at least 0")
    # A start of 0 is a valid range (the access check may still object to the state read
    # at t - 1, but not as an extent error).
    with pytest.raises(InvalidWorkloadError) as e:
        ComputeDAG.from_json(put(obj, ("ops", 4, "scan_axis", "min"), 0))
    assert "must be at least" not in str(e.value)


def test_reduce_start_may_be_any_integer():
    obj = put(payload(), MM_REDUCE + ("min",), 1)
    put(obj, MM_REDUCE + ("extent",), 3)
    assert ComputeDAG.from_json(obj).ops[2].body.axis[0].dom_min.value == 1


def test_positive_extents_still_decode():
    for k in range(1, 4):
        obj = put(payload(), MM_REDUCE + ("extent",), k)
        assert ComputeDAG.from_json(obj).ops[2].body.axis[0].dom_extent.value == k


# ---------------------------------------------------------------------------
# 2. symbolic shapes: allowed by default, rejected for tuning
# ---------------------------------------------------------------------------

def test_symbolic_shapes_are_allowed_by_default():
    text = ComputeDAG(softmax(te.var("n"), te.var("m"))).to_json()
    assert ComputeDAG.from_json(text).to_json() == text
    assert ComputeDAG.from_json(text, require_concrete_shapes=False).to_json() == text
    assert tensors_from_json(text)


def test_symbolic_shape_rejected_when_concrete_shapes_are_required():
    text = ComputeDAG(softmax(te.var("n"), te.var("m"))).to_json()
    err = rejected(text, "ops[0].shape[0]", r"shape dimension is symbolic \(uses n\); tuning needs concrete",
                   require_concrete_shapes=True)
    assert "n" in str(err)
    with pytest.raises(InvalidWorkloadError, match="symbolic"):
        tensors_from_json(text, require_concrete_shapes=True)


def test_symbolic_reduce_extent_and_scan_range_rejected_when_concrete_required():
    obj = payload()
    obj["vars"].append({"name": "L", "dtype": "int32"})
    put(obj, MM_REDUCE + ("extent",), var(len(obj["vars"]) - 1))
    assert ComputeDAG.from_json(copy.deepcopy(obj)).workload_key  # fine for manual schedules
    rejected(obj, "ops[2].body.axis[0].extent", r"reduce axis's extent is symbolic \(uses L\)",
             require_concrete_shapes=True)

    obj = scan_payload()
    obj["vars"].append({"name": "T", "dtype": "int32"})
    t = len(obj["vars"]) - 1
    put(obj, ("ops", 4, "scan_axis", "extent"), binary("min", var(t), 8))
    assert ComputeDAG.from_json(copy.deepcopy(obj)).workload_key
    rejected(obj, "ops[4].scan_axis.extent", r"scan's extent is symbolic \(uses T\)",
             require_concrete_shapes=True)


def test_concrete_dags_pass_with_concrete_shapes_required_and_keep_their_key():
    for name, build in sorted(workloads.SMALL_DAGS.items()):
        dag = ComputeDAG(build())
        back = ComputeDAG.from_json(dag.to_json(), require_concrete_shapes=True)
        assert back.workload_key == dag.workload_key, name


def test_concrete_shapes_with_the_service_limits():
    """What the API passes: ``require_concrete_shapes=True, **settings.dag_limits()``."""
    limits = {"max_elements": 2**28, "max_total_elements": 2**30, "max_depth": 256, "max_nodes": 100_000}
    text = ComputeDAG(matmul_add(8, 8, 8)).to_json()
    assert ComputeDAG.from_json(text, require_concrete_shapes=True, **limits).to_json() == text
    sym = ComputeDAG(scan_cumsum()).to_json()
    rejected(sym, "ops[0].shape[0]", "symbolic", require_concrete_shapes=True, **limits)


# ---------------------------------------------------------------------------
# 3. division or modulo by zero in index expressions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["floordiv", "floormod", "div"])
def test_constant_zero_divisor_in_an_index(op):
    obj = put(payload(), OUT_INDEX + (0,), binary(op, var(3), 0))
    rejected(obj, "ops[4].body.a.indices[0].b", rf"{op} by zero in an index.*divisor 0 is always 0")


def test_divisor_that_folds_to_zero_in_an_index():
    obj = put(payload(), OUT_INDEX + (1,), binary("floormod", var(4), binary("sub", var(3), var(3))))
    rejected(obj, "ops[4].body.a.indices[1].b", "floormod by zero")


def test_divisor_is_an_axis_whose_range_is_only_zero():
    """``out(i) = A[(i + 2) // i]`` over a 1-element axis: i is always 0."""
    A = te.placeholder((4,), name="A")

    def body(i):
        return A[BinaryOp("floordiv", i + 2, i, "int32")]

    dag = ComputeDAG([A, te.compute((1,), body, name="out")])
    rejected(dag.to_json(), "ops[1].body.indices[0].b", r"floordiv by zero.*divisor i is always 0")
    with pytest.raises(InvalidWorkloadError, match="divides by zero"):
        check_access_bounds(dag)
    # Over 2 elements i is 0 or 1: not always zero, so not rejected as a division by zero.
    dag2 = ComputeDAG([A, te.compute((2,), body, name="out")])
    assert ComputeDAG.from_json(dag2.to_json()).workload_key == dag2.workload_key


def test_divisor_is_a_reduce_axis_whose_range_is_only_zero():
    """The decoder sees reduce axes after their source; the access check catches it (path ops[k])."""
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 1), name="k")
    out = te.compute((4,), lambda i: te.sum(A[BinaryOp("floordiv", i, k.var, "int32")], axis=k), name="out")
    dag = ComputeDAG([A, out])
    assert isinstance(dag.ops[1].body, Reduce)
    err = rejected(dag.to_json(), "ops[1]", r"op out reads A\[.*\]: index 0 divides by zero")
    assert "the divisor k is always 0" in str(err)


@pytest.mark.parametrize("where,path", [
    (("ops", 0, "shape", 0), "ops[0].shape[0].b"),
    (MM_REDUCE + ("extent",), "ops[2].body.axis[0].extent.b"),
])
def test_zero_divisor_in_a_shape_or_extent(where, path):
    obj = payload()
    obj["vars"].append({"name": "n", "dtype": "int32"})
    n = var(len(obj["vars"]) - 1)
    rejected(put(obj, where, binary("floordiv", n, binary("sub", n, n))), path, "floordiv by zero")
    rejected(put(payload(), where, binary("floormod", 4, 0)), path, "floormod by zero")


def test_division_by_zero_outside_indices_is_not_an_index_error():
    """Values may divide by zero (IEEE float, or a lowering-time integer matter): only index
    contexts are checked, and divisors that are merely possibly zero are not rejected."""
    A = te.placeholder((4,), name="A")
    zero = te.const(0.0, "float32")
    dag = ComputeDAG([A, te.compute((4,), lambda i: A[i] / zero, name="out")])
    assert ComputeDAG.from_json(dag.to_json()).workload_key == dag.workload_key
    # floordiv(3, i) with i in [0, 4): zero only at i = 0, not always.
    obj = put(payload(), OUT_INDEX + (0,), binary("floordiv", 3, var(3)))
    assert ComputeDAG.from_json(obj).workload_key


# ---------------------------------------------------------------------------
# 4. NaN / Infinity
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bare", ["NaN", "Infinity", "-Infinity"])
def test_bare_non_finite_numbers_in_the_text_are_rejected(bare):
    text = json.dumps(payload()).replace('"shape": [4, 4]', f'"shape": [{bare}, 4]', 1)
    assert bare in text
    with pytest.raises(InvalidWorkloadError, match=f"{bare} is not valid JSON") as e:
        ComputeDAG.from_json(text)
    assert e.value.path == ""
    # also where a float value goes
    obj = payload()
    put(obj, ("ops", 4, "body", "b"), {"kind": "float", "value": 1.5, "dtype": "float32"})
    text = json.dumps(obj).replace('"value": 1.5', f'"value": {bare}')
    with pytest.raises(InvalidWorkloadError, match="not valid JSON"):
        ComputeDAG.from_json(text)


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_non_finite_float_in_index_or_shape_positions(x):
    rejected(put(payload(), OUT_INDEX + (0,), x), "ops[4].body.a.indices[0]", "must be an integer")
    rejected(put(payload(), ("ops", 0, "shape", 0), x), "ops[0].shape[0]", "must be an integer")
    rejected(put(payload(), MM_REDUCE + ("extent",), x), "ops[2].body.axis[0].extent", "must be an integer")


@pytest.mark.parametrize("s", ["nan", "inf", "-inf"])
def test_non_finite_float_constant_cast_into_an_index_or_shape(s):
    cast = {"kind": "cast", "value": {"kind": "float", "value": s, "dtype": "float32"}, "dtype": "int32"}
    for where, path in ((OUT_INDEX + (0,), "ops[4].body.a.indices[0].value.value"),
                        (("ops", 0, "shape", 0), "ops[0].shape[0].value.value"),
                        (MM_REDUCE + ("extent",), "ops[2].body.axis[0].extent.value.value")):
        rejected(put(payload(), where, cast), path, rf"non-finite float \({s}\).*index, shape or extent")
    # a non-finite float as an index is named as such; a finite one is a dtype error
    flt = {"kind": "float", "value": s, "dtype": "float32"}
    rejected(put(payload(), OUT_INDEX + (0,), flt), "ops[4].body.a.indices[0].value", "non-finite float")
    flt["value"] = 2.0
    rejected(put(payload(), OUT_INDEX + (0,), flt), "ops[4].body.a.indices[0]", "indices must be integers")


def test_non_finite_float_values_keep_their_string_form():
    for s, check in (("inf", lambda v: v == math.inf), ("-inf", lambda v: v == -math.inf), ("nan", math.isnan)):
        obj = put(payload(), ("ops", 4, "body", "b"), {"kind": "float", "value": s, "dtype": "float32"})
        dag = ComputeDAG.from_json(obj)
        assert check(dag.ops[-1].body.b.value)
        text = dag.to_json()
        assert f'"value":"{s}"' in text
        assert ComputeDAG.from_json(text, require_concrete_shapes=True).to_json() == text


# ---------------------------------------------------------------------------
# 5. long chains of ops: no RecursionError on any path
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2000])
def test_long_elementwise_chain_has_no_recursion_error(n):
    A = te.placeholder((16,), name="A")
    t = A
    for k in range(n):
        t = te.compute((16,), lambda i, t=t: t[i] + te.const(1.0, "float32"), name=f"C{k}")
    dag = ComputeDAG([A, t])
    assert len(dag.ops) == n + 1
    text = dag.to_json()  # canonical JSON
    key = dag.workload_key
    obj = json.loads(text)
    assert len(obj["ops"]) == n + 1
    back = ComputeDAG.from_json(text, require_concrete_shapes=True)  # decode + access bounds
    assert back.workload_key == key
    back2 = ComputeDAG.from_json(obj)
    assert back2.to_json() == text
    check_access_bounds(back)
    printed = str(back)
    assert printed.count("\n") == n + 1 and printed == str(dag)
    assert back.flop_ct == 16.0 * n


def test_long_reduction_chain_has_no_recursion_error():
    """Chains of reductions (each summing the previous op over a window) too."""
    n = 1000
    A = te.placeholder((8,), name="A")
    t = A
    for j in range(n):
        k = te.reduce_axis((0, 2), name=f"k{j}")
        t = te.compute((4,), lambda i, t=t, k=k: te.sum(t[i + k.var], axis=k), name=f"R{j}") if j == 0 else \
            te.compute((4,), lambda i, t=t, k=k: te.sum(t[BinaryOp("floordiv", i + k.var, IntImm(2), "int32")],
                                                         axis=k), name=f"R{j}")
    dag = ComputeDAG([A, t])
    back = ComputeDAG.from_json(dag.to_json(), require_concrete_shapes=True)
    assert back.workload_key == dag.workload_key
    assert str(back) == str(dag)


# ---------------------------------------------------------------------------
# Every known workload still decodes
# ---------------------------------------------------------------------------

def test_every_known_workload_still_decodes():
    for name, build in sorted(workloads.SMALL_DAGS.items()):
        dag = ComputeDAG(build())
        assert ComputeDAG.from_json(dag.to_json()).workload_key == dag.workload_key, name
    extra = [workloads.conv2d_nchw(1, 3, 8, 8, 4, 3, 3, stride=2, pad=1), workloads.two_stage_scan(5, 6),
             workloads.two_state_scan(5, 6, 3), workloads.matmul_add(3, 5, 7)]
    for tensors in extra:
        dag = ComputeDAG(tensors)
        assert ComputeDAG.from_json(dag.to_json()).workload_key == dag.workload_key
    files = sorted((REPO / "examples" / "workloads").glob("*.json"))
    assert files
    for f in files:
        text = f.read_text()
        dag = ComputeDAG.from_json(text)
        assert ComputeDAG.from_json(dag.to_json()).to_json() == dag.to_json(), f.name


# ---------------------------------------------------------------------------
# 6. limits that once failed a job instead of the request
# ---------------------------------------------------------------------------

def test_a_name_over_256_characters_is_rejected():
    obj = payload()
    obj["ops"][0]["name"] = "A" * 100_000  # once failed every build with COMPILE_HOST
    rejected(obj, "ops[0].name", "1 to 256 characters, this one has 100000")
    obj = payload()
    obj["vars"][0]["name"] = ""
    rejected(obj, "vars[0].name", "1 to 256 characters")
    obj = payload()
    obj["ops"][0]["name"] = "A" * 256
    assert ComputeDAG.from_json(obj).tensors[0].op.name == "A" * 256


def test_a_flop_attr_out_of_range_is_rejected():
    obj = payload()
    obj["ops"][2]["attrs"]["FLOP"] = 10**400  # once an OverflowError in flop_ct
    rejected(obj, "ops[2].attrs.FLOP", "FLOP must be an integer in")
    obj["ops"][2]["attrs"]["FLOP"] = -1
    rejected(obj, "ops[2].attrs.FLOP", "got -1")
    obj["ops"][2]["attrs"]["FLOP"] = 1000
    assert ComputeDAG.from_json(obj).flop_ct >= 1000


def test_an_argument_listed_twice_is_rejected():
    obj = payload()
    obj["tensors"].append(obj["tensors"][-1])  # the output twice: once a WRONG_ANSWER
    n = len(obj["tensors"]) - 1
    rejected(obj, f"tensors[{n}]", f"listed twice in tensors \\(tensors\\[{n - 1}\\] and tensors\\[{n}\\]\\)")


def test_an_integer_div_is_floordiv_as_in_the_reference_evaluator():
    """``div`` on integers rounds toward minus infinity everywhere: the decoder reads it as floordiv
    (the validator once truncated where the reference evaluator floored)."""
    import numpy as np

    from scheduler_core.dag.reference import evaluate

    i = {"kind": "var", "id": 0}
    body = {"kind": "cast", "dtype": "float32",
            "value": binary("div", binary("sub", i, 5), 2)}
    obj = {"format": "autosched.compute_dag", "version": 1, "vars": [{"name": "i", "dtype": "int32"}],
           "ops": [{"kind": "compute", "name": "D", "shape": [8], "axis": [0], "body": body, "attrs": {}, "tag": ""}],
           "tensors": [[0, 0]]}
    dag = ComputeDAG.from_json(obj)
    assert '"floordiv"' in dag.to_json() and '"div"' not in dag.to_json()
    out = evaluate(dag, [])
    np.testing.assert_array_equal(out[0], np.floor((np.arange(8) - 5) / 2).astype("float32"))


def _read_a_at(index) -> dict:
    """B[i] = A[index(i)] with A of 200 elements and i in 0..199."""
    i = var(0)
    return {"format": "autosched.compute_dag", "version": 1, "vars": [{"name": "i", "dtype": "int32"}],
            "ops": [{"kind": "placeholder", "name": "A", "shape": [200], "dtype": "float32"},
                    {"kind": "compute", "name": "B", "shape": [200], "axis": [0], "attrs": {}, "tag": "",
                     "body": {"kind": "load", "tensor": [0, 0], "indices": [index(i)], "dtype": "float32"}}],
            "tensors": [[0, 0], [1, 0]]}


def _cast(v, dtype: str) -> dict:
    return {"kind": "cast", "value": v, "dtype": dtype}


OUT_OF_BOUNDS_INDICES = {  # the forms a hostile user got past the checker, each reading outside A
    "narrowing int8": (lambda i: _cast(_cast(binary("add", i, 100), "int8"), "int32"), "ranges over \\[-128, 127\\]"),
    "narrowing int16": (lambda i: _cast(_cast(binary("add", i, 32760), "int16"), "int32"), "ranges over"),
    "floormod by a negative divisor": (lambda i: binary("floormod", i, -64), "ranges over \\[-63, 0\\]"),
    "select": (lambda i: {"kind": "select", "cond": {"kind": "cmp", "op": "lt", "a": i, "b": 32},
                          "true_value": i, "false_value": binary("add", i, 1000), "dtype": "int32"},
               "ranges over \\[1032, 1199\\]"),
    "abs": (lambda i: {"kind": "call", "name": "abs", "args": [binary("sub", i, 100)], "dtype": "int32"},
            "abs\\(\\(i - 100\\)\\) is not modelled"),
    "pow": (lambda i: binary("pow", i, 2), "pow\\(i, 2\\) is not modelled"),
    "float floor": (lambda i: _cast({"kind": "call", "name": "floor", "dtype": "float32", "args": [
        {"kind": "binary", "op": "mul", "a": _cast(i, "float32"),
         "b": {"kind": "float", "value": 2.0, "dtype": "float32"}, "dtype": "float32"}]}, "int32"), "is not modelled"),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_BOUNDS_INDICES))
def test_index_forms_that_once_passed_the_bounds_check_are_rejected(name):
    index, match = OUT_OF_BOUNDS_INDICES[name]
    rejected(_read_a_at(index), "ops[1]", match)


def test_an_index_of_a_call_with_constant_bounds_still_passes():
    """min/max and a select whose branches both stay inside are proved, not rejected."""
    ComputeDAG.from_json(_read_a_at(lambda i: binary("min", binary("add", i, 5), 199)))
    ComputeDAG.from_json(_read_a_at(lambda i: {"kind": "select", "cond": {"kind": "cmp", "op": "lt", "a": i, "b": 32},
                                               "true_value": i, "false_value": binary("sub", i, 1), "dtype": "int32"}))
