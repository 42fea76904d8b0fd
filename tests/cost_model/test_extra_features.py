"""The 13 columns beyond TVM's 164 (cost_model.feature): the register/unroll/cache view of each
store; the ``n_columns`` option of LGBMModel, the default pack-rank parameters, and
``pairwise_accuracy``'s ``min_ratio``.

The ranking test uses a synthetic cost (a function of the schedule), so it asserts what the
model can learn from the new columns without depending on this machine's timings.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cost_model import LGBMModel, pairwise_accuracy
from cost_model.cost_model import CostModelError
from cost_model.feature import (
    FEATURE_NAMES,
    N_ANSOR_FEATURES,
    N_FEATURES,
    get_per_store_features,
    get_per_store_features_from_states,
)
from cost_model.feature_extract import EXTRA_NAMES
from cost_model.lgbm_train import PACK_RANK_PARAMS
from scheduler_core import ComputeDAG
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, FuseStep, PragmaStep, ReorderStep, SplitStep
from tests.cost_model.conftest import as_measurements
from tests.cost_model.schedules import tiled_matmul_state
from tests.workloads import matmul_add

N = 256


def _col(name: str) -> int:
    return FEATURE_NAMES.index(name)


def _log2p(x: float) -> float:
    return math.log2(x + 1)


def _tiled(dag):
    """i.0@j.0 (8, parallel) i.1 (8) j.1 (8) k.0 (64) i.2 (8) k.1 (4) j.2 (16, vectorized), unroll 16."""
    s = State.from_dag(dag)
    s = SplitStep(2, 0, N, (8, 8), True).apply(s)
    s = SplitStep(2, 3, N, (8, 16), True).apply(s)
    s = SplitStep(2, 6, N, (4,), True).apply(s)
    s = ReorderStep(2, (0, 3, 1, 4, 6, 2, 7, 5)).apply(s)
    s = FuseStep(2, (0, 1)).apply(s)
    s = AnnotationStep(2, 0, "parallel").apply(s)
    s = AnnotationStep(2, 6, "vectorize").apply(s)
    return PragmaStep(2, 0, "auto_unroll_max_step$16").apply(s)


@pytest.fixture(scope="module")
def dag():
    return ComputeDAG(matmul_add(N, N, N))


def test_layout_tvm_columns_first(dag):
    """TVM's 164 columns keep their places; the 13 new ones follow."""
    assert N_ANSOR_FEATURES == 164 and N_FEATURES == 164 + len(EXTRA_NAMES) == 177
    assert FEATURE_NAMES[N_ANSOR_FEATURES - 1] == "auto_unroll_max_step"
    assert FEATURE_NAMES[N_ANSOR_FEATURES:] == EXTRA_NAMES
    for state in (State.from_dag(dag), _tiled(dag)):
        f = get_per_store_features(None, state, cache=None)
        assert f.shape == (2, N_FEATURES) and f.dtype == np.float32
        assert np.isfinite(f).all() and (f[:, N_ANSOR_FEATURES:] >= 0).all()


def test_register_tile_of_a_tiled_matmul(dag):
    """The update store of the tiled matmul: inner j.2 (16, vectorized), reduction k.1 (4) above it."""
    f = get_per_store_features(None, _tiled(dag), cache=None)[0]
    assert f[_col("inner_len")] == pytest.approx(_log2p(16))
    assert f[_col("inner_store_stride")] == pytest.approx(_log2p(1))
    assert f[_col("inner_reads_contiguous")] == pytest.approx(_log2p(1))  # B[k, j]
    assert f[_col("inner_reads_broadcast")] == pytest.approx(_log2p(1))   # A[i, k]
    assert f[_col("inner_reads_strided")] == 0
    assert f[_col("reduce_inner_len")] == pytest.approx(_log2p(4))
    assert f[_col("accumulators")] == pytest.approx(_log2p(16))
    assert f[_col("accumulator_bytes")] == pytest.approx(_log2p(64))
    assert f[_col("unrolled_steps")] == pytest.approx(_log2p(4))  # k.1 (4); with i.2 it would be 32 > 16
    t = [f[_col(f"traffic_{c}")] for c in ("32K", "1M", "32M")]
    assert t[0] >= t[1] >= t[2] > 0  # a bigger cache moves fewer bytes


def test_naive_matmul_has_no_register_tile(dag):
    """i, j, k with k innermost: one partial sum, B walked with stride n, more L1 traffic."""
    naive = get_per_store_features(None, State.from_dag(dag), cache=None)[0]
    tiled = get_per_store_features(None, _tiled(dag), cache=None)[0]
    assert naive[_col("inner_store_stride")] == 0  # k does not index the output
    assert naive[_col("inner_reads_strided")] == pytest.approx(_log2p(1))  # B[k, j]
    assert naive[_col("accumulators")] == pytest.approx(_log2p(1))
    assert naive[_col("unrolled_steps")] == pytest.approx(_log2p(1))
    assert naive[_col("traffic_32K")] > tiled[_col("traffic_32K")]


def _synthetic_cost(feats: np.ndarray) -> float:
    """Seconds from the matmul row: 4x for a strided read in the inner loop, 2x for fewer than
    16 partial sums under the innermost reduction loop (1 ms for the best schedules)."""
    row = feats[0]
    acc = 2 ** row[_col("accumulators")] - 1
    strided = 2 ** row[_col("inner_reads_strided")] - 1
    return 1e-3 * (4.0 if strided > 0.5 else 1.0) * (2.0 if acc < 15.5 else 1.0)


def test_default_model_ranks_the_clearly_better_schedule_first(matmul_task):
    """Trained on 60 schedules with a synthetic cost, the default model puts one of the best
    held-out schedules (at least twice as fast as every other) first and orders the 30 mostly right."""
    rng = np.random.default_rng(7)
    states = [tiled_matmul_state(matmul_task.compute_dag, rng) for _ in range(90)]
    feats = get_per_store_features_from_states(matmul_task, states)
    costs = np.array([_synthetic_cost(f) for f in feats])
    model = LGBMModel(num_warmup_sample=0, seed=0)
    model.update(*as_measurements(matmul_task, states[:60], costs[:60]))
    assert model.kind == "pack_rank"
    held = costs[60:]
    preds = model.predict(matmul_task, states[60:])
    assert preds.shape == (30,) and np.all(np.isfinite(preds))
    assert 0 < np.sum(held == held.min()) < len(held) and held.max() >= 4 * held.min()
    assert held[int(np.argmax(preds))] == held.min()
    assert pairwise_accuracy(preds, held) > 0.9


def test_ansor_columns_only(matmul_task, measured, tmp_path):
    """n_columns=164 trains on TVM's columns alone; save/load keeps it; bad values raise."""
    states, costs = measured
    model = LGBMModel(num_warmup_sample=0, seed=0, n_columns=N_ANSOR_FEATURES)
    model.update(*as_measurements(matmul_task, states[:60], costs[:60]))
    assert model.booster is not None and model.booster.num_feature() == N_ANSOR_FEATURES
    p = model.predict(matmul_task, states[60:])
    path = tmp_path / "m.json"
    model.save(path)
    fresh = LGBMModel()
    fresh.load(path)
    assert fresh.n_columns == N_ANSOR_FEATURES
    np.testing.assert_array_equal(fresh.predict(matmul_task, states[60:]), p)
    full = LGBMModel(num_warmup_sample=0, seed=0)
    full.update(*as_measurements(matmul_task, states[:60], costs[:60]))
    assert full.booster.num_feature() == N_FEATURES
    for bad in (0, N_FEATURES + 1):
        with pytest.raises(CostModelError):
            LGBMModel(n_columns=bad)


def test_default_pack_rank_parameters():
    """Extra trees (random split thresholds) on small, L2-regularized trees; all columns."""
    assert PACK_RANK_PARAMS["extra_trees"] is True
    assert PACK_RANK_PARAMS["num_leaves"] <= 15 and PACK_RANK_PARAMS["lambda_l2"] > 0
    assert LGBMModel().n_columns is None


def test_pairwise_accuracy_min_ratio():
    costs = np.array([1.0, 1.1, 3.0, 10.0])
    preds = np.array([0.0, 1.0, 0.5, 0.1])  # wrong on (1.0, 1.1), right on (3.0, 10.0), ...
    everything = pairwise_accuracy(preds, costs)
    apart = pairwise_accuracy(preds, costs, min_ratio=1.5)  # (1.0, 1.1) is left out
    assert apart > everything
    assert pairwise_accuracy(preds, costs, min_ratio=100.0) == 0.5  # no pair left
    failed = np.array([1.0, np.inf])
    assert pairwise_accuracy(np.array([1.0, 0.0]), failed, min_ratio=1.5) == 1.0
