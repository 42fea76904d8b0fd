"""Multi-output computes, TVM's multi-output ComputeOp (``te.compute`` returning a tuple).

    A, B = te.compute(shape, lambda i: (x[i] + 1, x[i] * 2), name="T")

is one op with two output tensors (``T.v0``, ``T.v1``), one stage, one loop nest storing
each output.  Reductions share one reduce axis set, combiner and condition (TVM's
ComputeOp verifier).  Checked end to end against numpy: the reference evaluator, lowering
and the llvm build, the cuda build emulated on the CPU, cache_write (one cache stage
computing every output), the sketch rules and sampled states (llvm and cuda), the DAG JSON
round trip and the step records.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import RandomModel
from cost_model.feature import get_per_store_features, is_invalid
from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError, ScheduleError
from scheduler_core.dag import reference
from scheduler_core.ir import tir as T
from scheduler_core.schedule.dataflow_step import ComputeInlineStep, RfactorStep, replay_steps
from scheduler_core.schedule.loop_state import State
from sketch_rules import generate_sketches, sample_init_population

RNG = np.random.default_rng(11)


def _shape(t) -> tuple:
    return tuple(int(s.value) for s in t.shape)


def _rand(t):
    return RNG.uniform(-1, 1, size=_shape(t)).astype(t.dtype)


def _run(sch_or_state, args, inputs, target="llvm"):
    """Build ``args`` (inputs first) and run it on ``inputs`` (cuda: emulated); the outputs."""
    mod = sc.build(sch_or_state, args, target)
    outs = [np.full(_shape(t), np.nan if t.dtype.startswith("float") else 0, t.dtype) for t in args[len(inputs):]]
    if target.startswith("cuda"):
        mod.emulate(*inputs, *outs)
    else:
        mod(*inputs, *outs)
    return outs, mod


def _elementwise(n=37):
    x = te.placeholder((n,), name="x")
    A, B = te.compute((n,), lambda i: (x[i] + 1.0, x[i] * 2.0), name="T")
    return x, A, B


def _row_stats(n=12, m=20):
    """Per row: the sum and the sum of squares of Y (one reduction op, two outputs), and
    the variance-like combination read from both."""
    Y = te.placeholder((n, m), name="Y")
    k = te.reduce_axis((0, m), name="k")
    S, Q = te.compute((n,), lambda i: (te.sum(Y[i, k], axis=k), te.sum(Y[i, k] * Y[i, k], axis=k)), name="SQ")
    V = te.compute((n,), lambda i: Q[i] / m - (S[i] / m) * (S[i] / m), name="V")
    return Y, S, Q, V


def _two_matmuls(n=16, m=24, kk=32):
    A = te.placeholder((n, kk), name="A")
    B = te.placeholder((kk, m), name="B")
    B2 = te.placeholder((kk, m), name="B2")
    k = te.reduce_axis((0, kk), name="k")
    C, D = te.compute((n, m), lambda i, j: (te.sum(A[i, k] * B[k, j], axis=k),
                                            te.sum(A[i, k] * B2[k, j], axis=k)), name="CD")
    E = te.compute((n, m), lambda i, j: C[i, j] + D[i, j] * 2.0, name="E")
    return A, B, B2, C, D, E


# -- the op ------------------------------------------------------------------------------

def test_a_tuple_body_makes_one_op_with_several_outputs():
    x, A, B = _elementwise()
    assert A.op is B.op and A.op.num_outputs == 2
    assert A == A.op.output(0) and B == A.op.output(1)
    assert (A.name, B.name) == ("T.v0", "T.v1")
    assert A.shape == B.shape
    dag = sc.ComputeDAG([x, A, B])
    assert [op.name for op in dag.ops] == ["x", "T"]
    assert str(dag).splitlines()[1:] == ["T.v0(i) = (x[i] + 1f)", "T.v1(i) = (x[i]*2f)"]
    assert dag.flop_ct == 2 * 37
    assert len(State.from_dag(dag).stages) == 2  # one stage for the op


def test_outputs_may_have_different_dtypes():
    x = te.placeholder((9,), name="x")
    F, I = te.compute((9,), lambda i: (x[i] * 3.0, te.floor(x[i] * 4.0).astype("int32")), name="FI")
    assert (F.dtype, I.dtype) == ("float32", "int32")
    xs = _rand(x)
    (f, i), _ = _run(te.create_schedule(F.op), [x, F, I], [xs])
    np.testing.assert_allclose(f, xs * 3, rtol=1e-6)
    np.testing.assert_array_equal(i, np.floor(xs * 4).astype("int32"))


@pytest.mark.parametrize("bodies, message", [
    (lambda Y, k, k2, i: (te.sum(Y[i, k], axis=k), Y[i, 0]), "output 0 is a reduction but output 1 is not"),
    (lambda Y, k, k2, i: (te.sum(Y[i, k], axis=k), te.max(Y[i, k], axis=k)), "share the combiner"),
    (lambda Y, k, k2, i: (te.sum(Y[i, k], axis=k), te.sum(Y[i, k2], axis=k2)), "reduces over \\[k2\\]"),
    (lambda Y, k, k2, i: (te.sum(Y[i, k], axis=k), te.sum(Y[i, k], axis=k, where=k > 2)), "condition"),
    (lambda Y, k, k2, i: (Y[i, 0], te.sum(Y[i, k], axis=k) + 1.0), "nested"),
])
def test_reductions_of_one_op_share_axes_combiner_and_condition(bodies, message):
    """TVM's ComputeVerifier: all Reduce or none, the same reduce attributes."""
    Y = te.placeholder((4, 6), name="Y")
    k = te.reduce_axis((0, 6), name="k")
    k2 = te.reduce_axis((0, 6), name="k2")
    with pytest.raises(InvalidWorkloadError, match=message):
        te.compute((4,), lambda i: bodies(Y, k, k2, i), name="bad")


# -- reference, lowering, llvm -----------------------------------------------------------

def test_reference_evaluator_computes_every_output():
    x, A, B = _elementwise()
    xs = _rand(x)
    a, b = reference.evaluate(sc.ComputeDAG([x, A, B]), [xs])
    np.testing.assert_allclose(a, xs + 1, rtol=1e-6)
    np.testing.assert_allclose(b, xs * 2, rtol=1e-6)


def test_lowering_stores_each_output_in_one_loop_nest_and_the_build_matches_numpy():
    x, A, B = _elementwise()
    s = te.create_schedule(A.op)
    xo, xi = s[A].split(A.op.axis[0], factor=16)  # 16 x 2 stores: above SMALL_LOOP_STEPS, stays a loop
    s[A].parallel(xo)
    func = sc.lower(s, [x, A, B])
    # One nest for both outputs: each run of stores holds T_v0 and T_v1 side by side (loop
    # partitioning makes the non-divisible tail, i.0 = 2, a second nest, its small loop unrolled).
    runs = [n.seq for n in T.walk_stmts(func.body)
            if isinstance(n, T.SeqStmt) and all(isinstance(c, T.Store) for c in n.seq)]
    assert runs and all([c.buffer.name for c in r] == ["T_v0", "T_v1"] * (len(r) // 2) for r in runs)
    assert sum(isinstance(n, T.For) and n.extent.value == 16 for n in T.walk_stmts(func.body)) == 1
    xs = _rand(x)
    (a, b), _ = _run(s, [x, A, B], [xs])
    np.testing.assert_allclose(a, xs + 1, rtol=1e-6)
    np.testing.assert_allclose(b, xs * 2, rtol=1e-6)


def test_a_multi_output_reduction_computed_at_its_consumer_matches_numpy():
    Y, S, Q, V = _row_stats()
    s = te.create_schedule(V.op)
    io, ii = s[V].split(V.op.axis[0], factor=5)  # 12 rows: a non-divisible tail
    s[S].compute_at(s[V], io)
    ko, ki = s[S].split(s[S].op.reduce_axis[0], factor=3)
    y = _rand(Y)
    (v,), _ = _run(s, [Y, V], [y])
    want = (y * y).mean(axis=1) - y.mean(axis=1) ** 2
    np.testing.assert_allclose(v, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(reference.evaluate(sc.ComputeDAG([Y, V]), [y])[0], want, rtol=1e-4, atol=1e-5)


def test_compute_inline_and_rfactor_refuse_a_multi_output_stage():
    Y, S, Q, V = _row_stats()
    x, A, B = _elementwise()
    W = te.compute(A.shape, lambda i: A[i] - B[i], name="W")
    state = State.from_dag(sc.ComputeDAG([x, W]))
    with pytest.raises(ScheduleError, match="2 outputs"):
        ComputeInlineStep(1).apply(state)
    state = State.from_dag(sc.ComputeDAG([Y, V]))
    with pytest.raises(ScheduleError, match="several outputs"):
        RfactorStep(1, 1, 0).apply(state)


# -- cache_write ---------------------------------------------------------------------------

def test_cache_write_caches_every_output_in_one_stage_and_matches_numpy():
    Y, S, Q, V = _row_stats()
    s = te.create_schedule([S.op])
    local = s.cache_write([S, Q], "local")
    assert [t.name for t in local] == ["SQ.local.v0", "SQ.local.v1"]
    assert [st.name for st in s.state.stages] == ["Y", "SQ.local", "SQ"]
    assert s.state.stages[1].op.num_outputs == 2 and s.state.stages[2].op.num_outputs == 2
    io, ii = s[S].split(S.op.axis[0], factor=4)
    s[local[0]].compute_at(s[S], io)
    y = _rand(Y)
    (sv, qv), _ = _run(s, [Y, S, Q], [y])
    np.testing.assert_allclose(sv, y.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qv, (y * y).sum(axis=1), rtol=1e-5, atol=1e-5)
    # The printed schedule names the cache stage by its first output.
    assert 'SQ_local = s.cache_write(SQ, "local")[0]' in s.to_python()


def test_cache_write_steps_replay_from_their_records():
    Y, S, Q, V = _row_stats()
    s = te.create_schedule(S.op)
    s.cache_write(S, "local")
    records = json.loads(json.dumps([step.to_record() for step in s.state.transform_steps]))
    replayed = replay_steps(s.state.dag, records)
    args = [Y, S, Q]
    assert str(sc.lower(replayed, args)) == str(sc.lower(s.state, args))


# -- cuda (emulated) -------------------------------------------------------------------------

def test_cuda_build_binds_blocks_and_threads_and_emulates_to_numpy():
    x, A, B = _elementwise(200)
    s = te.create_schedule(A.op)
    bx, tx = s[A].split(A.op.axis[0], factor=64)
    s[A].bind(bx, te.thread_axis("blockIdx.x"))
    s[A].bind(tx, te.thread_axis("threadIdx.x"))
    xs = _rand(x)
    (a, b), mod = _run(s, [x, A, B], [xs], target="cuda")
    np.testing.assert_allclose(a, xs + 1, rtol=1e-6)
    np.testing.assert_allclose(b, xs * 2, rtol=1e-6)
    src = mod.imported_modules[0].get_source()
    assert src.count("__global__") == 1 and "T_v0[" in src and "T_v1[" in src


def test_cuda_reduction_with_two_outputs_emulates_to_numpy():
    Y, S, Q, V = _row_stats(64, 20)
    s = te.create_schedule(S.op)
    bx, tx = s[S].split(S.op.axis[0], factor=16)
    s[S].bind(bx, te.thread_axis("blockIdx.x"))
    s[S].bind(tx, te.thread_axis("threadIdx.x"))
    y = _rand(Y)
    (sv, qv), _ = _run(s, [Y, S, Q], [y], target="cuda")
    np.testing.assert_allclose(sv, y.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qv, (y * y).sum(axis=1), rtol=1e-5, atol=1e-5)


# -- sketches and sampled states ---------------------------------------------------------------

def _policy(tensors, target):
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(tensors), target=target)
    return task, sc.SketchPolicy(task, RandomModel(0), verbose=0)


def _check_states(task, states, target):
    dag = task.compute_dag
    inputs = [_rand(t) for t in dag.inputs]
    expected = reference.evaluate(dag, inputs)
    for state in states:
        got, _ = _run(state, list(dag.tensors), inputs, target=target)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_consumer", [False, True])
def test_sketches_tile_the_multi_output_stage_and_sampled_states_match(with_consumer):
    A, B, B2, C, D, E = _two_matmuls()
    task, policy = _policy([A, B, B2, E] if with_consumer else [A, B, B2, C, D], "llvm")
    sketches = generate_sketches(policy)
    assert sketches
    for sk in sketches:
        cd = next(st for st in sk.stages if st.name == "CD")
        assert len(cd.iters) >= 6 or any(st.name == "CD.local" for st in sk.stages)  # tiled
    population = sample_init_population(policy, sketches, 4, np.random.default_rng(0))
    assert population
    _check_states(task, population, "llvm")
    feats = get_per_store_features(task, population[0], cache=None)
    assert not is_invalid(feats) and feats.shape[0] >= 2  # a row per stored buffer


def test_a_multi_output_producer_is_never_inlined():
    x, A, B = _elementwise(32)
    W = te.compute(A.shape, lambda i: A[i] * B[i], name="W")
    task, policy = _policy([x, W], "llvm")
    dag = task.compute_dag
    assert not dag.access_analyzer.is_strictly_inlineable(A.op)
    sketches = generate_sketches(policy)
    population = sample_init_population(policy, sketches, 8, np.random.default_rng(1))
    assert population
    for state in sketches + population:
        assert all(not isinstance(step, ComputeInlineStep) for step in state.transform_steps)
    _check_states(task, population, "llvm")


def test_gpu_sketches_of_a_multi_output_op_sample_states_that_emulate_to_numpy():
    A, B, B2, C, D, E = _two_matmuls()
    task, policy = _policy([A, B, B2, E], "cuda")
    population = sample_init_population(policy, generate_sketches(policy), 2, np.random.default_rng(0))
    assert population
    _check_states(task, population, "cuda")


# -- JSON ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: list(_elementwise()), lambda: list(_row_stats()[:3])])
def test_json_round_trip_is_lossless(make):
    tensors = make()
    dag = sc.ComputeDAG(tensors)
    payload = json.loads(dag.to_json())
    compute = next(o for o in payload["ops"] if o["kind"] == "compute")
    assert isinstance(compute["body"], list) and len(compute["body"]) == 2
    back = sc.ComputeDAG.from_json(dag.to_json())
    assert back.workload_key == dag.workload_key and str(back) == str(dag)
    assert back.ops[-1].num_outputs == 2
    inputs = [_rand(t) for t in dag.inputs]
    for got, want in zip(reference.evaluate(back, inputs), reference.evaluate(dag, inputs)):
        np.testing.assert_array_equal(got, want)
    got, _ = _run(State.from_dag(back), list(back.tensors), inputs)
    for g, w in zip(got, reference.evaluate(dag, inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_json_rejects_malformed_multi_output_bodies_with_a_path():
    Y, S, Q, V = _row_stats()
    payload = json.loads(sc.ComputeDAG([Y, S, Q]).to_json())
    one = json.loads(json.dumps(payload))
    one["ops"][1]["body"] = one["ops"][1]["body"][:1]
    with pytest.raises(InvalidWorkloadError, match="at least two") as err:
        sc.ComputeDAG.from_json(one)
    assert err.value.path == "ops[1].body"
    other = json.loads(json.dumps(payload))
    other["ops"][1]["body"][1]["combiner"] = "max"
    with pytest.raises(InvalidWorkloadError, match="share the combiner") as err:
        sc.ComputeDAG.from_json(other)
    assert err.value.path == "ops[1].body"
