"""The one intrinsic table (scheduler_core/ir/intrinsics.py) and what reads it.

``atan`` and ``atan2`` were added as two table rows and nothing else; these tests show
that they work everywhere: te, the reference evaluator, the LLVM CPU build (scalar,
libmvec vectors and per-lane libm vectors) against numpy, the CUDA source (``atanf`` /
``atan2f``; nvcc compiles it where nvcc is installed), the GPU emulation (``mod.emulate``)
against numpy, the DAG JSON round trip and validation, the API's JSON Schema and the
generated intrinsic section of docs/dag_json_schema.md.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.access_analysis import analyze
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.ir import expr as E
from scheduler_core.ir import intrinsics as I

REPO = pathlib.Path(__file__).resolve().parents[3]
RNG = np.random.default_rng(21)
CPU_COMPOSITES = {"rsqrt", "sigmoid"}  # lowered by hand in codegen/llvm_intrin.py
CUDA_COMPOSITES = {"sigmoid"}  # lowered by hand in the CUDA printer


def _atan_dag(n: int, dtype: str):
    """``out0 = atan(Y)``, ``out1 = atan2(Y, X)`` over ``n`` elements of ``dtype``."""
    Y = te.placeholder((n,), dtype, name="Y")
    X = te.placeholder((n,), dtype, name="X")
    at = te.compute((n,), lambda i: te.atan(Y[i]), name="at")
    at2 = te.compute((n,), lambda i: te.atan2(Y[i], X[i]), name="at2")
    return Y, X, at, at2


def _inputs(n: int, dtype: str):
    y = (RNG.standard_normal(n) * 3).astype(dtype)
    x = (RNG.standard_normal(n) * 3).astype(dtype)
    x[:4] = [0, -1, 0, -2]  # the axes: atan2(y, 0) = +-pi/2, atan2(y, negative x) crosses pi
    y[:4] = [1, 0, -1, -0.5]
    return y, x


def _check(y, x, at, at2, dtype):
    tol = {"rtol": 4e-6, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-14}
    np.testing.assert_allclose(at, np.arctan(y), **tol)
    np.testing.assert_allclose(at2, np.arctan2(y, x), **tol)


# -- the table -------------------------------------------------------------------------

def test_every_row_is_well_formed_and_lowerable_everywhere():
    assert E.INTRINSICS == I.CALL_INTRINSICS and len(set(E.INTRINSICS)) == len(E.INTRINSICS)
    assert {"atan", "atan2"} <= set(E.INTRINSICS) and "pow" not in E.INTRINSICS
    for row in I.INTRINSIC_TABLE:
        assert row.llvm is not None or row.libm is not None or row.name in CPU_COMPOSITES, row.name
        assert row.cuda is not None or row.name in CUDA_COMPOSITES, row.name
        assert row.cost_class in I.COST_CLASSES
        assert hasattr(te, row.name)
        if row.te_function:
            assert te.INTRINSIC_FUNCTIONS[row.name].__name__ == row.name and row.name in te.__all__
    assert {"pow", "atan", "atan2", "exp"} <= I.EXPENSIVE_CALLS | I.EXPENSIVE_OPERATORS
    assert not {"fabs", "floor", "abs"} & I.EXPENSIVE_CALLS


def test_call_checks_arity_and_unifies_argument_dtypes():
    a = te.placeholder((4,), "float64", name="a")
    c = te.atan2(a[0], 1.0)
    assert isinstance(c, E.Call) and c.dtype == "float64" and [x.dtype for x in c.args] == ["float64"] * 2
    i = te.placeholder((4,), "int32", name="i")
    assert te.atan(i[0]).dtype == "float32"  # integers are cast to float32
    with pytest.raises(InvalidWorkloadError, match="takes 2"):
        te.atan2(a[0])
    with pytest.raises(InvalidWorkloadError, match="unknown intrinsic"):
        E.call("pow", a[0], a[1])  # pow is the binary op, not a call


def test_atan_is_expensive_so_not_strictly_inlineable():
    Y, X, at, at2 = _atan_dag(8, "float32")
    out = te.compute((8,), lambda i: at2[i] + 1.0, name="out")
    analyzer = analyze(ComputeDAG([Y, X, out]))
    assert not analyzer.is_strictly_inlineable(at2.op)


# -- reference evaluator -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reference_evaluates_atan_and_atan2(dtype):
    Y, X, at, at2 = _atan_dag(16, dtype)
    y, x = _inputs(16, dtype)
    got_at, got_at2 = evaluate([Y, X, at, at2], [y, x])
    assert got_at.dtype == dtype and got_at2.dtype == dtype
    _check(y, x, got_at, got_at2, dtype)


# -- CPU (LLVM) ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 8, 5])  # scalar; libmvec (or per-lane libm); a ragged width
def test_cpu_build_matches_numpy(dtype, lanes):
    n = 40
    Y, X, at, at2 = _atan_dag(n, dtype)
    s = te.create_schedule([at.op, at2.op])
    if lanes > 1:
        for t in (at, at2):
            _, inner = s[t].split(s[t].op.axis[0], factor=lanes)
            s[t].vectorize(inner)
    mod = sc.build(s, [Y, X, at, at2], "llvm", name=f"atan_{dtype}_{lanes}")
    ll = mod.get_source("ll")
    suffix = "f" if dtype == "float32" else ""
    assert f"@atan{suffix}" in ll or "_atan" in ll  # libm, or libmvec's _ZGV..._atan[f]
    y, x = _inputs(n, dtype)
    o1, o2 = np.zeros(n, dtype), np.zeros(n, dtype)
    mod(y, x, o1, o2)
    _check(y, x, o1, o2, dtype)


# -- CUDA source, nvcc and GPU emulation ---------------------------------------------------

def _cuda_module():
    n = 256
    Y, X, at, at2 = _atan_dag(n, "float32")
    s = te.create_schedule([at.op, at2.op])
    for t in (at, at2):
        bx, tx = s[t].split(s[t].op.axis[0], factor=64)
        s[t].bind(bx, te.thread_axis("blockIdx.x"))
        s[t].bind(tx, te.thread_axis("threadIdx.x"))
    return n, sc.build(s, [Y, X, at, at2], target="cuda", name="atans")


def test_cuda_source_calls_atanf_and_emulation_matches_numpy():
    n, mod = _cuda_module()
    src = mod.imported_modules[0].get_source()
    assert "atanf(" in src and "atan2f(" in src
    y, x = _inputs(n, "float32")
    o1, o2 = np.zeros(n, "float32"), np.zeros(n, "float32")
    mod.emulate(y, x, o1, o2)
    _check(y, x, o1, o2, "float32")


@pytest.mark.skipif(nvcc_available() is not None, reason=f"nvcc: {nvcc_available()}")
def test_cuda_source_with_atan_compiles_with_nvcc():
    _, mod = _cuda_module()
    assert b".entry" in mod.imported_modules[0].ptx()


@pytest.mark.skipif(not sc.cuda(0).exist, reason="no CUDA device")
def test_atan_on_the_gpu_matches_numpy():
    n, mod = _cuda_module()
    y, x = _inputs(n, "float32")
    dev = sc.cuda(0)
    args = [sc.nd.array(a, dev) for a in (y, x, np.zeros(n, "float32"), np.zeros(n, "float32"))]
    mod(*args)
    _check(y, x, args[2].numpy(), args[3].numpy(), "float32")


# -- JSON ---------------------------------------------------------------------------------

def test_dag_json_round_trip_and_validation():
    Y, X, at, at2 = _atan_dag(8, "float64")
    dag = ComputeDAG([Y, X, at, at2])
    text = dag.to_json()
    back = ComputeDAG.from_json(text)
    assert back.to_json() == text and back.workload_key == dag.workload_key
    y, x = _inputs(8, "float64")
    _check(y, x, *evaluate(back, [y, x]), "float64")
    obj = json.loads(text)
    call = next(op["body"] for op in obj["ops"] if op["kind"] == "compute" and op["body"]["name"] == "atan2")
    one_arg = dict(call, args=call["args"][:1])
    call.clear()
    call.update(one_arg)
    with pytest.raises(InvalidWorkloadError, match="atan2 takes 2"):
        ComputeDAG.from_json(obj)
    call["args"] = [one_arg["args"][0], {"kind": "float", "value": 1.0, "dtype": "float32"}]
    with pytest.raises(InvalidWorkloadError, match="dtypes float64, float32"):
        ComputeDAG.from_json(obj)


def test_api_json_schema_takes_the_names_and_arities_of_the_table():
    dag_schema = pytest.importorskip("api.dag_schema")
    call = dag_schema.EXPR_SCHEMAS["call"]["properties"]
    assert call["name"]["enum"] == list(I.CALL_INTRINSICS)
    assert call["args"]["maxItems"] == I.MAX_CALL_ARITY == 2


def test_schema_doc_intrinsic_section_is_generated_from_the_table():
    doc = (REPO / "docs" / "dag_json_schema.md").read_text()
    assert I.doc_section_of(doc) == I.schema_doc_section(), \
        "run `python -m scheduler_core.ir.intrinsics` to regenerate docs/dag_json_schema.md"
    assert "| `atan2` | 2, float |" in doc


def test_rewrite_doc_replaces_only_the_section(tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(f"before\n{I.DOC_BEGIN}\nstale\n{I.DOC_END}\nafter\n")
    I.rewrite_doc(path)
    assert path.read_text() == f"before\n{I.schema_doc_section()}\nafter\n"
