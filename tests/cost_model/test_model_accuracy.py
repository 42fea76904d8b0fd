"""The pairwise (pack-rank) objective of LGBMModel: it learns a ranking, its gradient is right,
tiny and all-failed batches do not raise, and a saved model predicts the same after loading.

Real data: features of random tiled 64^3 matmul schedules and their in-process timings
(``tests/cost_model/conftest.py``); no timing is asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from cost_model import LGBMModel, pairwise_accuracy
from cost_model.feature import get_per_store_features_from_states
from cost_model.lgbm_model import normalized_throughput
from cost_model.lgbm_train import pack_rank_objective, pair_index, predict_pack_rank, train_pack_rank
from scheduler_core.measure.data import MeasureErrorNo
from tests.cost_model.conftest import as_measurements

N_TRAIN = 60  # of the 90 measured states, in order; the last 30 are held out


def _heldout(model, task, measured) -> float:
    states, costs = measured
    model.update(*as_measurements(task, states[:N_TRAIN], costs[:N_TRAIN]))
    return pairwise_accuracy(model.predict(task, states[N_TRAIN:]), costs[N_TRAIN:])


@pytest.mark.parametrize("objective", ["pack_rank", "auto"])
def test_learns_a_ranking_of_real_schedules(matmul_task, measured, objective):
    """Trained on 60 timed schedules, the model orders the other 30 far better than chance."""
    model = LGBMModel(objective=objective, num_warmup_sample=0, seed=0)
    acc = _heldout(model, matmul_task, measured)
    print(f"\n{objective}: held-out pairwise accuracy {acc:.3f} (kind {model.kind})")
    assert model.kind in ("pack_sum", "rank", "pack_rank")
    assert acc > 0.65


def test_default_model_is_pairwise_and_used_soon():
    model = LGBMModel()
    assert model.objective == "pack_rank"
    assert 0 < model.num_warmup_sample <= 32


def test_pack_rank_scores_are_ordered_and_positive(matmul_task, measured):
    """The search picks parents with probability proportional to the score: scores must be > 0."""
    model = LGBMModel(objective="pack_rank", num_warmup_sample=0, seed=0)
    states, costs = measured
    model.update(*as_measurements(matmul_task, states[:N_TRAIN], costs[:N_TRAIN]))
    p = model.predict(matmul_task, states)
    assert p.shape == (len(states),) and p.dtype == np.float64
    assert np.all((p > 0) & (p < 1))
    assert len(np.unique(p)) > 10


def test_pair_index():
    y = np.array([1.0, 0.5, 0.0, 0.0, 0.99, 0.2])
    groups = np.array([0, 0, 0, 0, 0, 1])
    b, w = pair_index(y, groups, max_pairs=1000, rng=np.random.default_rng(0), min_ratio=1.05)
    pairs = set(zip(b.tolist(), w.tolist()))
    assert (0, 1) in pairs and (4, 1) in pairs and (1, 2) in pairs and (0, 3) in pairs
    assert (0, 4) not in pairs and (4, 0) not in pairs  # within 5%: measurement noise
    assert (2, 3) not in pairs and (3, 2) not in pairs  # two failures
    assert all(groups[i] == groups[j] for i, j in pairs)  # never across tasks
    assert all(y[i] > y[j] for i, j in pairs)
    b, w = pair_index(y, groups, max_pairs=3, rng=np.random.default_rng(0))
    assert len(b) == 3


def test_pack_rank_gradient_matches_finite_differences():
    """The objective's gradient is that of sum over pairs of log(1 + exp(-(s_b - s_w))) / pairs per state."""
    rng = np.random.default_rng(0)
    pack_ids = np.array([0, 0, 1, 2, 2, 2, 3])
    n = 4
    better, worse = np.array([0, 0, 1, 3]), np.array([1, 2, 2, 2])
    per_state = np.bincount(better, minlength=n) + np.bincount(worse, minlength=n)
    preds = rng.normal(size=len(pack_ids))

    def loss_of_scores(s):
        return float(np.sum(np.log1p(np.exp(-(s[better] - s[worse])))))

    grad, hess = pack_rank_objective(pack_ids, n, better, worse)(preds, None)
    s = np.bincount(pack_ids, weights=preds, minlength=n)
    eps = 1e-6
    for k in range(n):
        d = np.zeros(n)
        d[k] = eps
        num = (loss_of_scores(s + d) - loss_of_scores(s - d)) / (2 * eps) / per_state[k]
        rows = np.flatnonzero(pack_ids == k)
        np.testing.assert_allclose(grad[rows], num, rtol=1e-5, atol=1e-8)
    assert np.all(hess > 0)


def test_trainer_returns_none_without_pairs(matmul_task, measured):
    states, _ = measured
    feats = get_per_store_features_from_states(matmul_task, states[:8])
    assert train_pack_rank(feats, np.zeros(8), np.zeros(8, np.int64)) is None  # all failed
    y = normalized_throughput(np.linspace(1, 2, 8), np.zeros(8, np.int64))
    booster = train_pack_rank(feats, y, np.zeros(8, np.int64), num_rounds=5,
                              params={"min_data_in_leaf": 1, "min_data_in_bin": 1})
    if booster is not None:
        assert predict_pack_rank(booster, feats).shape == (8,)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_tiny_batches_do_not_raise(matmul_task, measured, n):
    states, costs = measured
    model = LGBMModel(objective="pack_rank", num_warmup_sample=0, seed=0)
    for start in range(0, 3 * n, n):
        model.update(*as_measurements(matmul_task, states[start:start + n], costs[start:start + n]))
    assert model.predict(matmul_task, states[:4]).shape == (4,)


def test_all_failed_batches_do_not_raise(matmul_task, measured):
    states, costs = measured
    model = LGBMModel(objective="pack_rank", num_warmup_sample=0, seed=0)
    errs = [int(MeasureErrorNo.RUNTIME_DEVICE)] * 10
    model.update(*as_measurements(matmul_task, states[:10], costs[:10], errs))
    assert model.booster is None  # nothing to learn from: random warm-up scores stay
    assert model.predict(matmul_task, states[:3]).shape == (3,)
    model.update(*as_measurements(matmul_task, states[10:50], costs[10:50]))
    assert model.booster is not None and model.kind == "pack_rank"
    model.update(*as_measurements(matmul_task, states[50:60], costs[50:60], errs))  # failures after training
    assert model.kind == "pack_rank"


def test_save_load_round_trip(matmul_task, measured, tmp_path):
    states, costs = measured
    model = LGBMModel(objective="pack_rank", num_warmup_sample=0, seed=0)
    model.update(*as_measurements(matmul_task, states[:N_TRAIN], costs[:N_TRAIN]))
    path = tmp_path / "model.json"
    model.save(path)
    fresh = LGBMModel(seed=5)
    fresh.load(path)
    assert fresh.kind == "pack_rank"
    np.testing.assert_array_equal(fresh.predict(matmul_task, states), model.predict(matmul_task, states))
