"""States sampled from the GPU sketches build for ``cuda``, compile, and emulate to the reference.

    cuda SearchTask --generate_sketches--> sketches --sample_init_population (+ mutations)-->
        States --sc.build(.., "cuda")--> CudaModule
            --check_gpu_program (static)--> --emulate (check_races)--> == reference.evaluate
            --nvcc: PTX--> --ptxas -v--> registers within the limits (skipped without nvcc)

The issue's "done means" for CI without a GPU: every state the GPU search can propose for
the core DAG set (matmul, matmul+bias+ReLU, conv2d+bias+ReLU, softmax, layer norm, batch
matmul, depthwise conv2d, transpose, RGB->YUV, TVM's min reduction, max pooling and
zero-rank sum; small shapes, so emulating every block and thread is fast) is a CUDA program
that nvcc accepts, that a GPU of the target could launch, and that computes what the
numpy reference evaluator computes (rtol 1e-4, atol 1e-5), with no shared-memory race.

The cross-thread-reduction sketches (``RuleCrossThreadReduction``) are lowered as a thread
allreduce through shared memory (``lowering/gpu.py``); a state the lowering refuses for a
reduction across GPU threads is counted apart in the table and fails like any other error,
an invalid program, or a wrong number.

Fast tier: a few states per DAG.  ``slow``: more states, more seeds, more mutations.
``python tests/scheduler_core/gpu/test_sampled_gpu_states.py [n_init n_mut]`` prints the
per-DAG counts (sampled, built, PTX ok, emulated ok, refused, other failures).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag import reference
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.cuda_build import emulate
from scheduler_core.driver.gpu_validity import check_gpu_program
from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.search.search_task import SearchTask
from sketch_rules import apply_mutation, generate_sketches, sample_init_population
from sketch_rules.gpu_sketch_rules import has_cross_thread_reduction
from sketch_rules.params import SketchPolicyParams
from tests import workloads as W
from tests.sketch_rules.stub_policy import StubPolicy
from tests.sketch_rules.test_gpu_sketches import max_pool2d, min_nm, zero_rank_reduce

TARGET = "cuda -arch=sm_80"
NO_NVCC = nvcc_available()

# Small shapes with enough parallelism that the tiled sketches bind at least a warp of
# threads (Ansor drops states with fewer), some of them not multiples of the tiles.
DAGS = {
    "matmul": lambda: W.matmul(32, 24, 9),
    "matmul_bias_relu": lambda: W.matmul_bias_relu(24, 32, 7),
    "conv2d_bias_relu": lambda: W.conv2d_nchw(1, 3, 8, 8, 8, 3, 3, pad=1),
    "softmax": lambda: W.softmax(4, 40),
    "layer_norm": lambda: W.layer_norm(6, 20),
    "batch_matmul": lambda: W.batch_matmul(2, 8, 16, 6),
    # 6x6, not 8x8: two of the states sampled at 8x8 unroll into kernels whose emulation takes
    # 10-40 s to compile on two cores; at 6x6 every state emulates in a few seconds
    "depthwise_conv2d": lambda: W.depthwise_conv2d(1, 4, 6, 6, 3, 3, pad=1),
    "transpose": lambda: W.transpose(13, 40),
    "rgb_to_yuv": lambda: W.rgb_to_yuv(11, 6),
    "min": lambda: min_nm(5, 96),
    "max_pool": lambda: max_pool2d(1, 4, 7, 7),
    "zero_rank_sum": lambda: zero_rank_reduce(100),
}

# The LoweringError messages of a reduction across GPU threads (not supported yet).
XTHREAD_MESSAGES = (
    re.compile(r"a reduction across GPU threads or blocks is not supported"),
    re.compile(r"local buffer \S+ is written inside loop \S+ bound to threadIdx\.\w but allocated outside it"),
)
RTOL, ATOL = 1e-4, 1e-5


def is_cross_thread_refusal(state, err: BaseException) -> bool:
    """Whether ``err`` is the GPU lowering refusing a cross-thread reduction of ``state``."""
    if not isinstance(err, LoweringError):
        return False
    if not any(has_cross_thread_reduction(state, sid) for sid in range(len(state.stages))):
        return False
    return any(p.search(str(err)) for p in XTHREAD_MESSAGES)


def records(state) -> list:
    return [s.to_record() for s in state.transform_steps]


@dataclass
class Sample:
    """One sampled state and what became of it."""

    state: object
    origin: str                 # "init" or "mutant"
    module: object = None       # the CudaModule, when built
    error: str = ""             # why it failed ("" when it did not)
    refused: bool = False       # refused by the lowering for a cross-thread reduction


@dataclass
class Sweep:
    name: str
    dag: ComputeDAG
    samples: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


def cuda_policy(dag: ComputeDAG, seed: int) -> StubPolicy:
    task = SearchTask(compute_dag=dag, target=TARGET)
    return StubPolicy(task, SketchPolicyParams(), np.random.default_rng(seed))


def sample_states(dag: ComputeDAG, n_init: int, n_mut: int, seed: int) -> list:
    """``n_init`` states of the init population and up to ``n_mut`` distinct mutants of them."""
    policy = cuda_policy(dag, seed)
    sketches = generate_sketches(policy)
    rng = np.random.default_rng(seed)
    # Tiled sketches of small shapes often give fewer threads than a warp (dropped, as in
    # Ansor), and sampling gives up after 64 fruitless tries: ask a few times.
    pop: list = []
    seen: set = set()
    for _ in range(12):
        if len(pop) >= n_init:
            break
        for state in sample_init_population(policy, sketches, n_init - len(pop), rng, check_lowering=False):
            if str(records(state)) not in seen:
                seen.add(str(records(state)))
                pop.append(state)
    out = [Sample(s, "init") for s in pop]
    for k in range(20 * n_mut):
        if not pop or sum(s.origin == "mutant" for s in out) >= n_mut:
            break
        new = apply_mutation(policy, pop[k % len(pop)], rng)
        if new is None or str(records(new)) in seen:
            continue
        seen.add(str(records(new)))
        out.append(Sample(new, "mutant"))
    return out


def inputs_of(dag: ComputeDAG, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=tuple(int(s.value) for s in t.shape)).astype(t.dtype)
            for t in dag.inputs]


def build_sample(dag: ComputeDAG, sample: Sample) -> None:
    """Build ``sample`` for cuda (bounds-checked, statically valid); sets module/error/refused."""
    args = list(dag.tensors)
    try:
        check_bounds(sc.lower(sample.state, args))
        mod = sc.build(sample.state, args, TARGET)
        check_gpu_program(mod, TARGET, registers=False)
    except Exception as err:  # noqa: BLE001 - every failure is recorded, then judged
        sample.refused = is_cross_thread_refusal(sample.state, err)
        sample.error = f"{type(err).__name__}: {err}"
        return
    sample.module = mod


def emulate_sample(dag: ComputeDAG, sample: Sample, inputs: list, expected: list) -> str:
    """``""`` when the emulated program matches the reference, else what went wrong."""
    outs = [np.full(tuple(int(s.value) for s in t.shape), np.nan, dtype=t.dtype) for t in dag.outputs]
    ins = [a.copy() for a in inputs]
    try:
        emulate(sample.module.kernel_func, *ins, *outs, check_races=True)
        for a, b in zip(ins, inputs):
            assert np.array_equal(a, b), "the program wrote into an input"
        for t, got, want in zip(dag.outputs, outs, expected):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"output {t.name}")
    except Exception as err:  # noqa: BLE001 - judged by the caller
        return f"{type(err).__name__}: {str(err)[:1500]}"
    return ""


def ptx_sample(sample: Sample) -> str:
    """``""`` when nvcc compiles the source to PTX, ptxas assembles it and the program stays
    within the target's limits with ptxas's register counts, else what went wrong."""
    try:
        ptx = sample.module.imported_modules[0].ptx()
        assert b".entry" in ptx, "no kernel entry in the PTX"
        check_gpu_program(sample.module, TARGET, registers=True)
    except Exception as err:  # noqa: BLE001 - judged by the caller
        return f"{type(err).__name__}: {str(err)[:1500]}"
    return ""


@functools.cache
def sweep(name: str, n_init: int, n_mut: int, seed: int) -> Sweep:
    """Sample and build (once per process) the states of one DAG."""
    dag = ComputeDAG(DAGS[name]())
    out = Sweep(name, dag)
    out.samples = sample_states(dag, n_init, n_mut, seed)
    for sample in out.samples:
        out.counts["sampled"] += 1
        build_sample(dag, sample)
        if sample.module is not None:
            out.counts["built"] += 1
        elif sample.refused:
            out.counts["refused_cross_thread"] += 1
        else:
            out.counts["other_failures"] += 1
    return out


def _describe(name: str, sample: Sample, what: str) -> str:
    return f"{name} ({sample.origin}) {what}\n  steps: {records(sample.state)}"


def _finish(name: str, s: Sweep, failures: list, what: str) -> None:
    """Fail on ``failures`` and on states refused for a cross-thread reduction."""
    if failures:
        pytest.fail(f"{len(failures)} sampled state(s) of {name} failed ({dict(s.counts)}):\n"
                    + "\n".join(failures[:8]), pytrace=False)
    refused = [x for x in s.samples if x.refused]
    if refused:
        pytest.fail(f"{len(refused)} of {len(s.samples)} sampled states of {name} are refused by the GPU "
                    f"lowering for a cross-thread reduction (the other {len(s.samples) - len(refused)} {what}); "
                    f"first: {refused[0].error[:300]}", pytrace=False)


def check_emulation(name: str, n_init: int, n_mut: int, seed: int) -> None:
    s = sweep(name, n_init, n_mut, seed)
    assert s.samples, f"no state sampled for {name}"
    failures = [_describe(name, x, f"did not build: {x.error}") for x in s.samples
                if x.module is None and not x.refused]
    inputs = inputs_of(s.dag, seed)
    expected = reference.evaluate(s.dag, inputs)
    for x in s.samples:
        if x.module is None:
            continue
        problem = emulate_sample(s.dag, x, inputs, expected)
        if problem:
            failures.append(_describe(name, x, f"emulation: {problem}"))
    _finish(name, s, failures, "emulate to the reference")


def check_ptx(name: str, n_init: int, n_mut: int, seed: int) -> None:
    s = sweep(name, n_init, n_mut, seed)
    failures = [_describe(name, x, f"PTX: {p}") for x in s.samples if x.module is not None
                for p in [ptx_sample(x)] if p]
    _finish(name, s, failures, "compile to PTX and pass ptxas")


FAST = (3, 1, 0)   # init states, mutants, seed


@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_gpu_states_emulate_to_the_reference(name):
    check_emulation(name, *FAST)


# ptxas on every DAG in the slow tier (below); the fast tier: one of each kind (tiled matmul with a
# fused epilogue, a windowed conv, a cross-thread reduction, a multi-reduction normalization); every
# DAG is emulated against the reference in the fast tier (above)
PTX_FAST = ("matmul_bias_relu", "depthwise_conv2d", "softmax", "layer_norm")


@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc/ptxas cannot run here: {NO_NVCC}")
@pytest.mark.parametrize("name", [n if n in PTX_FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(DAGS)])
def test_sampled_gpu_states_compile_to_ptx(name):
    check_ptx(name, *FAST)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_gpu_states_emulate_to_the_reference_slow(name, seed):
    check_emulation(name, 12, 6, seed)


@pytest.mark.slow
@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc/ptxas cannot run here: {NO_NVCC}")
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_gpu_states_compile_to_ptx_slow(name, seed):
    check_ptx(name, 12, 6, seed)


def main(argv: list) -> None:
    """Print the per-DAG counts of a sweep (``n_init n_mut seed``, default the fast tier's)."""
    n_init, n_mut, seed = (int(a) for a in (argv + [str(x) for x in FAST][len(argv):])[:3])
    keys = ("sampled", "built", "ptx_ok", "emulated_ok", "refused_cross_thread", "other_failures")
    print(f"{'dag':18s} " + " ".join(f"{k:>20s}" for k in keys) + "   seconds")
    for name in sorted(DAGS):
        start = time.perf_counter()
        s = sweep(name, n_init, n_mut, seed)
        inputs = inputs_of(s.dag, seed)
        expected = reference.evaluate(s.dag, inputs)
        c = Counter(s.counts)
        for x in s.samples:
            if x.module is None:
                if not x.refused:
                    print("  BUILD", _describe(name, x, x.error[:400]))
                continue
            p = emulate_sample(s.dag, x, inputs, expected)
            c["emulated_ok" if not p else "other_failures"] += 1
            if p:
                print("  EMULATE", _describe(name, x, p[:400]))
            if NO_NVCC is None:
                p = ptx_sample(x)
                c["ptx_ok" if not p else "other_failures"] += 1
                if p:
                    print("  PTX", _describe(name, x, p[:400]))
        print(f"{name:18s} " + " ".join(f"{c[k]:>20d}" for k in keys)
              + f"   {time.perf_counter() - start:.1f}")
    if NO_NVCC is not None:
        print(f"(PTX not checked: {NO_NVCC})")


if __name__ == "__main__":
    main(sys.argv[1:])
