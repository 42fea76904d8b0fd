"""LGBMModel.update accepts any batch: one or two measurements, all failed, equal costs.

LightGBM refuses to train when binning leaves it no feature to split on (a handful of
rows, or columns all alike: "Check failed: num_features() > 0").  The model keeps its
previous booster then (none before the first training: seeded random scores, Ansor's
warm-up) and retries at the next update.  Everything here is real: features of real
tiled matmul schedules, their real timings, real LightGBM; and a real search measuring
two programs per round.
"""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import LGBMModel
from cost_model.feature import get_per_store_features_from_states
from cost_model.lgbm_train import train_pack_sum, train_rank
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo
from sketch_rules import SketchPolicyParams
from tests.cost_model.conftest import as_measurements
from tests.cost_model.schedules import matmul_dag, measure_in_process, tiled_matmul_state
from tests.workloads import matmul

N = 32
OBJECTIVES = ("pack_sum", "rank", "auto")


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.create(matmul_dag(N), "llvm")


@pytest.fixture(scope="module")
def timed(task):
    """(states, seconds float64 [24]) of random tiled schedules of a 32^3 matmul, timed here."""
    rng = np.random.default_rng(7)
    states = [tiled_matmul_state(task.compute_dag, rng, parallel=False) for _ in range(24)]
    return states, measure_in_process(task.compute_dag, states, min_repeat_ms=1.0, repeat=3)


def _warmup_scores(seed: int, n: int) -> np.ndarray:
    """What an untrained model with ``seed`` predicts for ``n`` states first."""
    return np.random.default_rng(seed).uniform(0.0, 1.0, n)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("n", [1, 2])
def test_one_or_two_measurements_do_not_raise(task, timed, objective, n):
    states, costs = timed
    model = LGBMModel(objective=objective, num_warmup_sample=0, seed=3)
    model.update(*as_measurements(task, states[:n], costs[:n]))
    assert len(model.features) == n and len(model.costs) == n  # the data is kept
    # LightGBM bins the few rows of one or two programs into one bin per feature: no training
    assert model.booster is None and model.kind is None
    scores = model.predict(task, states)
    np.testing.assert_array_equal(scores, _warmup_scores(3, len(states)))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_a_batch_of_failures_does_not_raise(task, timed, objective):
    states, _ = timed
    model = LGBMModel(objective=objective, num_warmup_sample=0, seed=0)
    errors = [MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.RUN_TIMEOUT, MeasureErrorNo.WRONG_ANSWER]
    model.update(*as_measurements(task, states[:3], [1.0] * 3, error_nos=[int(e) for e in errors]))
    assert model.booster is None and len(model.features) == 3
    assert np.all(np.isfinite(model.costs) == [False] * 3)
    assert model.predict(task, states[:4]).shape == (4,)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_two_per_round_trains_once_there_is_enough_data_and_keeps_it(task, timed, objective):
    states, costs = timed
    model = LGBMModel(objective=objective, num_warmup_sample=0, seed=0)
    trained_at = None
    for k in range(0, 20, 2):
        model.update(*as_measurements(task, states[k:k + 2], costs[k:k + 2]))
        if model.booster is not None and trained_at is None:
            trained_at = k + 2
    assert trained_at is not None, "20 measured programs never trained a model"
    assert model.kind in ("pack_sum", "rank")
    held_out = states[20:]
    before = model.predict(task, held_out)
    assert np.all(np.isfinite(before))
    # a batch in which every measurement failed: no exception, and still a trained model
    booster = model.booster
    model.update(*as_measurements(task, states[20:22], [1.0, 1.0], error_nos=[4, 4]))
    assert model.booster is not None and len(model.features) == 22
    if model.booster is booster:  # the throttle skipped the retrain: the same predictions
        np.testing.assert_array_equal(model.predict(task, held_out), before)
    assert np.all(np.isfinite(model.predict(task, held_out)))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_equal_costs_do_not_raise(task, timed, objective):
    # constant labels: every program as fast as the best (normalized throughput 1 for all)
    states, _ = timed
    model = LGBMModel(objective=objective, num_warmup_sample=0, seed=0)
    for k in range(0, 12, 3):
        model.update(*as_measurements(task, states[k:k + 3], [1e-3] * 3))
    scores = model.predict(task, states[:12])
    assert scores.shape == (12,) and np.all(np.isfinite(scores))


def test_trainers_return_none_when_lightgbm_has_nothing_to_split(task, timed):
    states, costs = timed
    feats = get_per_store_features_from_states(task, states[:2])
    y = costs[:2].min() / costs[:2]
    assert train_pack_sum(feats, y, num_rounds=5) is None
    assert train_rank(feats, y, np.zeros(2, np.int64), num_rounds=5) is None
    feats = get_per_store_features_from_states(task, states)
    y = costs.min() / costs
    booster = train_pack_sum(feats, y, num_rounds=5)
    assert booster is not None and booster.num_trees() == 5


def test_search_measuring_two_per_round_completes_with_lgbm(tmp_path):
    log = tmp_path / "matmul.json"
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul(16, 16, 16)), target="llvm")
    model = LGBMModel(seed=0, num_warmup_sample=0)
    policy = sc.SketchPolicy(task, model, params=SketchPolicyParams(population=32, num_iters=1),
                             seed=0, verbose=0)
    opts = sc.TuningOptions(num_measure_trials=8, num_measures_per_round=2, min_repeat_ms=1.0,
                            measure_callbacks=[sc.RecordToFile(str(log))], verbose=0)
    task.tune(opts, search_policy=policy)
    records = list(sc.load_records(str(log)))
    assert len(records) == 8
    assert len(model.features) == 8
    assert sum(r.error_no == MeasureErrorNo.NO_ERROR for _, r in records) >= 2
    sch, args = task.apply_best(str(log))
    func = sc.build(sch, args, "llvm")
    rng = np.random.default_rng(0)
    a, b = rng.random((16, 16), dtype=np.float32), rng.random((16, 16), dtype=np.float32)
    out = np.empty((16, 16), np.float32)
    func(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)
