"""DAG validation and construction as TVM's (v0.13 ``te`` / ``auto_scheduler``).

- Iterator names are unique within a compute: TVM's ``CheckComputeValidity``
  (``src/auto_scheduler/compute_dag.cc``) rejects a ComputeDAG whose compute has two
  iterators (spatial or reduce) of one name.  Here the error is an InvalidWorkloadError
  naming both axes and the compute, raised by ``ComputeDAG``, ``te.create_schedule``
  and the JSON decoder (with the op's path, which the API returns in its 422).
- ``ComputeDAG(sch)``: TVM's constructor from a ``te.Schedule``: the stages' ops in stage
  order, tensors the placeholder and output stages' outputs, a fresh initial state.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import scheduler_core as sc
from api.errors import error_body
from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag import reference
from scheduler_core.schedule.loop_state import State

RNG = np.random.default_rng(7)


def _rand(t):
    return RNG.uniform(-1, 1, size=tuple(int(s.value) for s in t.shape)).astype(t.dtype)


def _run(sch_or_state, args, inputs):
    """Build ``args`` for llvm, run on ``inputs``; the output arrays."""
    mod = sc.build(sch_or_state, args, "llvm")
    outs = [np.full(tuple(int(s.value) for s in t.shape), np.nan, t.dtype) for t in args[len(inputs):]]
    mod(*inputs, *outs)
    return outs


def _dup_reduce():
    Y = te.placeholder((4, 3), name="Y")
    k1 = te.reduce_axis((0, 4), name="k")
    k2 = te.reduce_axis((0, 3), name="k")
    C = te.compute((1,), lambda i: te.sum(Y[k1, k2], axis=[k1, k2]), name="C")
    return Y, C


# -- duplicate iterator names ------------------------------------------------------------

def test_duplicate_reduce_axis_names_are_rejected_naming_both_axes_and_the_compute():
    Y, C = _dup_reduce()
    with pytest.raises(InvalidWorkloadError) as err:
        sc.ComputeDAG([Y, C])
    msg = str(err.value)
    assert "compute C" in msg
    assert "reduce axis k (reduce_axis[1])" in msg and "reduce axis k (reduce_axis[0])" in msg


def test_a_reduce_axis_named_like_a_spatial_axis_is_rejected_too():
    """TVM checks every leaf iterator of the stage, spatial and reduce alike."""
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="i")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    with pytest.raises(InvalidWorkloadError, match=r"compute B: reduce axis i \(reduce_axis\[0\]\) has the same "
                                                    r"name as axis i \(axis\[0\]\)"):
        sc.ComputeDAG([A, B])


def test_create_schedule_rejects_duplicate_names_which_would_lower_wrongly():
    Y, C = _dup_reduce()
    with pytest.raises(InvalidWorkloadError, match="reduce_axis\\[1\\]"):
        te.create_schedule(C.op)


def test_distinct_names_build_and_match_numpy():
    Y = te.placeholder((4, 3), name="Y")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 3), name="k2")
    C = te.compute((1,), lambda i: te.sum(Y[k1, k2], axis=[k1, k2]), name="C")
    y = _rand(Y)
    (c,) = _run(te.create_schedule(C.op), [Y, C], [y])
    np.testing.assert_allclose(c, [y.sum()], rtol=1e-5)
    (ref,) = reference.evaluate(sc.ComputeDAG([Y, C]), [y])
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_json_with_duplicate_names_fails_at_the_op_and_the_api_answers_422_with_that_path():
    Y = te.placeholder((4, 3), name="Y")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 3), name="k2")
    C = te.compute((1,), lambda i: te.sum(Y[k1, k2], axis=[k1, k2]), name="C")
    payload = json.loads(sc.ComputeDAG([Y, C]).to_json())
    for v in payload["vars"]:
        if v["name"] == "k2":
            v["name"] = "k1"
    with pytest.raises(InvalidWorkloadError) as err:
        sc.ComputeDAG.from_json(payload)
    assert err.value.path == "ops[1]"
    assert "reduce axis k1 (reduce_axis[1])" in str(err.value) and "compute C" in str(err.value)
    body = error_body(err.value)
    assert body["error"] == "InvalidWorkloadError" and body["path"] == "ops[1]"
    assert "reduce_axis[0]" in body["detail"]


# -- ComputeDAG(sch) ---------------------------------------------------------------------

def _matmul_relu(n=12, m=10, kk=8):
    A = te.placeholder((n, kk), name="A")
    B = te.placeholder((kk, m), name="B")
    k = te.reduce_axis((0, kk), name="k")
    P = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="P")
    R = te.compute((n, m), lambda i, j: te.max(P[i, j], 0.0), name="R")
    return A, B, P, R


def test_compute_dag_of_a_schedule_equals_the_dag_of_its_tensors():
    A, B, P, R = _matmul_relu()
    by_tensors = sc.ComputeDAG([A, B, R])
    by_schedule = sc.ComputeDAG(te.create_schedule(R.op))
    assert by_schedule.workload_key == by_tensors.workload_key
    assert by_schedule.to_json() == by_tensors.to_json()
    assert str(by_schedule) == str(by_tensors)
    assert [op is o for op, o in zip(by_schedule.ops, by_tensors.ops)] == [True] * 4
    assert list(by_schedule.tensors) == [A, B, R]
    assert by_schedule.flop_ct == by_tensors.flop_ct
    a, b = _rand(A), _rand(B)
    (r,) = _run(State.from_dag(by_schedule), list(by_schedule.tensors), [a, b])
    np.testing.assert_allclose(r, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)


def test_compute_dag_of_a_schedule_keeps_its_stages_not_its_loop_transforms():
    """As TVM: the ops are the schedule's stages (a cache_write stage included) and the
    initial state is fresh (the split is not carried over)."""
    A, B, P, R = _matmul_relu()
    s = te.create_schedule(R.op)
    s.cache_write(P, "local")
    s[R].split(R.op.axis[0], factor=4)
    dag = sc.ComputeDAG(s)
    assert [op.name for op in dag.ops] == ["A", "B", "P.local", "P", "R"]
    assert [t.name for t in dag.tensors] == ["A", "B", "R"]
    init = State.from_dag(dag)
    assert init.transform_steps == ()
    assert [it.name for it in init.stages[-1].iters] == ["i", "j"]
    a, b = _rand(A), _rand(B)
    (r,) = _run(init, list(dag.tensors), [a, b])
    np.testing.assert_allclose(r, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reference.evaluate(dag, [a, b])[0], r, rtol=1e-5, atol=1e-6)


def test_compute_dag_of_a_schedule_with_several_outputs_lists_each_output_stage():
    A, B, P, R = _matmul_relu()
    s = te.create_schedule([P.op, R.op])
    dag = sc.ComputeDAG(s)
    assert dag.workload_key == sc.ComputeDAG([A, B, P, R]).workload_key
    assert [t.name for t in dag.outputs] == ["P", "R"]


def test_compute_dag_of_a_scan_schedule_keeps_the_state_out_of_the_arguments():
    m, n = 6, 4
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n), name="state")
    s_init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i], name="update")
    Y = te.scan(s_init, s_update, s_state, inputs=[X], name="cumsum")
    dag = sc.ComputeDAG(te.create_schedule(Y.op))
    assert dag.workload_key == sc.ComputeDAG([X, Y]).workload_key
    x = _rand(X)
    (y,) = _run(State.from_dag(dag), list(dag.tensors), [x])
    np.testing.assert_allclose(y, np.cumsum(x, axis=0), rtol=1e-5, atol=1e-6)


def test_compute_dag_of_something_else_with_stages_is_an_invalid_workload():
    A, B, P, R = _matmul_relu()
    with pytest.raises(InvalidWorkloadError, match="a list of tensors or a te schedule, not a State"):
        sc.ComputeDAG(State.from_dag(sc.ComputeDAG([A, B, R])))
