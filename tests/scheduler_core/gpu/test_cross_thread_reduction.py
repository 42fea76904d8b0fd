"""Reductions whose reduce loop is bound to threadIdx.x (Ansor's RuleCrossThreadReduction),
lowered as TVM's thread allreduce by ``lower_for_gpu``: per-thread partials in a local
buffer, one shared slot per thread (and per spatial element of the block), a tree
reduction over the power-of-two padded width with a barrier after each step, the result
stored where the program stored it (by thread 0, or by every thread for a local buffer
that later code of the block reads).  Each case is emulated with the race check against
numpy; then states sampled from the GPU sketches of softmax, min, a zero-rank sum and a
small matmul are built for cuda and emulated against the reference evaluator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import RandomModel
from scheduler_core import te
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag import reference
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.driver.cuda_build import emulate
from scheduler_core.ir import tir as T
from scheduler_core.lowering.gpu import lower_for_gpu
from scheduler_core.lowering.lower import lower_state
from scheduler_core.passes.gpu_emulation import RaceConditionError
from scheduler_core.search.search_policy import SketchPolicy
from scheduler_core.search.search_task import SearchTask
from sketch_rules import generate_sketches, sample_init_population
from sketch_rules.gpu_sketch_rules import has_cross_thread_reduction
from tests import workloads as W
from tests.scheduler_core.gpu import gpu_schedules as G
from tests.sketch_rules.test_gpu_sketches import min_nm, zero_rank_reduce


def run(case, seed: int = 0):
    """Emulate ``case`` with the race check and compare with numpy; returns the kernel form."""
    func = case.kernel_form()
    arrays = case.arrays(seed)
    emulate(func, *arrays, check_races=True)
    case.check(arrays)
    return func


def shared_buffers(func) -> list:
    return [s.buffer for s in T.walk_stmts(func.body) if isinstance(s, T.Allocate) and s.buffer.scope == "shared"]


def barriers(func) -> int:
    return sum(isinstance(s, T.Barrier) for s in T.walk_stmts(func.body))


def guards(func) -> list:
    """The constants ``c`` of the conditions ``threadIdx.x < c``, in program order."""
    out = []
    for s in T.walk_stmts(func.body):
        if isinstance(s, T.IfThenElse) and T.expr_str(s.cond).startswith("(threadIdx.x < "):
            out.append(int(s.cond.b.value))
    return out


# -- hand-written schedules ---------------------------------------------------------------

@pytest.mark.parametrize("threads,n", [(32, 100), (100, 250), (7, 9)])
def test_row_sum_with_the_reduction_on_threadIdx_x(threads, n):
    """One row per block; ``threads`` not a power of two pads the tree (width 128 for 100:
    steps of 36, 32, 16, ..., 1 threads), the tail of k is guarded."""
    func = run(G.row_reduce_cross_thread("sum", n=n, threads=threads))
    (launch,) = func.attrs["kernels"]
    assert launch["block"] == [threads, 1, 1] and launch["grid"] == [6, 1, 1]
    (red,) = shared_buffers(func)
    assert red.name == "B.red_shared" and launch["shared_bytes"] == 4 * threads
    width = 1 << (threads - 1).bit_length()
    steps = [min(w, threads - w) for w in (width >> k for k in range(1, width.bit_length())) if w]
    assert guards(func) == steps + [1]  # the tree, then thread 0 stores B[row]
    assert barriers(func) == len(steps) + 1


@pytest.mark.parametrize("combiner", ["min", "max", "prod"])
def test_min_max_prod_combiners(combiner):
    case = G.row_reduce_cross_thread(combiner, n=50, threads=16)
    if combiner == "prod":  # values near 1, so that the product of 50 stays well scaled
        make = case.make_inputs
        case = replace(case, make_inputs=lambda rng: [1.0 + 0.1 * make(rng)[0], np.zeros(6, "float32")])
    run(case)


@pytest.mark.parametrize("kw", [dict(rows_per_block=3), dict(rows_per_block=3, rows_inside=True),
                                dict(rows_per_block=3, rows_on_threads_y=True),
                                dict(combiner="max", rows_per_block=2, rows_inside=True, threads=100, n=250)],
                         ids=["serial_rows", "rows_inside_reduce", "rows_on_threadIdx_y", "max_rows_inside_100"])
def test_several_rows_per_block(kw):
    """7 rows, a block per 2 or 3 (the last block partial): rows as a serial loop around the
    reduce loops (an allreduce per row), inside them (one partial and one slot row per
    row: a shared buffer of rows x threads), or on threadIdx.y (a slot row per y)."""
    case = G.row_reduce_cross_thread(m=7, **kw)
    func = run(case)
    (red,) = shared_buffers(func)
    rows = kw["rows_per_block"]
    threads = kw.get("threads", 32)
    per_row = kw.get("rows_inside") or kw.get("rows_on_threads_y")
    assert red.shape[0].value == (rows if per_row else 1) * threads


def test_softmax_with_both_reductions_across_threads():
    """row_max and row_sum at the row loop (blockIdx.x), 32 threads each, softmax on 64
    threads: the reduced values are local and every thread reads them (the exp of row_sum
    uses row_max, the division both): each thread keeps the allreduce's result."""
    case = G.softmax_cross_thread()
    func = run(case)
    run(case, seed=1)
    assert [b.name for b in shared_buffers(func)] == ["row_max.red_shared", "row_sum.red_shared"]
    (launch,) = func.attrs["kernels"]
    assert launch["block"] == [64, 1, 1] and launch["shared_bytes"] == 2 * 32 * 4
    stores = [s for s in T.walk_stmts(func.body) if isinstance(s, T.Store) and s.buffer.name in ("row_max", "row_sum")]
    assert [T.expr_str(s.value) for s in stores] == ["row_max.red_shared[0]", "row_sum.red_shared[0]"]


@pytest.mark.parametrize("red_threads,threads", [(32, 32), (64, 32), (20, 128)])
def test_softmax_thread_counts(red_threads, threads):
    run(G.softmax_cross_thread(m=3, n=77, red_threads=red_threads, threads=threads))


def test_zero_rank_sum():
    """No spatial loop: the init is host code; init and reduction make one kernel of one block."""
    func = run(G.zero_rank_sum_cross_thread())
    (launch,) = func.attrs["kernels"]
    assert launch["grid"] == [1, 1, 1] and launch["block"] == [32, 1, 1]


def test_small_matmul_with_k_on_threadIdx_x():
    func = run(G.matmul_small_cross_thread())
    (launch,) = func.attrs["kernels"]
    assert launch["grid"] == [64, 1, 1] and launch["block"] == [32, 1, 1]


@pytest.mark.parametrize("local", [False, True], ids=["global_result", "local_result"])
def test_every_barrier_of_the_allreduce_is_needed(local):
    """Without any one of its barriers the emulator's race check finds a race on the slots
    (but the last one before thread 0 reads slot 0, which it wrote itself, for a global
    result; a local result is read by every thread).  (With a width that is not a power of
    two the barrier after the first, partial step can be one that no thread needs.)"""
    from tests.scheduler_core.gpu.test_gpu_emulation import drop_barrier
    case = G.softmax_cross_thread(m=2, n=40, red_threads=16, threads=16) if local else \
        G.row_reduce_cross_thread(n=40, threads=16)
    func = run(case)
    n = barriers(func)
    assert n == (10 if local else 5)
    for k in range(n if local else n - 1):
        with pytest.raises(RaceConditionError, match="red_shared"):
            emulate(replace(func, body=drop_barrier(func.body, k)), *case.arrays(), check_races=True)


def test_cuda_source_of_the_allreduce():
    case = G.row_reduce_cross_thread()
    src = sc.build(case.sch, case.args, target="cuda", name="rs").imported_modules[0].get_source()
    assert "__shared__ float B_red_shared[32];" in src and "float B_red_local[1];" in src
    assert src.count("__syncthreads();") == 6
    mod = sc.build(case.sch, case.args, target="cuda", name="rs")
    arrays = case.arrays()
    mod.emulate(*arrays)
    case.check(arrays)


# -- what is not supported ------------------------------------------------------------------

def _row_sum(m=4, n=64):
    A, k, B = G._reduce_rows("sum", m, n)
    return A, k, B, te.create_schedule(B.op)


def test_error_reduction_on_threadIdx_y():
    A, k, B, s = _row_sum()
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    _, ki = s[B].split(k, factor=16)
    s[B].bind(ki, te.thread_axis("threadIdx.y"))
    with pytest.raises(LoweringError, match=r"stage B .*reduce loop k\.1 is bound to threadIdx\.y; a cross-thread "
                                            r"reduction is supported on threadIdx\.x only"):
        lower_for_gpu(lower_state(s.state, [A, B]), "cuda")


def test_error_two_bound_reduce_loops():
    A = te.placeholder((4, 16, 16), name="A")
    r1 = te.reduce_axis((0, 16), name="r1")
    r2 = te.reduce_axis((0, 16), name="r2")
    B = te.compute((4,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    _, r1i = s[B].split(r1, factor=4)
    _, r2i = s[B].split(r2, factor=8)
    s[B].bind(r1i, te.thread_axis("threadIdx.y"))
    s[B].bind(r2i, te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match=r"stage B .*reduce loops r1\.1 \(threadIdx\.y\), r2\.1 \(threadIdx\.x\) "
                                            r"are all bound to threads"):
        lower_for_gpu(lower_state(s.state, [A, B]), "cuda")


def test_error_reduction_on_threadIdx_x_inside_a_threadIdx_x_loop():
    """row_sum computed inside softmax's threadIdx.x loop with its own k on threadIdx.x."""
    A, out = W.softmax(2, 64)
    s = te.create_schedule(out.op)
    (sm,) = [t for t in out.op.input_tensors() if t.op.name == "row_sum"]
    i, j = s[out].op.axis
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    _, ji = s[out].split(j, factor=32)
    s[out].bind(ji, te.thread_axis("threadIdx.x"))
    s[sm].compute_at(s[out], ji)
    _, ki = s[sm].split(s[sm].op.reduce_axis[0], factor=32)
    s[sm].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match=r"stage row_sum .*inside loop j\.1 bound to threadIdx\.x"):
        lower_for_gpu(lower_state(s.state, [A, out]), "cuda")


# -- states sampled from the GPU sketches -----------------------------------------------------

SAMPLED = {
    "softmax": lambda: W.softmax(4, 100),
    "min": lambda: min_nm(6, 300),
    "zero_rank_sum": lambda: zero_rank_reduce(200),
    "small_matmul": lambda: W.matmul(8, 8, 1024),
}


def sampled_states(dag: ComputeDAG, n: int, seed: int = 0) -> list:
    task = SearchTask(compute_dag=dag, target="cuda")
    policy = SketchPolicy(task, RandomModel(seed), verbose=0)
    sketches = generate_sketches(policy, policy.sketch_rules)
    pop = sample_init_population(policy, sketches, n, np.random.default_rng(seed), check_lowering=False)
    seen: set = set()
    out = []
    for st in pop:
        key = str([step.to_record() for step in st.transform_steps])
        if key not in seen:
            seen.add(key)
            out.append(st)
    return out


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_sampled_cross_thread_states_build_and_emulate(name):
    dag = ComputeDAG(SAMPLED[name]())
    states = [st for st in sampled_states(dag, 10)
              if any(has_cross_thread_reduction(st, k) for k in range(len(st.stages)))]
    assert states, f"no cross-thread-reduction state sampled for {name}"
    rng = np.random.default_rng(1)
    inputs = [rng.uniform(-1, 1, size=tuple(int(x.value) for x in t.shape)).astype(t.dtype) for t in dag.inputs]
    expected = reference.evaluate(dag, inputs)
    for st in states:
        mod = sc.build(st, list(dag.tensors), "cuda")
        outs = [np.full(tuple(int(x.value) for x in t.shape), np.nan, dtype=t.dtype) for t in dag.outputs]
        emulate(mod.kernel_func, *[a.copy() for a in inputs], *outs, check_races=True)
        for got, want in zip(outs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(st))
