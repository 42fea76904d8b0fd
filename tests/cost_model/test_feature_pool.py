"""Features of a batch on worker processes (cost_model.feature_pool): the same arrays as in
the caller's process, the states lowered here stay here, a bad worker count is refused."""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import RandomModel, feature_pool
from cost_model.feature import FeatureCache, extract_state_features, get_per_store_features_from_states
from scheduler_core.schedule.dataflow_step import replay_steps
from sketch_rules import generate_sketches, sample_init_population
from tests.workloads import matmul_add


@pytest.fixture(scope="module")
def task_and_states():
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(128, 128, 128)), target="llvm")
    policy = sc.SketchPolicy(task, RandomModel(), seed=3, verbose=0)
    states = sample_init_population(policy, generate_sketches(policy, None), 12, policy.rng)
    # replayed copies: equal states this process has not lowered yet (the search's mutants)
    fresh = [replay_steps(task.compute_dag, s.transform_steps) for s in states]
    return task, states, fresh


def test_workers_give_the_arrays_of_the_callers_process(task_and_states, monkeypatch):
    task, states, fresh = task_and_states
    expected = [extract_state_features(s, task.hardware_params.cache_line_bytes) for s in states]
    monkeypatch.setattr(feature_pool, "MIN_PARALLEL_STATES", 4)
    monkeypatch.setenv(feature_pool.WORKERS_ENV, "2")
    calls = []
    original = feature_pool.extract_many
    monkeypatch.setattr(feature_pool, "extract_many", lambda *a: calls.append(len(a[1])) or original(*a))
    cache = FeatureCache()
    got = get_per_store_features_from_states(task, fresh, cache)
    assert calls == [len(fresh)]  # every state went to the workers
    assert all(np.array_equal(a, b) and not a.flags.writeable for a, b in zip(got, expected))
    # a second call is served by the cache; states lowered here are not sent away
    assert all(a is b for a, b in zip(get_per_store_features_from_states(task, fresh, cache), got))
    get_per_store_features_from_states(task, states, FeatureCache())
    assert calls == [len(fresh)]


def test_worker_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(feature_pool.WORKERS_ENV, "3")
    assert feature_pool.feature_workers() == 3
    monkeypatch.delenv(feature_pool.WORKERS_ENV)
    assert 1 <= feature_pool.feature_workers() <= feature_pool.MAX_WORKERS
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(feature_pool.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match="AUTOSCHED_FEATURE_WORKERS"):
            feature_pool.feature_workers()


def test_sampling_checks_lowering_on_the_workers_and_gets_the_same_states(monkeypatch):
    from cost_model.feature import lowering_flags
    from sketch_rules.step_history import step_key

    def sample(check):
        task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(64, 64, 64)), target="llvm")
        policy = sc.SketchPolicy(task, RandomModel(), seed=11, verbose=0)
        sketches = generate_sketches(policy, None)
        return [step_key(s) for s in sample_init_population(policy, sketches, 24, policy.rng,
                                                            lowering_check=check and (lambda st: check(task, st)))]

    monkeypatch.setattr(feature_pool, "MIN_PARALLEL_STATES", 4)
    monkeypatch.setenv(feature_pool.WORKERS_ENV, "2")
    on_workers = sample(lowering_flags)
    assert len(on_workers) == 24 and on_workers == sample(None)
