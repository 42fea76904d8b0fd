"""Transfer learning: an LGBMModel that starts from a pretrained model ranks from the first
round and keeps learning from its own records (trees added on top of the pretrained ones)."""

from __future__ import annotations

import numpy as np
import pytest

import cost_model.lgbm_model as lgbm_model
from cost_model import CostModelError, LGBMModel, pairwise_accuracy
from scheduler_core.dag.task import Task
from tests.cost_model.conftest import MATMUL_N, as_measurements
from tests.cost_model.schedules import matmul_dag

N_BASE = 45  # states the pretrained model sees; 45-60 are the task's own records, 60-90 held out


@pytest.fixture(scope="module")
def base_file(matmul_task, measured, tmp_path_factory):
    states, costs = measured
    base = LGBMModel(num_warmup_sample=0, seed=1, pretrained=None)
    base.update(*as_measurements(matmul_task, states[:N_BASE], costs[:N_BASE]))
    assert base.kind == "pack_rank" and base.booster is not None
    path = tmp_path_factory.mktemp("pretrained") / "llvm.json"
    base.save(path)
    return path, base


def test_a_new_model_ranks_with_the_pretrained_one_before_any_measurement(matmul_task, measured, base_file):
    states, costs = measured
    path, base = base_file
    held = states[60:]
    fresh = LGBMModel(seed=3, pretrained=path)
    scores = fresh.predict(matmul_task, held)
    np.testing.assert_array_equal(scores, base.predict(matmul_task, held))
    assert pairwise_accuracy(scores, costs[60:]) > 0.6
    # without it: Ansor's warm-up, seeded random scores that know nothing
    cold = [LGBMModel(seed=s, pretrained=None).predict(matmul_task, held) for s in (3, 4)]
    assert not np.array_equal(cold[0], cold[1])


def test_retraining_continues_from_the_pretrained_trees(matmul_task, measured, base_file):
    states, costs = measured
    path, base = base_file
    model = LGBMModel(seed=3, num_warmup_sample=0, pretrained=path)
    model.update(*as_measurements(matmul_task, states[N_BASE:60], costs[N_BASE:60]))
    assert model.booster is not None
    assert model.booster.num_trees() > base.booster.num_trees()  # its own trees on top
    held = states[60:]
    assert not np.array_equal(model.predict(matmul_task, held), base.predict(matmul_task, held))
    assert pairwise_accuracy(model.predict(matmul_task, held), costs[60:]) > 0.6


def test_gpu_tasks_and_other_objectives_start_cold(measured, base_file):
    path, _ = base_file
    gpu_task = Task.create(matmul_dag(MATMUL_N), "cuda -arch=sm_80")
    assert LGBMModel(pretrained=path).base_model(gpu_task) is None
    cpu_task = Task.create(matmul_dag(MATMUL_N), "llvm")
    assert LGBMModel(pretrained=path, objective="pack_sum").base_model(cpu_task) is None
    assert LGBMModel(pretrained=path).base_model(cpu_task) is not None


def test_a_named_file_that_is_no_model_is_an_error_and_auto_without_a_file_is_cold(tmp_path, monkeypatch):
    task = Task.create(matmul_dag(MATMUL_N), "llvm")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(CostModelError, match="is not an autosched-lgbm-v1 file"):
        LGBMModel(pretrained=bad).base_model(task)
    monkeypatch.setattr(lgbm_model, "PRETRAINED_FILE", tmp_path / "absent.json")
    assert LGBMModel().base_model(task) is None


def test_the_shipped_model_matches_this_builds_features():
    # a change of the features (FEATURE_VERSION) must come with a retrained file:
    # python benchmarks/pretrain_cost_model.py --train-only
    assert lgbm_model.PRETRAINED_FILE.is_file()
    task = Task.create(matmul_dag(MATMUL_N), "llvm")
    kind, booster = LGBMModel().base_model(task)
    assert kind == "pack_rank" and booster.num_trees() > 0
