"""Gathers (an index read from a tensor) are checked at run time: clamp-and-flag.

No analysis can bound ``W[ids[i], j]``: the index comes from the data.  Lowering wraps each
such axis index in ``CheckedIndex(index, extent)``; the CPU code clamps a bad index to 0 (so
nothing outside the buffers is read) and returns INDEX_OUT_OF_BOUNDS, which the runtime raises
as IndexOutOfBoundsError and the runner records as an error; CUDA stops the kernel.  In-range
data gives numpy's answer, whatever the schedule (vectorized, parallel, a tail, a guard).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.arith.int_set import const_range
from scheduler_core.base.errors import DeviceRuntimeError, IndexOutOfBoundsError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.cuda_build import emulate
from scheduler_core.driver.nvcc import compile_cuda, nvcc_available
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from sketch_rules import generate_sketches, sample_init_population
from tests import guard_pages
from tests.guard_pages import next_to_guard_page
from tests.sketch_rules.stub_policy import make_policy

V, D, N = 100, 64, 64
BAD = (V, -1, 10**6, -(10**6))  # one past the end, negative, far away both ways
RNG = np.random.default_rng(0)


def embedding(W, ids):
    return te.compute((N, D), lambda i, j: W[ids[i], j], name="O")


def column(W, ids):
    return te.compute((N,), lambda i: W[ids[i], 3], name="O")


def guarded_both(W, ids):
    return te.compute((N, D), lambda i, j: te.if_then_else(te.all(ids[i] >= 0, ids[i] < V), W[ids[i], j], 0.0),
                      name="O")


def guarded_above(W, ids):
    return te.compute((N,), lambda i: te.if_then_else(ids[i] < V, W[ids[i], 3], 0.0), name="O")


def vec_inner_parallel_outer(s, O):
    i, j = s[O].op.axis
    _, ji = s[O].split(j, 8)
    s[O].vectorize(ji)
    s[O].parallel(i)


def vec_inner(s, O):
    i, j = s[O].op.axis
    _, ji = s[O].split(j, 8)
    s[O].vectorize(ji)


def vec_index(factor):
    def sched(s, O):
        (i,) = s[O].op.axis
        _, ii = s[O].split(i, factor)
        s[O].vectorize(ii)
    return sched


# name: (compute, schedule, numpy, which BAD values are errors)
CASES = {
    "embedding, vectorized rows, parallel": (embedding, vec_inner_parallel_outer, lambda w, k: w[k], BAD),
    "vector of gathered indices": (column, vec_index(8), lambda w, k: w[k, 3], BAD),
    "vector of gathered indices with a tail": (column, vec_index(24), lambda w, k: w[k, 3], BAD),
    "guarded on both sides": (guarded_both, vec_inner,
                              lambda w, k: np.where(((k >= 0) & (k < V))[:, None], w[np.clip(k, 0, V - 1)], 0), ()),
    "guarded above only": (guarded_above, vec_index(8),
                           lambda w, k: np.where(k < V, w[np.minimum(k, V - 1), 3], 0), (-1, -(10**6))),
}


def _built(case):
    compute, schedule, _, _ = CASES[case]
    W = te.placeholder((V, D), name="W")
    ids = te.placeholder((N,), name="ids", dtype="int32")
    O = compute(W, ids)
    s = te.create_schedule(O.op)
    schedule(s, O)
    return s, [W, ids, O]


@pytest.mark.parametrize("case", list(CASES))
def test_gathers_match_numpy_and_a_bad_index_is_an_error_not_a_wild_read(case):
    s, args = _built(case)
    lowered = sc.lower(s, args)
    assert "checked_index(" in str(lowered)
    check_bounds(lowered)  # the clamped accesses are proved in bounds
    f = sc.build(s, args, "llvm")
    keep: list = []
    w = next_to_guard_page(RNG.random((V, D), dtype="float32"), keep)
    ids = RNG.integers(0, V, N).astype("int32")
    out = np.zeros(tuple(int(x) for x in args[2].shape), "float32")
    f(w, ids, out)
    want = CASES[case][2]
    np.testing.assert_allclose(out, want(np.asarray(w), ids), rtol=1e-6)
    for bad in BAD:
        ids2 = ids.copy()
        ids2[N - 3] = bad
        if bad in CASES[case][3]:
            with pytest.raises(IndexOutOfBoundsError, match="INDEX_OUT_OF_BOUNDS"):
                f(w, ids2, out)
        else:
            f(w, ids2, out)
            np.testing.assert_allclose(out, want(np.asarray(w), ids2), rtol=1e-6)
    assert issubclass(IndexOutOfBoundsError, DeviceRuntimeError)


def test_the_issue_gathers_compile_with_checks():
    """``A[Idx[i] + 60]``, ``A[Idx[i] * 100000]``, ``A[int(X[i] * 1000)]`` with 200 elements: the
    reference's answer for in-range data, an error for the rest."""
    A = te.placeholder((200,), name="A")
    Idx = te.placeholder((16,), name="Idx", dtype="int32")
    X = te.placeholder((16,), name="X")
    forms = {
        "plus": (lambda i: A[Idx[i] + 60], [Idx], lambda a, k: a[k + 60], np.arange(16) * 5, [140, -61]),
        "times": (lambda i: A[Idx[i] * 100000], [Idx], lambda a, k: a[k * 100000], np.zeros(16), [1, -1]),
        "float": (lambda i: A[(X[i] * 1000.0).astype("int32")],
                  [X], lambda a, x: a[(x * 1000).astype("int32")], np.arange(16) / 1000.0 + 1e-4, [0.2, -0.001]),
    }
    a = RNG.random(200, dtype="float32")
    for name, (body, inputs, ref, good, bad_values) in forms.items():
        O = te.compute((16,), body, name="O")
        s = te.create_schedule(O.op)
        f = sc.build(s, [A, *inputs, O], "llvm")
        data = np.asarray(good, dtype=inputs[0].dtype)
        out = np.zeros(16, "float32")
        f(a, data, out)
        np.testing.assert_allclose(out, ref(a, data), rtol=1e-6, err_msg=name)
        for v in bad_values:
            d2 = data.copy()
            d2[7] = v
            with pytest.raises(IndexOutOfBoundsError):
                f(a, d2, out)


def test_checked_index_ranges_over_its_axis():
    i = E.Var("i")
    ids = T.Buffer("ids", "int32", (N,))
    c = E.CheckedIndex(E.BufferLoad(ids, i, "int32"), E.const(V))
    assert const_range(c * D + 5, {}) == (5, (V - 1) * D + 5)
    assert EF.structural_equal(EF.rebuild(c, EF.children(c)), c)


@pytest.fixture(scope="module")
def measure():
    builder = LocalBuilder(timeout_s=60, n_parallel=1)
    runner = LocalRunner(timeout_s=20, number=1, repeat=1, min_repeat_ms=0, check_correctness=False)
    yield builder, runner
    builder.close()
    runner.close()


def test_the_runner_records_an_out_of_range_gather_and_goes_on(measure):
    """The runner fills integer inputs with 1..7: ``A[Idx[i] * 100000]`` is out of range on every
    run (an error record naming INDEX_OUT_OF_BOUNDS, the worker alive), an embedding is not.
    (With the correctness check on, the reference evaluator refuses the same index first.)"""
    builder, runner = measure
    A = te.placeholder((200,), name="A")
    Idx = te.placeholder((16,), name="Idx", dtype="int32")
    far = ComputeDAG([A, Idx, te.compute((16,), lambda i: A[Idx[i] * 100000], name="O")])
    W = te.placeholder((V, D), name="W")
    ids = te.placeholder((N,), name="ids", dtype="int32")
    emb = ComputeDAG([W, ids, embedding(W, ids)])
    inputs = [MeasureInput(Task.create(d, "llvm"), State.from_dag(d)) for d in (far, emb, far, emb)]
    results = runner.run(inputs, builder.build(inputs))
    for k, res in enumerate(results):
        if k % 2 == 0:
            assert res.error_no == MeasureErrorNo.RUNTIME_DEVICE and "INDEX_OUT_OF_BOUNDS" in str(res.error_msg), res
        else:
            assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg


def test_cuda_clamps_and_flags_a_bad_gathered_index():
    """The CUDA kernel reads element 0 for a bad index and sets bit 2 of its module's status word,
    which the launcher reads (IndexOutOfBoundsError; the context stays usable, unlike a trap).
    Here: the source, its PTX, and the CPU emulation; on a GPU: benchmarks/gpu step 5e."""
    s, args = _built("embedding, vectorized rows, parallel")
    W, ids, O = args
    g = te.create_schedule(O.op)
    i, j = g[O].op.axis
    g[O].bind(i, te.thread_axis("blockIdx.x"))
    g[O].bind(j, te.thread_axis("threadIdx.x"))
    mod = sc.build(g, args, "cuda -arch=sm_80")
    src = mod.get_source("cu")
    assert "checked_index(" in src and "autosched_status = 2u" in src and "__trap" not in src
    assert mod.launch["status_symbol"] == "autosched_status"
    if nvcc_available() is None:  # None: nvcc is here
        ptx = compile_cuda(src, "sm_80", "ptx").decode()
        assert ".entry" in ptx and ".global .align 4 .u32 autosched_status;" in ptx  # unmangled, for get_global
    # the GPU program run on the CPU (the emulation the search checks GPU states with) flags it too
    w = RNG.random((V, D), dtype="float32")
    k = RNG.integers(0, V, N).astype("int32")
    out = np.zeros((N, D), "float32")
    emulate(mod.kernel_func, w, k, out)
    np.testing.assert_allclose(out, w[k], rtol=1e-6)
    k[5] = V
    with pytest.raises(IndexOutOfBoundsError):
        emulate(mod.kernel_func, w, k, out)


# The issue's three accepted gathers over A (200 elements), L outputs (enough for the sketches to
# tile, vectorize and parallelize): (body, index dtype, good data, bad values)
L = 1000
ISSUE_GATHERS = {
    "A[Idx[i] + 60]": (lambda A, I: lambda i: A[I[i] + 60], "int32", np.arange(L) % 140, [140, -61, 2**31 - 1]),
    "A[Idx[i] * 100000]": (lambda A, I: lambda i: A[I[i] * 100000], "int32", np.zeros(L), [1, -1, 30000]),
    "A[int(X[i] * 1000)]": (lambda A, I: lambda i: A[(I[i] * 1000.0).astype("int32")], "float32",
                            (np.arange(L) % 200) / 1000.0 + 1e-4, [0.2, -0.001, 1e30]),
}

# Runs in a fresh interpreter with no project import: the exported library through ctypes, as its
# header says, with A and the index tensor each against a PROT_NONE page (after, then before).
ARTIFACT_SCRIPT = """
import ctypes, json, sys
import numpy as np
{guard}
lib_path, good, bad_values = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
f = ctypes.CDLL(lib_path).default_function
f.restype, f.argtypes = ctypes.c_int32, [ctypes.c_void_p] * 3
a0 = np.arange(200, dtype="float32")
data0 = np.asarray(good, dtype=sys.argv[4])
codes = []
for at_end in (True, False):
    keep = []
    a = next_to_guard_page(a0, keep, at_end)
    for values in [None, *bad_values]:
        d = data0.copy()
        if values is not None:
            d[len(d) - 7] = values
        d = next_to_guard_page(d, keep, at_end)
        out = np.zeros(len(d), "float32")
        codes.append(int(f(a.ctypes.data, d.ctypes.data, out.ctypes.data)))
        if values is None:
            codes.append(out.tolist())
print(json.dumps(codes))
"""


@pytest.mark.parametrize("form", list(ISSUE_GATHERS))
def test_the_issue_gathers_sampled_programs_and_artifacts_read_nothing_outside(form, tmp_path):
    """The programs the search would measure for the issue's gathers (sampled from their sketch,
    and vectorized with and without a tail, parallel), in this process and as an exported library run in a fresh
    process with no project import, with each buffer against an inaccessible page: numpy's
    answer for in-range data, INDEX_OUT_OF_BOUNDS (2) for each bad value, never a fault."""
    body, dtype, good, bad_values = ISSUE_GATHERS[form]
    A = te.placeholder((200,), name="A")
    Idx = te.placeholder((L,), name="Idx", dtype=dtype)
    dag = ComputeDAG([A, Idx, te.compute((L,), body(A, Idx), name="O")])
    policy = make_policy(dag, seed=0)
    states = sample_init_population(policy, generate_sketches(policy), 4, np.random.default_rng(0))
    assert states
    for factor in (8, 24):  # what mutations reach beside the sampled one: vectorized, with and without a tail
        sch = Schedule.from_state(State.from_dag(dag))
        out = dag.tensors[2]
        io, ii = sch[out].split(sch[out].op.axis[0], factor=factor)
        sch[out].vectorize(ii)
        sch[out].parallel(io)
        states.append(sch.state)
    a = np.arange(200, dtype="float32")
    data = np.asarray(good, dtype=dtype)
    want = a[(data * 1000).astype("int32") if dtype == "float32" else
             data * 100000 if "100000" in form else data + 60]
    guard_source = inspect.getsource(guard_pages).split("\n\n\n", 1)[1]
    script = ARTIFACT_SCRIPT.format(guard="import ctypes, mmap\n" + guard_source)
    for k, state in enumerate(states):
        mod = sc.build(state, list(dag.tensors), "llvm")
        keep: list = []
        for at_end in (True, False):
            out = np.zeros(L, "float32")
            mod(next_to_guard_page(a, keep, at_end), next_to_guard_page(data, keep, at_end), out)
            np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=str(state))
            for v in bad_values:
                d2 = data.copy()
                d2[L - 7] = v
                with pytest.raises(IndexOutOfBoundsError):
                    mod(next_to_guard_page(a, keep, at_end), next_to_guard_page(d2, keep, at_end), out)
        lib = tmp_path / f"gather{k}.so"
        mod.export_library(lib)
        run = subprocess.run([sys.executable, "-c", script, str(lib), json.dumps(data.tolist()),
                              json.dumps(bad_values), dtype], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2"})
        assert run.returncode == 0, run.stderr[-2000:]
        codes = json.loads(run.stdout)
        n = len(bad_values)
        for side in (codes[: n + 2], codes[n + 2:]):
            assert side[0] == 0 and side[2:] == [2] * n, (form, k, codes)
            np.testing.assert_allclose(side[1], want, rtol=1e-6)
