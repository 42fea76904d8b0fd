"""Program features (cost_model.feature): names, shapes, values that follow the schedule,
determinism, caching, and a speed report (printed, never asserted)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from cost_model import feature as F
from cost_model.feature import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    FeatureCache,
    get_per_store_features,
    get_per_store_features_from_states,
)
from cost_model.index_form import affine_form, contiguous_elements, touched_elements
from scheduler_core import ComputeDAG, replay_steps
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag.task import Task
from scheduler_core.ir.expr import Var
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, FuseStep, PragmaStep, ReorderStep, SplitStep
from tests.workloads import matmul_add

N = 256


def _col(name: str) -> int:
    return FEATURE_NAMES.index(name)


def _log2p(x: float) -> float:
    return math.log2(x + 1)


def _tiled(dag, n):
    """matmul+bias: i, j, k tiled; (i.0, j.0) fused and parallel, j.2 (16) vectorized, unroll pragma."""
    s = State.from_dag(dag)
    s = SplitStep(2, 0, n, (8, 8), True).apply(s)
    s = SplitStep(2, 3, n, (8, 16), True).apply(s)
    s = SplitStep(2, 6, n, (4,), True).apply(s)
    s = ReorderStep(2, (0, 3, 1, 4, 6, 2, 7, 5)).apply(s)
    s = FuseStep(2, (0, 1)).apply(s)
    s = AnnotationStep(2, 0, "parallel").apply(s)
    s = AnnotationStep(2, 6, "vectorize").apply(s)
    return PragmaStep(2, 0, "auto_unroll_max_step$16").apply(s)


@pytest.fixture(scope="module")
def dag():
    return ComputeDAG(matmul_add(N, N, N))


def test_names_version_and_shape(dag):
    """177 unique names: TVM's 164 in its order (57 + 5 x 18 + 10 + 4 + 3), then 13 more
    (test_extra_features.py); one row per stored buffer."""
    assert N_FEATURES == len(FEATURE_NAMES) == 177
    assert len(set(FEATURE_NAMES)) == N_FEATURES
    assert FEATURE_NAMES[:3] == ("float_mad", "float_addsub", "float_mul")
    assert FEATURE_NAMES[57] == "B0.acc_type.kRead" and FEATURE_NAMES[163] == "auto_unroll_max_step"
    assert isinstance(FEATURE_VERSION, str) and FEATURE_VERSION
    f = get_per_store_features(None, State.from_dag(dag), cache=None)
    assert f.shape == (2, N_FEATURES) and f.dtype == np.float32  # matmul, out
    assert np.isfinite(f).all()


def test_naive_matmul_values(dag):
    """The naive i, j, k loop: n^3 multiplies, B read with stride n in the innermost loop."""
    f = get_per_store_features(None, State.from_dag(dag), cache=None)[0]
    assert f[_col("float_mul")] == pytest.approx(_log2p(N ** 3))
    assert f[_col("outer_prod")] == pytest.approx(_log2p(N ** 3))
    assert f[_col("num_loops")] == pytest.approx(_log2p(3))
    assert f[_col("vec_len")] == 0 and f[_col("vec_type.kPosNone")] == 1
    assert f[_col("parallel_len")] == 0 and f[_col("parallel_type.kPosNone")] == 1
    # The buffer with the most cache lines is B (a new line every iteration).
    assert f[_col("B0.acc_type.kRead")] == 1
    assert f[_col("B0.stride")] == pytest.approx(_log2p(N))
    assert f[_col("B0.lines")] == pytest.approx(_log2p(N ** 3))
    assert f[_col("B0.unique_bytes")] == pytest.approx(_log2p(N * N * 4))
    # The accumulator is read and written, reused across the k loop (N times).
    rw = [b for b in range(5) if f[_col(f"B{b}.acc_type.kReadWrite")] == 1]
    assert len(rw) == 1
    assert f[_col(f"B{rw[0]}.reuse_type.kLoopMultipleRead")] == 1
    assert f[_col(f"B{rw[0]}.reuse_ct")] == pytest.approx(_log2p(N))
    assert f[_col("alloc_size")] == pytest.approx(_log2p(N * N * 4))  # matmul's scratch buffer


def test_tiled_state_differs_sensibly(dag):
    """Vectorize/parallel/unroll features appear; the work stays the same."""
    naive = get_per_store_features(None, State.from_dag(dag), cache=None)
    tiled = get_per_store_features(None, _tiled(dag, N), cache=None)
    a, b = naive[0], tiled[0]
    assert b[_col("vec_num")] == 1 and b[_col("vec_len")] == pytest.approx(_log2p(16))
    assert b[_col("vec_type.kPosInnerSpatial")] == 1
    assert b[_col("parallel_num")] == 1
    assert b[_col("parallel_len")] == pytest.approx(_log2p(N // 64 * N // 128))
    assert b[_col("parallel_type.kPosMixed")] == 1  # (i.0, j.0) fused
    assert b[_col("auto_unroll_max_step")] == pytest.approx(_log2p(16))
    assert b[_col("num_loops")] > a[_col("num_loops")]
    for same in ("float_mul", "float_addsub", "outer_prod", "B0.unique_bytes"):
        assert b[_col(same)] == pytest.approx(a[_col(same)])
    # Tiling raises arithmetic intensity near the innermost loops and cuts B's cache lines.
    assert b[_col("arith_intensity_curve_0")] > a[_col("arith_intensity_curve_0")]
    assert b[_col("B0.lines")] < a[_col("B0.lines")]
    # The bias stage is untouched.
    np.testing.assert_array_equal(naive[1], tiled[1])


def test_gpu_binding_lengths(dag):
    """On a CPU is_gpu is 0 and every axis has length 1 (TVM's extractor starts the lengths at
    1: log2(1 + 1) = 1); the bound extents once loops are bound to blockIdx.x / threadIdx.x."""
    cpu = get_per_store_features(None, State.from_dag(dag), cache=None)[0]
    assert cpu[_col("is_gpu")] == 0
    assert all(cpu[_col(n)] == 1 for n in ("blockIdx_x_len", "threadIdx_x_len", "vthread_len"))
    s = SplitStep(2, 0, N, (32,), True).apply(State.from_dag(dag))
    s = AnnotationStep(2, 0, "blockIdx.x").apply(s)
    s = AnnotationStep(2, 1, "threadIdx.x").apply(s)
    gpu = get_per_store_features(None, s, cache=None)[0]
    assert gpu[_col("is_gpu")] == 1
    assert gpu[_col("blockIdx_x_len")] == pytest.approx(_log2p(N // 32))
    assert gpu[_col("threadIdx_x_len")] == pytest.approx(_log2p(32))
    assert gpu[_col("blockIdx_y_len")] == 1  # unbound: length 1, as TVM


def test_deterministic_and_replayable(dag):
    s = _tiled(dag, N)
    a = get_per_store_features(None, s, cache=None)
    b = get_per_store_features(None, s, cache=None)
    c = get_per_store_features(None, replay_steps(dag, [st.to_record() for st in s.transform_steps]),
                               cache=None)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_cache_by_steps(dag):
    cache = FeatureCache(capacity=2)
    T = Task.create(dag, "llvm")
    s = _tiled(dag, N)
    first = get_per_store_features(T, s, cache)
    again = get_per_store_features(T, replay_steps(dag, s.transform_steps), cache)
    assert again is first and cache.hits == 1
    assert not first.flags.writeable
    batch = get_per_store_features_from_states(T, [State.from_dag(dag), s], cache)
    assert batch[1] is first and cache.hits == 2


def test_state_that_fails_to_lower_gives_zero_row(dag, monkeypatch):
    def boom(*a, **k):
        raise LoweringError("no")

    monkeypatch.setattr(F, "lower_state", boom)
    f = get_per_store_features(None, State.from_dag(dag), cache=None)
    assert f.shape == (1, N_FEATURES) and not f.any() and F.is_invalid(f)


def test_touched_elements_of_flat_indices():
    """Row-major tiles, fused div/mod pairs and convolution windows are counted exactly."""
    i, k, f, y, r = (Var(n) for n in "ikfyr")
    depth = {i: 0, k: 1}
    form = affine_form(i * 512 + k, depth)  # 8 x 4 tile of a 512-wide matrix
    assert touched_elements([form], 0, [8, 4]) == 32
    assert touched_elements([form], 1, [8, 4]) == 4
    assert contiguous_elements([form], 0, [8, 4]) == 4
    fused = affine_form((f // 4) * 4096 + (f % 4) * 16, {f: 0})
    assert touched_elements([fused], 0, [32]) == 32
    conv = affine_form((y + r) * 64, {y: 0, r: 1})  # a 3-tap window over 8 rows
    assert touched_elements([conv], 0, [8, 3]) == 10


def test_speed_report(dag, record_property):
    """Features of 40 tiled matmul+bias 1024^3 states: lowering and extraction, ms per state."""
    big = ComputeDAG(matmul_add(1024, 1024, 1024))
    rng = np.random.default_rng(0)
    states = []
    for _ in range(40):
        fi, fj = (int(x) for x in rng.choice([2, 4, 8, 16, 32], 2))
        s = SplitStep(2, 0, 1024, (fi, 8), True).apply(State.from_dag(big))
        s = SplitStep(2, 3, 1024, (fj, 16), True).apply(s)
        s = SplitStep(2, 6, 1024, (4,), True).apply(s)
        s = ReorderStep(2, (0, 3, 1, 4, 6, 2, 7, 5)).apply(s)
        s = AnnotationStep(2, 7, "vectorize").apply(s)
        states.append(AnnotationStep(2, 0, "parallel").apply(s))
    # Wall time, and this process's CPU time (what the figure would be on an idle machine).
    w0, c0 = time.perf_counter(), time.process_time()
    funcs = [F.lower_state(s) for s in states]
    w1, c1 = time.perf_counter(), time.process_time()
    feats = [F.features_from_primfunc(fn) for fn in funcs]
    w2, c2 = time.perf_counter(), time.process_time()
    ms = {"lower_wall": w1 - w0, "extract_wall": w2 - w1, "lower_cpu": c1 - c0, "extract_cpu": c2 - c1}
    ms = {k: v / len(states) * 1e3 for k, v in ms.items()}
    for k, v in ms.items():
        record_property(f"{k}_ms_per_state", v)
    print(f"\nfeatures of matmul+bias 1024^3, ms per state: lower {ms['lower_wall']:.2f} + extract "
          f"{ms['extract_wall']:.2f} wall; lower {ms['lower_cpu']:.2f} + extract {ms['extract_cpu']:.2f} CPU")
    assert all(f.shape == (2, N_FEATURES) for f in feats)


@pytest.mark.parametrize("name,args", [
    ("conv2d_nchw", (1, 4, 10, 10, 4, 3, 3)), ("softmax", (16, 32)), ("layer_norm", (16, 32)),
    ("rgb_to_yuv", (16, 8)), ("cumsum_scan", (8, 16)), ("two_state_scan", (8, 16, 4)),
    ("depthwise_conv2d", (1, 4, 10, 10, 3, 3)),
])
def test_random_schedules_of_many_workloads_give_finite_features(name, args):
    """Random legal schedules (cache stages, compute_at, rfactor...) of the shared workloads."""
    import tests.workloads as W
    from tests.scheduler_core.random_schedule import random_schedule

    d = ComputeDAG(getattr(W, name)(*args))
    rng = np.random.default_rng(7)
    for _ in range(12):
        s = random_schedule(State.from_dag(d), rng, int(rng.integers(1, 10)))
        f = get_per_store_features(None, s, cache=None)
        assert f.ndim == 2 and f.shape[1] == N_FEATURES and f.shape[0] >= 1
        assert np.isfinite(f).all()


def test_lowering_and_features_leave_no_cyclic_garbage(dag):
    """Lowering a state and extracting its features frees everything by reference counting:
    a recursive closure (a ``go`` that calls itself) is a reference cycle that only the
    cyclic collector frees, and in the search such garbage made collections take a quarter
    of the features' time.  Measured with the collector off on a second, fresh state (the
    first one fills the module caches)."""
    import gc

    get_per_store_features(None, _tiled(dag, N), cache=None)
    state = replay_steps(dag, [st.to_record() for st in _tiled(dag, N).transform_steps])
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        get_per_store_features(None, state, cache=None)
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
