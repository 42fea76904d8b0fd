"""The ComputeDAG JSON wire format: exact round trips and validation with paths."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import ComputeDAG, InvalidWorkloadError, te
from scheduler_core.dag.dag_json import FORMAT, VERSION, dag_to_json
from scheduler_core.ir.expr import INTRINSICS, BinaryOp, FloatImm, call, const
from scheduler_core.ir.intrinsics import INTRINSIC_BY_NAME
from scheduler_core.ir.simplify import simplify

from .test_compute_dag import (
    REPO,
    conv2d_bias_relu,
    matmul_add,
    matmul_bias_relu,
    scan_cumsum,
    scan_two_states,
    softmax,
)


def assert_round_trip(dag: ComputeDAG) -> ComputeDAG:
    text = dag.to_json()
    back = ComputeDAG.from_json(text)
    assert back.to_json() == text
    assert back.workload_key == dag.workload_key
    assert str(back) == str(dag)
    again = ComputeDAG.from_json(json.loads(text))  # the dict form too
    assert again.to_json() == text
    return back


WORKLOADS = {
    "matmul_add": lambda: matmul_add(),
    "matmul_bias_relu": lambda: matmul_bias_relu(),
    "softmax": lambda: softmax(4, 8),
    "softmax_symbolic": lambda: softmax(te.var("n"), te.var("m")),
    "conv2d": lambda: conv2d_bias_relu(),
    "scan": scan_cumsum,
    "scan_two_states": scan_two_states,
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_round_trip_is_exact(name):
    assert_round_trip(ComputeDAG(WORKLOADS[name]()))


def test_payload_layout_seed_000():
    obj = dag_to_json(ComputeDAG(matmul_add()))
    assert (obj["format"], obj["version"]) == (FORMAT, VERSION)
    assert [op["kind"] for op in obj["ops"]] == ["placeholder"] * 2 + ["compute", "placeholder", "compute"]
    assert obj["tensors"] == [[0, 0], [1, 0], [3, 0], [4, 0]]
    assert obj["ops"][2]["attrs"] == {"layout_free_placeholders": [[1, 0]]}
    assert obj["ops"][2]["body"]["kind"] == "reduce"
    assert [v["name"] for v in obj["vars"]] == ["i", "j", "k", "i", "j"]  # ids, not names


def test_schema_doc_example_is_current():
    doc = (REPO / "docs" / "dag_json_schema.md").read_text()
    example = doc.split("```json\n", 1)[1].split("```", 1)[0]
    dag = ComputeDAG.from_json(example)
    assert dag.to_json() == ComputeDAG(matmul_add(4, 4, 4)).to_json()
    assert f"`{dag.workload_key}`" in doc


def test_round_trip_computes_the_same():
    reference = pytest.importorskip("scheduler_core.dag.reference")
    rng = np.random.default_rng(0)
    for tensors in (matmul_bias_relu(), conv2d_bias_relu(), softmax(3, 5)):
        dag = ComputeDAG(tensors)
        back = ComputeDAG.from_json(dag.to_json())
        inputs = [rng.standard_normal([int(s.value) for s in t.shape]).astype(t.dtype) for t in dag.inputs]
        for want, got in zip(reference.evaluate(dag, inputs), reference.evaluate(back, inputs)):
            np.testing.assert_array_equal(want, got)


def test_shared_var_names_non_finite_floats_and_unused_argument():
    n1, n2 = te.var("n"), te.var("n")  # two distinct variables with one name
    A = te.placeholder((n1, n2), name="A")
    unused = te.placeholder((3,), name="unused", dtype="int8")
    B = te.compute((n1, n2), lambda i, j: te.max(A[i, j], const(-math.inf)) + const(math.nan), name="B")
    dag = ComputeDAG([A, unused, B])
    back = assert_round_trip(dag)
    sh = back.tensors[0].shape
    assert sh[0] is not sh[1] and sh[0].name == sh[1].name == "n"
    assert [t.name for t in back.tensors] == ["A", "unused", "B"]


def test_string_bytes_and_limits():
    text = ComputeDAG(matmul_add(4, 4, 4)).to_json()
    assert ComputeDAG.from_json(text.encode()).to_json() == text
    with pytest.raises(InvalidWorkloadError) as e:
        ComputeDAG.from_json(text, max_nodes=20)
    assert "max_nodes" in str(e.value)


def test_too_deep_to_serialize_is_an_invalid_workload():
    A = te.placeholder((4,), name="A")

    def chain(i):
        e = A[i]
        for _ in range(3000):
            e = e + 1.0
        return e
    with pytest.raises(InvalidWorkloadError, match="too deeply"):
        ComputeDAG([A, te.compute((4,), chain, name="D")]).to_json()


def test_hostile_constants_are_rejected_quickly():
    """Nested integer pow or a cast of inf to int in a shape would make constant
    folding hang or crash; they stay unfolded, and a shape must evaluate."""
    obj = dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))
    e = 10
    for _ in range(40):
        e = {"kind": "binary", "op": "pow", "a": e, "b": 64, "dtype": "int32"}
    inf = {"kind": "float", "value": "inf", "dtype": "float32"}
    for shape in (e, {"kind": "cast", "value": inf, "dtype": "int32"}):
        obj["ops"][0]["shape"][0] = shape
        with pytest.raises(InvalidWorkloadError, match="does not evaluate"):
            ComputeDAG.from_json(obj)
    odd = BinaryOp("pow", FloatImm(-8.0), FloatImm(1 / 3), "float32")
    assert simplify(odd) is odd  # a complex result is not folded


def test_hostile_depth_raises_invalid_workload_not_recursion_error():
    with pytest.raises(InvalidWorkloadError):
        ComputeDAG.from_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidWorkloadError):
        ComputeDAG.from_json('{"format": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001)
    obj = dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))
    node = obj["ops"][4]["body"]
    for _ in range(100_000):
        node = {"kind": "not", "a": node}
    obj["ops"][4]["body"] = node
    with pytest.raises(InvalidWorkloadError) as e:
        ComputeDAG.from_json(obj)
    assert e.value.path.startswith("ops[4].body.a.a.a") and "max_depth" in str(e.value)


# -- malformed payloads: (what, mutation, expected path substring, limits) ---------------

def _set(path, value):
    def mutate(obj):
        *head, last = path
        node = obj
        for key in head:
            node = node[key]
        node[last] = value
    return mutate


def _delete(path):
    def mutate(obj):
        *head, last = path
        node = obj
        for key in head:
            node = node[key]
        del node[last]
    return mutate


LOAD_C = {"kind": "load", "tensor": [3, 0], "indices": [{"kind": "var", "id": 3}, {"kind": "var", "id": 4}],
          "dtype": "float32"}
BODY = ("ops", 4, "body")
SRC = ("ops", 2, "body", "source")
MALFORMED = [
    ("unknown expr kind", _set(SRC + ("kind",), "bogus"), "ops[2].body.source.kind", {}),
    ("unknown dtype", _set(("ops", 0, "dtype"), "float128"), "ops[0].dtype", {}),
    ("unknown binary op", _set(BODY + ("op",), "xor"), "ops[4].body.op", {}),
    ("unknown cmp op", _set(BODY, {"kind": "select", "cond": {"kind": "cmp", "op": "<=>", "a": 1, "b": 0},
                                   "true_value": LOAD_C, "false_value": LOAD_C, "dtype": "float32"}),
     "ops[4].body.cond.op", {}),
    ("unknown intrinsic", _set(BODY + ("b",), {"kind": "call", "name": "system", "args": [LOAD_C],
                                                "dtype": "float32"}), "ops[4].body.b.name", {}),
    ("intrinsic arity", _set(BODY + ("b",), {"kind": "call", "name": "exp", "args": [LOAD_C, LOAD_C],
                                              "dtype": "float32"}), "ops[4].body.b.args", {}),
    ("dangling tensor", _set(BODY + ("b", "tensor"), [99, 0]), "ops[4].body.b.tensor", {}),
    ("bad value index", _set(BODY + ("b", "tensor"), [3, 1]), "ops[4].body.b.tensor", {}),
    ("dangling var", _set(BODY + ("b", "indices", 1), {"kind": "var", "id": 999}),
     "ops[4].body.b.indices[1].id", {}),
    ("later op (cycle)", _set(SRC + ("a", "tensor"), [4, 0]), "ops[2].body.source.a.tensor", {}),
    ("self reference", _set(BODY + ("a", "tensor"), [4, 0]), "ops[4].body.a.tensor", {}),
    ("load rank", _set(BODY + ("b", "indices"), [{"kind": "var", "id": 3}]), "ops[4].body.b.indices", {}),
    ("axis count", _set(("ops", 4, "axis"), [3]), "ops[4].axis", {}),
    ("float index", _set(BODY + ("b", "indices", 1), {"kind": "float", "value": 1.5, "dtype": "float32"}),
     "ops[4].body.b.indices[1]", {}),
    ("bare float", _set(BODY + ("b", "indices", 0), 0.5), "ops[4].body.b.indices[0]", {}),
    ("float shape", _set(("ops", 0, "shape", 0), 3.5), "ops[0].shape[0]", {}),
    ("negative shape", _set(("ops", 3, "shape", 1), -4), "ops[3].shape[1]", {}),
    ("bool shape", _set(("ops", 0, "shape", 0), True), "ops[0].shape[0]", {}),
    ("shape divides by zero", _set(("ops", 0, "shape", 0), {"kind": "binary", "op": "floordiv", "a": 4, "b": 0,
                                                            "dtype": "int32"}), "ops[0].shape[0]", {}),
    ("too many elements", _set(("ops", 0, "shape"), [2**20, 2**20]), "ops[0].shape", {}),
    ("total elements", lambda o: None, "ops[1].shape", {"max_total_elements": 20}),
    ("too many nodes", lambda o: None, "ops[", {"max_nodes": 12}),
    ("too deep", lambda o: None, "ops[2].body.source", {"max_depth": 2}),
    ("wrong type", _set(("ops",), {}), "ops", {}),
    ("version type", _set(("version",), "1"), "version", {}),
    ("var name type", _set(("vars", 0, "name"), 5), "vars[0].name", {}),
    ("missing field", _delete(("ops", 2, "body")), "ops[2]", {}),
    ("unknown field", _set(("ops", 1, "color"), "red"), "ops[1]", {}),
    ("newer version", _set(("version",), 2), "version", {}),
    ("wrong format", _set(("format",), "tvm.graph"), "format", {}),
    ("unknown op kind", _set(("ops", 1, "kind"), "extern"), "ops[1].kind", {}),
    ("unhashable op kind", _set(("ops", 1, "kind"), ["placeholder"]), "ops[1].kind", {}),
    ("unhashable expr kind", _set(SRC + ("kind",), {"x": 1}), "ops[2].body.source.kind", {}),
    ("nested reduce", _set(BODY + ("b",), {"kind": "reduce", "combiner": "sum", "source": LOAD_C,
                                            "axis": [{"var": 2, "min": 0, "extent": 4}],
                                            "condition": None, "dtype": "float32"}), "ops[4].body.b", {}),
    ("unknown reducer", _set(("ops", 2, "body", "combiner"), "mean"), "ops[2].body.combiner", {}),
    ("bad attr tensor", _set(("ops", 2, "attrs", "layout_free_placeholders"), [[7, 0]]),
     "ops[2].attrs.layout_free_placeholders[0]", {}),
    ("attr object", _set(("ops", 2, "attrs", "x"), {"a": 1}), "ops[2].attrs.x", {}),
    ("foreign axis var", _set(BODY + ("a", "indices", 0), {"kind": "var", "id": 2}),
     "ops[4].body.a.indices[0]", {}),
    ("dtype mismatch", _set(BODY + ("dtype",), "float64"), "ops[4].body.dtype", {}),
    ("int out of range", _set(("ops", 0, "shape", 0), {"kind": "int", "value": 2**40, "dtype": "int32"}),
     "ops[0].shape[0].value", {}),
    ("no tensors", _set(("tensors",), []), "tensors", {}),
    ("placeholder not an argument", _set(("tensors",), [[0, 0], [1, 0], [4, 0]]), "tensors", {}),
    ("unused op", _set(("tensors",), [[0, 0], [1, 0], [2, 0]]), "ops[3]", {}),
]


@pytest.mark.parametrize("what,mutate,path,limits", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_payloads(what, mutate, path, limits):
    obj = copy.deepcopy(dag_to_json(ComputeDAG(matmul_add(4, 4, 4))))
    mutate(obj)
    with pytest.raises(InvalidWorkloadError) as e:
        ComputeDAG.from_json(obj, **limits)
    assert path in e.value.path, (what, e.value.path, str(e.value))
    assert not e.value.path.startswith("."), e.value.path


@pytest.mark.parametrize("text", ["{not json", "", "[1, 2", '{"format": NaN}', "null", "[]", "42"])
def test_malformed_json_text(text):
    with pytest.raises(InvalidWorkloadError):
        ComputeDAG.from_json(text)


def test_scan_state_must_be_placeholder():
    obj = dag_to_json(ComputeDAG(scan_cumsum()))
    scan = obj["ops"][-1]
    scan["state_placeholder"] = [scan["init"][0]]
    with pytest.raises(InvalidWorkloadError) as e:
        ComputeDAG.from_json(obj)
    assert e.value.path == "ops[4].state_placeholder[0]"


# -- property: random DAGs round-trip exactly ---------------------------------------

_BINARY = ("add", "sub", "mul", "div", "max", "min", "pow", "floordiv")


def _apply(op, a, b):
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
            "max": lambda: te.max(a, b), "min": lambda: te.min(a, b), "pow": lambda: te.pow(a, b),
            "floordiv": lambda: te.floordiv(a, b)}[op]()


@st.composite
def random_dags(draw):
    """Placeholders of one (maybe symbolic) shape, then elementwise, broadcast,
    intrinsic, cast, if_then_else and reduction stages drawn at random."""
    sym = {"n": te.var("n"), "m": te.var("m")}
    dims = draw(st.lists(st.sampled_from([1, 2, 3, 7, "n", "m"]), min_size=1, max_size=3))
    shape = tuple(sym.get(d, d) for d in dims)
    rank = len(shape)
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "float16", "int64"]))
    args = [te.placeholder(shape, dtype, name=f"P{k}") for k in range(draw(st.integers(1, 3)))]
    pool, outputs = list(args), []
    for s in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["binary", "call", "cast", "select", "reduce", "shift",
                                     "broadcast", "const"]))
        a, b = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
        name = draw(st.sampled_from([f"T{s}", "compute", "T"]))  # repeated names are legal
        if kind == "reduce":
            k = te.reduce_axis((0, shape[-1]), name="k")
            red = draw(st.sampled_from([te.sum, te.max, te.min, te.prod]))
            where = draw(st.sampled_from([None, k > 0]))
            outputs.append(te.compute(shape[:-1] or (1,), lambda *i: red(
                a[tuple(i) + (k,)] if rank > 1 else a[k], axis=k, where=where), name=name))
            continue
        if kind == "binary":
            op = draw(st.sampled_from(_BINARY))
            f = lambda *i: _apply(op, a[i], b[i])  # noqa: E731
        elif kind == "call":
            fn = draw(st.sampled_from(INTRINSICS))
            f = lambda *i: call(fn, *(a[i], b[i])[:INTRINSIC_BY_NAME[fn].arity])  # noqa: E731
        elif kind == "cast":
            to = draw(st.sampled_from(["float32", "int32", "float64", "int8", "bool"]))
            f = lambda *i: a[i].astype(to)  # noqa: E731
        elif kind == "select":
            f = lambda *i: te.if_then_else(te.all(i[0] >= 1, i[-1] < 2) | ~(i[0] == 0), a[i], b[i])  # noqa: E731
        elif kind == "shift":
            f = lambda *i: a[(te.floormod(i[0] + 1, shape[0]),) + tuple(i[1:])]  # noqa: E731
        elif kind == "broadcast":
            vec = te.placeholder((shape[-1],), dtype, name="vec")
            args.append(vec)
            f = lambda *i: a[i] * vec[i[-1]]  # noqa: E731
        else:
            value = draw(st.sampled_from([0.5, -0.0, 1e-300, math.inf, 3]))
            c = const(value, a.dtype) if "float" in a.dtype else const(int(a.dtype != "bool") + 1, a.dtype)
            f = lambda *i: a[i] + c  # noqa: E731
        attrs = draw(st.sampled_from([None, {"tag_list": [1, "x", 2.5, None, True]}, {"FLOP": 7}]))
        if attrs is not None and a in args[:1]:
            attrs = dict(attrs, layout_free_placeholders=[a])
        pool.append(te.compute(shape, f, name=name, attrs=attrs, tag=draw(st.sampled_from(["", "ew"]))))
    outputs.append(pool[-1])
    seen, tensors = set(), []
    for t in args + outputs:
        if t not in seen:
            seen.add(t)
            tensors.append(t)
    return ComputeDAG(tensors)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_round_trip_exactly(dag):
    assert_round_trip(dag)


# -- property: mutated payloads fail only with InvalidWorkloadError ---------------------

_JUNK = [None, [], {}, "x", 1.5, -1, 0, 2, True, 2**70, [0, 0], "float32", "nan", "sum", "reduce",
         {"kind": "var", "id": 0}, {"kind": "int", "value": 1, "dtype": "bool"}]


def _positions(obj, path=()):
    yield path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, val in items:
        yield from _positions(val, path + (key,))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["matmul_add", "conv2d", "scan_two_states", "softmax_symbolic"]), st.data())
def test_mutated_payloads_raise_only_invalid_workload(name, data):
    obj = copy.deepcopy(dag_to_json(ComputeDAG(WORKLOADS[name]())))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.sampled_from(list(_positions(obj))[1:]))
        parent = obj
        for key in pos[:-1]:
            parent = parent[key]
        parent[pos[-1]] = copy.deepcopy(data.draw(st.sampled_from(_JUNK)))
    try:
        dag = ComputeDAG.from_json(obj)
    except InvalidWorkloadError:
        return
    assert ComputeDAG.from_json(dag.to_json()).to_json() == dag.to_json()
    str(dag), dag.access_analyzer
