"""GPU (cuda) sketches, init population and mutations, Ansor's style: the expected sketches
are listed in each docstring (after TVM's test_auto_scheduler_sketch_generation.py, the
``test_cuda_*`` cases).  Nothing here lowers or builds a GPU program: the states are
checked as schedules (loop structure, bindings, extents)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cost_model import RandomModel
from scheduler_core import te
from scheduler_core.base.target import HardwareParams
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.schedule.dataflow_step import CacheReadStep
from scheduler_core.schedule.transform_step import PragmaStep, SplitStep
from scheduler_core.search.search_policy import SketchPolicy
from scheduler_core.search.search_task import SearchTask
from sketch_rules import (
    GPU_MUTATION_RULES,
    InitThreadBind,
    MutateAutoUnroll,
    MutateTileSize,
    RuleAddCacheRead,
    apply_init_rules,
    apply_mutation,
    default_init_rules,
    default_mutation_rules,
    default_sketch_rules,
    generate_sketches,
    gpu_limits,
    sample_init_population,
)
from sketch_rules.gpu_params import SM80_DEFAULTS, thread_extents
from sketch_rules.gpu_sketch_rules import has_cross_thread_reduction
from sketch_rules.init_population import AUTO_UNROLL_CONFIGS_GPU, InitFillTileSize
from sketch_rules.params import SketchPolicyParams
from sketch_rules.state_queries import is_tiled, needs_multi_level_tiling
from sketch_rules.step_history import has_cache_write_stage, replay_or_none
from tests import workloads as W
from tests.sketch_rules.stub_policy import StubPolicy, make_policy

MLT_GPU_NAMES_2D = ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2", "k.0", "k.1", "i.3", "j.3", "k.2",
                    "i.4", "j.4"]


# -- workloads TVM's cuda tests use that tests.workloads lacks -------------------------
def min_nm(n, m):
    """``B[i] = min_k A[i, k]`` (TVM's min_nm_auto_scheduler_test)."""
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), name="k")
    return [A, te.compute((n,), lambda i: te.min(A[i, k], axis=k), name="B")]


def max_pool2d(n, c, h, w):
    """2x2 max pooling, stride 1, no padding stage (TVM's max_pool2d test with padding 0)."""
    data = te.placeholder((n, c, h, w), "float32", name="data")
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    out = te.compute((n, c, h - 1, w - 1),
                     lambda b, f, y, x: te.max(data[b, f, y + ry, x + rx], axis=[ry, rx]),
                     name="pool")
    return [data, out]


def zero_rank_reduce(n):
    """``B[] = sum_k A[k]`` (TVM's zero_rank_reduce_auto_scheduler_test)."""
    A = te.placeholder((n,), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    return [A, te.compute((), lambda: te.sum(A[k], axis=k), name="B")]


@dataclass(frozen=True)
class CudaHardwareParams(HardwareParams):
    """HardwareParams with TVM's GPU fields (ours may lack them: sketch_rules.gpu_params)."""

    max_threads_per_block: int = 1024
    warp_size: int = 32
    max_shared_memory_per_block: int = 48 * 1024
    max_local_memory_per_block: int = 2 ** 31 - 1
    max_vthread_extent: int = 8


def cuda_policy(tensors, hardware_params=None, seed=0, **params) -> StubPolicy:
    """A StubPolicy whose task is a real cuda SearchTask."""
    task = SearchTask(compute_dag=ComputeDAG(tensors), target="cuda", hardware_params=hardware_params)
    return StubPolicy(task, SketchPolicyParams(**params), np.random.default_rng(seed))


def sketches_of(tensors, **kw):
    return generate_sketches(cuda_policy(tensors, **kw))


def names(stage) -> list:
    return [it.name for it in stage.iters]


def stage_names(state) -> list:
    return [st.name for st in state.stages]


def at(state, stage_id):
    """``(compute_at, target stage name, target loop name)`` of a stage."""
    st = state.stages[stage_id]
    if st.compute_at != "iter":
        return (st.compute_at, None, None)
    return ("iter", state.stages[st.attach[0]].name, st.attach[1])


def thread_reduce_loops(stage) -> list:
    return [it for it in stage.iters if it.kind == "reduce" and it.annotation == "threadIdx.x"]


# -- rule sets ------------------------------------------------------------------------
def test_gpu_rule_sets_follow_tvm():
    """A cuda task gets TVM's CUDA sketch rules in TVM's order, the GPU init rules and
    the GPU mutation weights; a CPU task (or no policy) keeps the CPU sets."""
    gpu, cpu = cuda_policy(W.matmul(64, 64, 64)), make_policy(W.matmul(64, 64, 64))
    assert [type(r).__name__ for r in default_sketch_rules(gpu)] == [
        "RuleAddCacheRead", "RuleSpecialComputeLocationGPU", "RuleAlwaysInline",
        "RuleSimplifyComputeWithConstTensor", "RuleCrossThreadReduction", "RuleAddCacheWrite",
        "RuleMultiLevelTilingWithFusion", "RuleMultiLevelTiling", "RuleSkipStage"]
    assert [type(r).__name__ for r in default_sketch_rules(cpu)] == [
        type(r).__name__ for r in default_sketch_rules()]
    assert "RuleAddRfactor" in [type(r).__name__ for r in default_sketch_rules(cpu)]
    assert [type(r).__name__ for r in default_init_rules(gpu)] == [
        "InitFillTileSize", "InitThreadBind", "InitUnroll"]
    assert "InitVectorization" in [type(r).__name__ for r in default_init_rules(cpu)]
    assert [(type(r).__name__, r.weight) for r in default_mutation_rules(gpu)] == [
        ("MutateTileSize", 0.90), ("MutateAutoUnroll", 0.10)]
    assert default_mutation_rules(gpu) is GPU_MUTATION_RULES
    assert len(default_mutation_rules(cpu)) == 4


def test_gpu_limits_default_to_sm80_and_read_hardware_params():
    """Our HardwareParams has no GPU fields: TVM's sm_80 values; fields that exist win."""
    lim = gpu_limits(cuda_policy(W.matmul(8, 8, 8)).task)
    assert (lim.max_threads_per_block, lim.warp_size, lim.max_shared_memory_per_block,
            lim.max_vthread_extent) == (1024, 32, 48 * 1024, 8)
    assert SM80_DEFAULTS["max_threads_per_block"] == 1024
    hw = CudaHardwareParams(max_threads_per_block=256, warp_size=16)
    lim = gpu_limits(cuda_policy(W.matmul(8, 8, 8), hardware_params=hw).task)
    assert (lim.max_threads_per_block, lim.warp_size) == (256, 16)


def test_search_policy_uses_the_gpu_sketch_rules():
    """SketchPolicy on a cuda SearchTask derives the GPU sketches (no sketch_rules given)."""
    task = SearchTask(compute_dag=ComputeDAG(W.matmul(512, 512, 512)), target="cuda")
    policy = SketchPolicy(task, RandomModel(0), verbose=0)
    sk = generate_sketches(policy, policy.sketch_rules)
    assert len(sk) == 1 and "A.shared" in stage_names(sk[0])


# -- sketches -------------------------------------------------------------------------
def test_cuda_matmul_sketch():
    """matmul 512x512x512 on cuda gives 1 sketch (TVM: test_cuda_matmul_sketch):
        A(0) A.shared(1, at matmul.local k.0) B(2) B.shared(3, at matmul.local k.0)
        matmul.local(4): cache_write, tiled "SSSRRSRS", at matmul(5) loop j.2
        matmul(5): follows the spatial splits to level 3 (i.0 j.0 i.1 j.1 i.2 j.2 i.3 j.3)
    """
    sk = sketches_of(W.matmul(512, 512, 512))
    assert len(sk) == 1
    s = sk[0]
    assert stage_names(s) == ["A", "A.shared", "B", "B.shared", "matmul.local", "matmul"]
    assert has_cache_write_stage(s, 4)
    assert [type(x) for x in s.transform_steps].count(CacheReadStep) == 2
    assert names(s.stages[4]) == MLT_GPU_NAMES_2D
    assert names(s.stages[5]) == ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2", "i.3", "j.3"]
    assert at(s, 4) == ("iter", "matmul", "j.2")
    assert at(s, 1) == at(s, 3) == ("iter", "matmul.local", "k.0")
    assert at(s, 5) == ("root", None, None)
    assert all(it.annotation == "none" for st in s.stages for it in st.iters)


def test_cuda_matmul_without_cache_read_sketch():
    """The GPU rules without RuleAddCacheRead: the same tiling with no shared stages,
        A(0) B(1) matmul.local(2, tiled "SSSRRSRS", at matmul j.2) matmul(3, level 3)."""
    policy = cuda_policy(W.matmul(512, 512, 512))
    rules = [r for r in default_sketch_rules(policy) if not isinstance(r, RuleAddCacheRead)]
    sk = generate_sketches(policy, rules)
    assert len(sk) == 1
    s = sk[0]
    assert stage_names(s) == ["A", "B", "matmul.local", "matmul"]
    assert names(s.stages[2]) == MLT_GPU_NAMES_2D
    assert at(s, 2) == ("iter", "matmul", "j.2")


def test_cuda_small_matmul_cross_thread_reduction_sketch():
    """matmul 8x8x1024 (spatial 64 < reduction 1024) gives 2 sketches (TVM):
        No.0: cross-thread reduction: k split by the warp (32), k.1 bound to threadIdx.x,
              no cache stage (RuleAddCacheRead skips a cross-thread-reduction consumer)
        No.1: the tiled sketch with the shared cache reads and the local cache write
    """
    sk = sketches_of(W.matmul(8, 8, 1024))
    assert len(sk) == 2
    s0, s1 = sk
    assert stage_names(s0) == ["A", "B", "matmul"]
    assert has_cross_thread_reduction(s0, 2)
    (red,) = thread_reduce_loops(s0.stages[2])
    assert red.const_extent == 32 and names(s0.stages[2]) == ["i", "j", "k.0", "k.1"]
    assert stage_names(s1) == ["A", "A.shared", "B", "B.shared", "matmul.local", "matmul"]
    assert not has_cross_thread_reduction(s1, 4) and is_tiled(s1.stages[4])


def test_cuda_conv2d_bias_relu_sketch():
    """conv2d NCHW + bias + ReLU gives 1 sketch (TVM: test_cuda_conv2d_bn_relu_sketch):
        data(0) pad(1, inlined: on a GPU every element-wise non-output stage is)
        pad.shared(2, at conv2d rx.0) kernel(3) kernel.shared(4, at conv2d rx.0)
        conv2d(5): tiled "SSSRRSRS" (4 x 5 spatial + 3 x 3 reduce = 29 loops), at
                   bias_relu x.2 (fusion level 3)
        bias(6) bias_relu(7): follows conv2d's spatial splits (16 loops)
    """
    sk = sketches_of(W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3))
    assert len(sk) == 1
    s = sk[0]
    assert stage_names(s) == ["data", "pad", "pad.shared", "kernel", "kernel.shared", "conv2d",
                              "bias", "bias_relu"]
    assert at(s, 1)[0] == "inlined"
    assert at(s, 2) == at(s, 4) == ("iter", "conv2d", "rx.0")
    assert len(s.stages[5].iters) == 29 and is_tiled(s.stages[5])
    assert names(s.stages[5])[12:15] == ["rc.0", "ry.0", "rx.0"]
    assert at(s, 5) == ("iter", "bias_relu", "x.2")
    assert len(s.stages[7].iters) == 16 and is_tiled(s.stages[7])


def test_cuda_softmax_sketch():
    """softmax 2x1024 gives (1 cross-thread reduction + 1 default for row_sum) x
    (1 + 1 for row_max) = 4 sketches, in TVM's order; 'exp' is inlined in all:
        No.0: both reductions cross-thread, computed at softmax loop i; softmax's j split
              by the warp with j.1 bound to threadIdx.x (the reductions follow that split)
        No.1: row_sum only;  No.2: row_max only (at root, own warp split);  No.3: none
    """
    sk = sketches_of(W.softmax(2, 1024))
    assert len(sk) == 4
    flags = [(has_cross_thread_reduction(s, 1), has_cross_thread_reduction(s, 3)) for s in sk]
    assert flags == [(True, True), (False, True), (True, False), (False, False)]
    for s in sk:
        assert stage_names(s) == ["A", "row_max", "exp", "row_sum", "softmax"]
        assert at(s, 2)[0] == "inlined"
    assert at(sk[0], 1) == at(sk[0], 3) == ("iter", "softmax", "i")
    assert names(sk[0].stages[4]) == ["i", "j.0", "j.1"]
    assert sk[0].stages[4].iters[2].annotation == "threadIdx.x"
    assert at(sk[2], 1) == ("root", None, None)
    assert [r.to_record() for r in sk[3].transform_steps] == [["CI", 2]]


def test_cuda_min_sketch():
    """min over 10x1024 gives 2 sketches (TVM: test_cuda_min_sketch): cross-thread
    reduction (k split by 32, k.1 on threadIdx.x), then the default (no steps)."""
    sk = sketches_of(min_nm(10, 1024))
    assert len(sk) == 2
    assert has_cross_thread_reduction(sk[0], 1) and names(sk[0].stages[1]) == ["i", "k.0", "k.1"]
    assert sk[1].transform_steps == ()


def test_cuda_max_pool2d_sketch():
    """2x2 max pooling gives 1 sketch with no steps (TVM: test_cuda_max_pool2d_sketch):
    a reduction of 4 is not longer than a warp, and nothing needs tiling."""
    sk = sketches_of(max_pool2d(1, 512, 56, 56))
    assert len(sk) == 1 and sk[0].transform_steps == ()


def test_cuda_zero_rank_sketch():
    """A zero-rank sum of 128 gives 2 sketches (TVM: test_cuda_zero_rank_sketch):
    cross-thread reduction (k.1 of 32 threads), then the default."""
    sk = sketches_of(zero_rank_reduce(128))
    assert len(sk) == 2
    assert names(sk[0].stages[1]) == ["k.0", "k.1"] and has_cross_thread_reduction(sk[0], 1)
    assert sk[1].transform_steps == ()


def test_cpu_sketches_are_unchanged():
    """The same DAGs on llvm keep the CPU sketch counts (matmul 3, softmax 9, conv2d 3)."""
    assert len(generate_sketches(make_policy(W.matmul(512, 512, 512)))) == 3
    assert len(generate_sketches(make_policy(W.softmax(1, 1024)))) == 9
    assert len(generate_sketches(make_policy(W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3)))) == 3


# -- init population --------------------------------------------------------------------
GPU_WORKLOADS = {
    "matmul": lambda: W.matmul(512, 512, 512),
    "small_matmul": lambda: W.matmul(8, 8, 1024),
    "conv2d": lambda: W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3),
    "softmax": lambda: W.softmax(2, 1024),
    "min": lambda: min_nm(10, 1024),
    "max_pool": lambda: max_pool2d(1, 512, 56, 56),
    "zero_rank": lambda: zero_rank_reduce(128),
}


def _population(make, n=12, seed=0, hardware_params=None):
    policy = cuda_policy(make(), hardware_params=hardware_params)
    sketches = generate_sketches(policy)
    pop = sample_init_population(policy, sketches, n, np.random.default_rng(seed),
                                 check_lowering=False)
    return policy, pop


def _check_bound(policy, state, sampled=True):
    """Every kernel is bound: see test_init_population_binds_every_kernel.  Mutants
    (``sampled=False``) may have any thread count up to the limit, as in Ansor."""
    lim = gpu_limits(policy.task)
    for sid, st in enumerate(state.stages):
        if st.op_type != "compute" or st.compute_at == "inlined":
            continue
        threads, vthreads = thread_extents(st)
        assert threads <= lim.max_threads_per_block and vthreads <= lim.max_vthread_extent
        anns = [it.annotation for it in st.iters]
        spatial = [it for it in st.iters if it.kind == "spatial"]
        if st.compute_at == "root":
            if spatial:
                assert anns[0] in ("blockIdx.x", "threadIdx.x"), (st.name, anns)
            else:  # zero-rank: no spatial loop to bind (see sketch_rules.init_population)
                assert "blockIdx.x" not in anns
            if any(a.startswith("thread") for a in anns):
                assert "threadIdx.x" in anns
            else:
                assert not spatial, (st.name, anns)
        tx = [it for it in st.iters if it.annotation == "threadIdx.x"]
        if st.compute_at == "root" and needs_multi_level_tiling(state, sid) is False and any(
                needs_multi_level_tiling(state, k) for k in state.attached_to(sid)):
            # the output a tiled stage is fused into: blockIdx, vthread, threadIdx tiles
            assert anns[:3] == ["blockIdx.x", "vthread", "threadIdx.x"]
            assert tx[0].const_extent >= lim.warp_size or not sampled
        elif st.name.endswith(".shared"):
            root = state.stages[state.stages[st.attach[0]].attach[0]]
            root_tx = [it for it in root.iters if it.annotation == "threadIdx.x"][0]
            assert [it.annotation for it in st.iters[-2:]] == ["threadIdx.x", "vectorize"]
            assert tx[0].const_extent == root_tx.const_extent
        elif not sampled:
            continue
        elif tx and tx[0].kind == "reduce":
            assert tx[0].const_extent == lim.warp_size  # the cross-thread reduction's warp
        elif st.compute_at == "root" and tx and "blockIdx.x" in anns:
            assert tx[0].const_extent % lim.warp_size == 0  # split by the warp size
        elif st.compute_at == "root" and tx:
            assert tx[0].const_extent <= lim.warp_size  # all of it fits in a warp


@pytest.mark.parametrize("name", sorted(GPU_WORKLOADS))
def test_init_population_binds_every_kernel(name):
    """Sampled states (InitFillTileSize, InitThreadBind, InitUnroll) have:
    * every root stage's outer loop bound to blockIdx.x or threadIdx.x (a zero-rank stage
      has no spatial loop to bind), threadIdx extents <= max_threads_per_block and
      vthread extents <= max_vthread_extent;
    * the tiled output: blockIdx.x, vthread, threadIdx.x (at least a warp) outermost;
    * shared stages: cooperative fetching with the kernel's thread count, vectorized inner;
    * untiled stages: a warp (or all of a shorter loop) of threads;
    * auto_unroll_max_step from TVM's GPU values; no parallel loop anywhere."""
    policy, pop = _population(GPU_WORKLOADS[name])
    assert pop
    for state in pop:
        assert all(it.annotation != "parallel" for st in state.stages for it in st.iters)
        _check_bound(policy, state)
        for step in state.transform_steps:
            if isinstance(step, PragmaStep):
                assert int(step.pragma_type.split("$")[1]) in AUTO_UNROLL_CONFIGS_GPU


def test_init_population_respects_a_smaller_thread_limit():
    """With max_threads_per_block=128 from HardwareParams no kernel binds more threads."""
    hw = CudaHardwareParams(max_threads_per_block=128)
    policy, pop = _population(GPU_WORKLOADS["matmul"], n=16, hardware_params=hw)
    assert pop
    for state in pop:
        _check_bound(policy, state)
        assert max(thread_extents(st)[0] for st in state.stages) <= 128


def _filled(sketch, lengths):
    """``sketch`` with its unknown splits given ``lengths`` in step order, replayed."""
    it = iter(lengths)
    steps = [SplitStep(s.stage_id, s.iter_id, s.extent, next(it), s.inner_to_outer)
             if isinstance(s, SplitStep) and s.lengths[0] is None else s
             for s in sketch.transform_steps]
    return replay_or_none(sketch, steps)


def test_thread_bind_of_a_fixed_matmul():
    """matmul 512 with tiles i = (4, 2, 16, 2, 2), j = (8, 1, 8, 4, 2), k = (64, 4, 2):
    matmul: i.0@j.0 (32) blockIdx.x, i.1@j.1 (2) vthread, i.2@j.2 (128) threadIdx.x;
    each shared stage: fused, split by 1 (vectorize), split by the 128 threads."""
    policy = cuda_policy(W.matmul(512, 512, 512))
    (sketch,) = generate_sketches(policy)
    state = _filled(sketch, [(2, 16, 2, 2), (1, 8, 4, 2), (4, 2)])
    state = InitThreadBind().apply(policy, state, np.random.default_rng(0))
    out = state.stages[5]
    bound = [(it.const_extent, it.annotation) for it in out.iters if it.annotation != "none"]
    assert bound == [(32, "blockIdx.x"), (2, "vthread"), (128, "threadIdx.x")]
    for sid in (1, 3):
        sh = state.stages[sid]
        assert [it.annotation for it in sh.iters] == ["none", "threadIdx.x", "vectorize"]
        assert [it.const_extent for it in sh.iters][1:] == [128, 1]


def test_thread_bind_drops_states_with_fewer_threads_than_a_warp():
    """A tiled output whose level-2 tiles give fewer than 32 threads is invalid (Ansor);
    so is one with more than 8 virtual threads."""
    policy = cuda_policy(W.matmul(512, 512, 512))
    (sketch,) = generate_sketches(policy)
    rng = np.random.default_rng(0)
    few_threads = _filled(sketch, [(2, 4, 2, 2), (1, 4, 4, 2), (4, 2)])  # 16 threads
    assert InitThreadBind().apply(policy, few_threads, rng) is None
    many_vthreads = _filled(sketch, [(4, 16, 2, 2), (4, 8, 4, 2), (4, 2)])  # 16 vthreads
    assert InitThreadBind().apply(policy, many_vthreads, rng) is None


# -- mutation -------------------------------------------------------------------------
def test_gpu_mutations_keep_the_limits():
    """GPU mutants (tile size .90, auto unroll .10) stay within the thread limits, and
    auto-unroll mutations draw TVM's GPU values."""
    policy, pop = _population(GPU_WORKLOADS["matmul"], n=10)
    rng = np.random.default_rng(5)
    n_ok = 0
    for k in range(60):
        new = apply_mutation(policy, pop[k % len(pop)], rng)
        if new is None:
            continue
        n_ok += 1
        _check_bound(policy, new, sampled=False)
    assert n_ok > 10
    values = set()
    for k in range(40):
        new = MutateAutoUnroll().apply(policy, pop[k % len(pop)], rng)
        values |= {int(s.pragma_type.split("$")[1]) for s in new.transform_steps
                   if isinstance(s, PragmaStep)}
    assert values <= set(AUTO_UNROLL_CONFIGS_GPU) and 1024 in values
    hw = CudaHardwareParams(max_threads_per_block=64)
    small = cuda_policy(W.matmul(512, 512, 512), hardware_params=hw)
    for k in range(40):
        new = MutateTileSize().apply(small, pop[k % len(pop)], rng)
        assert new is None or max(thread_extents(st)[0] for st in new.stages) <= 64


def test_apply_init_rules_defaults_to_the_target_rules():
    """apply_init_rules with no rules binds a GPU sketch (and never vectorizes a store
    other than cooperative fetching)."""
    policy = cuda_policy(W.matmul_bias_relu(256, 256, 256))
    sketch = generate_sketches(policy)[0]
    rng = np.random.default_rng(1)
    for _ in range(10):
        state = apply_init_rules(policy, sketch, rng)
        if state is None:
            continue
        _check_bound(policy, state)
        for st in state.stages:
            if any(it.annotation == "vectorize" for it in st.iters):
                assert st.name.endswith(".shared")
    assert InitFillTileSize().apply(policy, sketch, rng) is not None


def test_cuda_conv2d_winograd_sketch():
    """TVM's test_cuda_conv2d_winograd_sketch (NHWC 1x28x28x128 -> 128, 3x3, F(4x4, 3x3)): one
    sketch.  RuleSimplifyComputeWithConstTensor tiles data_pack and inverse and unrolls their
    transform loops; RuleSpecialComputeLocationGPU computes input_tile at data_pack's last
    loop before the unrolled ones; bgemm is multi-level tiled with shared-memory fetches of
    both operands and a local cache-write stage."""
    from sketch_rules.state_queries import is_tiled
    from tests import workloads as W
    from tests.sketch_rules.test_const_tensor_rule import TVM_SIZES

    (s,) = sketches_of(W.conv2d_winograd_nhwc(**TVM_SIZES))
    st = s.stages
    assert [x.name for x in st] == ["data", "data_pad", "input_tile", "B", "data_pack", "data_pack.shared",
                                    "kernel_pack", "kernel_pack.shared", "bgemm.local", "bgemm", "A",
                                    "inverse", "conv2d_winograd"]
    assert [st[i].compute_at for i in (1, 2, 3, 5, 7, 8, 9, 10)] == [
        "inlined", "iter", "inlined", "iter", "iter", "iter", "root", "inlined"]
    assert st[2].attach == (4, "ci.1")  # right outside eps/u
    assert is_tiled(st[4]) and is_tiled(st[8]) and is_tiled(st[11]) and not is_tiled(st[12])
    assert [it.annotation for it in st[4].iters[-4:]] == ["unroll"] * 4


def test_cuda_double_matmul_never_fuses_into_its_own_shared_fetch():
    """E = (A @ B) @ C: D's one consumer is D.shared (E's fetch of it), which TVM's
    HasSingleElementwiseMatchedConsumer refuses, so D gets a local cache-write stage of its
    own (11 stages, as TVM), not a fusion into the fetch."""
    n = 512
    A, B, C = (te.placeholder((n, n), name=x) for x in "ABC")
    k = te.reduce_axis((0, n), name="k")
    D = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="D")
    k2 = te.reduce_axis((0, n), name="k2")
    E = te.compute((n, n), lambda i, j: te.sum(D[i, k2] * C[k2, j], axis=[k2]), name="E")
    (s,) = sketches_of([A, B, C, D, E])
    assert [(x.name, x.compute_at) for x in s.stages] == [
        ("A", "root"), ("A.shared", "iter"), ("B", "root"), ("B.shared", "iter"), ("D.local", "iter"),
        ("D", "root"), ("D.shared", "iter"), ("C", "root"), ("C.shared", "iter"), ("E.local", "iter"),
        ("E", "root")]


def test_special_compute_location_needs_a_stage_a_gpu_would_inline():
    """TVM's ShouldAlwaysBeInlined condition: with inverse unrolled by the constant-tensor
    rule, its producer bgemm (a reduction) is not moved into inverse's loops by
    RuleSpecialComputeLocationGPU; bgemm's write-back stage after a cache write (no reduction
    loop, not an output) would be."""
    from sketch_rules import RuleSimplifyComputeWithConstTensor, RuleSpecialComputeLocationGPU
    from sketch_rules.sketch_rule import ConditionKind
    from tests import workloads as W
    from tests.sketch_rules.test_const_tensor_rule import SMALL

    policy = cuda_policy(W.conv2d_winograd_nhwc(**SMALL))
    state = policy.task.compute_dag.init_state
    by_name = {x.name: i for i, x in enumerate(state.stages)}
    ((state, _),) = RuleSimplifyComputeWithConstTensor().apply(policy, state, by_name["inverse"])
    assert state.stages[by_name["inverse"]].iters[-1].annotation == "unroll"
    rule = RuleSpecialComputeLocationGPU()
    assert rule.meet_condition(policy, state, by_name["bgemm"]) == ConditionKind.SKIP
    (sketch,) = generate_sketches(policy)
    write_back = [x.name for x in sketch.stages].index("bgemm")
    assert rule.meet_condition(policy, sketch, write_back) == ConditionKind.APPLY_AND_SKIP_REST
