"""GPU columns of the program features (TVM's feature.cc): ``is_gpu`` and the
blockIdx / threadIdx / vthread lengths of the loops bound around each store.

The states come from the GPU sketch and init rules of ``sketch_rules``; the features
come from the cost model's own path (``lower_state``, no GPU lowering, no build)."""

from __future__ import annotations

import math

import numpy as np

from cost_model.feature import (
    FEATURE_NAMES,
    N_FEATURES,
    FeatureCache,
    get_per_store_features,
)
from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.schedule.transform_step import SplitStep
from sketch_rules import InitThreadBind, generate_sketches
from sketch_rules.step_history import replay_or_none
from tests import workloads as W
from tests.sketch_rules.stub_policy import StubPolicy

GPU_COLS = ["is_gpu", "blockIdx_x_len", "blockIdx_y_len", "blockIdx_z_len", "threadIdx_x_len",
            "threadIdx_y_len", "threadIdx_z_len", "vthread_len"]


def _gpu_cols(f: np.ndarray) -> np.ndarray:
    return f[:, [FEATURE_NAMES.index(c) for c in GPU_COLS]]


def _log2p(x: float) -> float:
    return math.log2(x + 1)


def _policy(tensors, target="cuda") -> StubPolicy:
    dag = ComputeDAG(tensors)
    return StubPolicy(Task.create(dag, target))


def _filled(sketch, lengths):
    it = iter(lengths)
    steps = [SplitStep(s.stage_id, s.iter_id, s.extent, next(it), s.inner_to_outer)
             if isinstance(s, SplitStep) and s.lengths[0] is None else s
             for s in sketch.transform_steps]
    return replay_or_none(sketch, steps)


def test_bound_matmul_has_gpu_columns():
    """matmul 512 bound by InitThreadBind with 32 blocks, 2 vthreads, 128 threads: every
    stored buffer (A.shared, B.shared, matmul.local, matmul) is in that kernel, so every
    row has is_gpu = 1, blockIdx_x_len = log2(33), threadIdx_x_len = log2(129),
    vthread_len = log2(3), and length 1 on the unbound y/z axes (TVM's default)."""
    policy = _policy(W.matmul(512, 512, 512))
    (sketch,) = generate_sketches(policy)
    state = _filled(sketch, [(2, 16, 2, 2), (1, 8, 4, 2), (4, 2)])
    state = InitThreadBind().apply(policy, state, np.random.default_rng(0))
    f = get_per_store_features(policy.task, state, cache=None)
    assert f.shape == (4, N_FEATURES) and N_FEATURES == 177
    expected = [1.0, _log2p(32), 1, 1, _log2p(128), 1, 1, _log2p(2)]
    np.testing.assert_allclose(_gpu_cols(f), np.tile(expected, (4, 1)), rtol=1e-5)


def test_cross_thread_softmax_has_gpu_columns():
    """softmax 2x1024, both reductions across 32 threads inside softmax's 2 blocks:
    3 stored buffers (row_max, row_sum, softmax), each with blockIdx_x_len = log2(3) and
    threadIdx_x_len = log2(33), the other axes length 1 (log2(2))."""
    policy = _policy(W.softmax(2, 1024))
    state = InitThreadBind().apply(policy, generate_sketches(policy)[0], np.random.default_rng(0))
    f = get_per_store_features(policy.task, state, cache=None)
    expected = [1.0, _log2p(2), 1, 1, _log2p(32), 1, 1, 1]
    np.testing.assert_allclose(_gpu_cols(f), np.tile(expected, (f.shape[0], 1)), rtol=1e-5)
    assert f.shape[0] == 3


def test_is_gpu_follows_the_target():
    """A store of a GPU task with no bound loop (the zero-rank reduction's default sketch)
    still has is_gpu = 1 and every length 1 (TVM sets is_gpu for the whole GPU program, and its
    lengths start at 1); the same state of an llvm task has is_gpu = 0, and the cache keeps
    the two apart."""
    A = te.placeholder((128,), "float32", name="A")
    k = te.reduce_axis((0, 128), name="k")
    tensors = [A, te.compute((), lambda: te.sum(A[k], axis=k), name="B")]
    gpu, cpu = _policy(tensors), _policy(tensors, "llvm")
    state = generate_sketches(gpu)[-1]
    assert state.transform_steps == ()
    cache = FeatureCache()
    fg = get_per_store_features(gpu.task, state, cache)
    fc = get_per_store_features(cpu.task, state, cache)
    assert _gpu_cols(fg).tolist() == [[1.0] * 8]
    assert _gpu_cols(fc).tolist() == [[0.0] + [1.0] * 7]
    np.testing.assert_array_equal(np.delete(fg, FEATURE_NAMES.index("is_gpu"), axis=1),
                                  np.delete(fc, FEATURE_NAMES.index("is_gpu"), axis=1))
