"""extract_tasks + TaskScheduler + ApplyHistoryBest: a model tuned and rebuilt from its records."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.graph import ApplyHistoryBest, build_graph, dispatch, extract_tasks

from .models import mlp_graph, numpy_mlp, weights


def _options(callbacks: list, trials: int) -> sc.TuningOptions:
    return sc.TuningOptions(num_measure_trials=trials, num_measures_per_round=4, population=16, num_iters=1,
                            min_repeat_ms=1.0, repeat=1, timeout_s=20.0, verbose=1, measure_callbacks=callbacks)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Tune the first two of the model's three tasks, 4 trials each, into one log."""
    log = str(tmp_path_factory.mktemp("model") / "model.json")
    graph = mlp_graph().bind_params(weights())
    tasks, task_weights = extract_tasks(graph, "llvm")
    scheduler = sc.TaskScheduler(tasks[:2], task_weights[:2])
    seen = []

    def count(policy, inputs, results):
        seen.extend(inp.task.workload_key for inp in inputs)

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        states = scheduler.tune(_options([sc.RecordToFile(log), count], 8))
    return {"log": log, "graph": graph, "tasks": tasks, "scheduler": scheduler, "states": states,
            "seen": seen, "printed": buf.getvalue()}


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((4, 32)).astype("float32")


def test_task_scheduler_records_every_measurement_of_both_tasks_and_prints_the_table(tuned):
    tasks, sched = tuned["tasks"], tuned["scheduler"]
    lines = [json.loads(t) for t in open(tuned["log"]) if t.strip()]
    keys = [ln["i"][0][0] for ln in lines if "i" in ln]
    assert keys == tuned["seen"]  # the file callback got every record, in order
    assert sorted(set(keys)) == sorted({tasks[0].workload_key, tasks[1].workload_key})
    assert [keys.count(t.workload_key) for t in tasks[:2]] == list(sched.task_cts)
    assert 2 <= sched.task_cts.min() and sched.task_cts.max() <= 4
    assert all(len(h) == 1 for h in sched.history)
    assert all(s is not None for s in tuned["states"])
    printed = tuned["printed"]
    assert "Task description" in printed and "Estimated total latency" in printed
    assert "dense_a" in printed and "add_bias" in printed
    table = sched.progress_table()
    assert f"{2:6g}" in table  # dense_a's weight
    assert np.isfinite(sched.total_latency()) and sched.total_latency() > 0


def test_apply_history_best_picks_the_records_and_untuned_keeps_default(tuned):
    graph = tuned["graph"]
    assert dispatch.current() is None
    with ApplyHistoryBest(tuned["log"]) as ctx:
        assert dispatch.current() is ctx
        lib = build_graph(graph, "llvm")
    assert dispatch.current() is None
    assert lib.schedule_sources == {"dense_a": "record", "dense_b": "record", "add_bias": "record",
                                    "scale": "default"}
    np.testing.assert_allclose(lib(_x()), numpy_mlp(_x(), weights()), rtol=1e-4, atol=1e-4)
    best = sc.load_best_record(tuned["log"], tuned["tasks"][0].workload_key, "llvm")
    assert lib.functions["dense_a"].record_cost_s == pytest.approx(best[1].cost)
    # records given as (input, result) pairs; a target with other options still matches (kind llvm)
    with ApplyHistoryBest(sc.load_records(tuned["log"])):
        lib2 = build_graph(graph, "llvm -num-cores=1")
    assert lib2.schedule_source("add_bias") == "record"
    # nested: an inner context without the record falls back to the outer one
    with ApplyHistoryBest(tuned["log"]), ApplyHistoryBest([]) as inner:
        assert inner.query(tuned["tasks"][1].workload_key, "llvm") is not None
        assert build_graph(graph, "llvm").schedule_source("dense_b") == "record"
    assert build_graph(graph, "llvm").schedule_source("dense_a") == "default"


def test_apply_history_best_rejects_bad_input(tmp_path):
    with pytest.raises(InvalidWorkloadError, match="does not exist"):
        ApplyHistoryBest(str(tmp_path / "missing.json"))
    with pytest.raises(InvalidWorkloadError, match="expected a record file path"):
        ApplyHistoryBest([42])
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert ApplyHistoryBest(str(empty)).query("abc", "llvm") is None


def _quiet_tune(scheduler, options):
    with contextlib.redirect_stdout(io.StringIO()):
        return scheduler.tune(options)


def test_the_tasks_share_one_cost_model_trained_on_every_tasks_measurements(tuned):
    """Ansor's task scheduler shares one cost model among the tasks: each task's policy ranks
    with the model that learned from both tasks' records (labels normalized per task)."""
    policies = tuned["scheduler"].search_policies
    assert len(policies) == 2 and policies[0].cost_model is policies[1].cost_model
    model = policies[0].cost_model
    assert len(set(model.task_ids)) == 2
    assert len(model.features) == int(tuned["scheduler"].task_cts.sum())


def test_a_budget_smaller_than_one_round_per_task_still_reaches_every_task():
    """TVM's rule: a round is at most trials / tasks (64 per round asked, 6 trials, 3 tasks:
    2 each), so no task is left with its naive schedule."""
    graph = mlp_graph().bind_params(weights())
    tasks, task_weights = extract_tasks(graph, "llvm")
    scheduler = sc.TaskScheduler(tasks[:3], task_weights[:3])
    options = sc.TuningOptions(num_measure_trials=6, num_measures_per_round=64, population=16, num_iters=1,
                               min_repeat_ms=1.0, repeat=1, timeout_s=20.0, verbose=0)
    _quiet_tune(scheduler, options)
    assert list(scheduler.task_cts) == [2, 2, 2]


def test_the_time_budget_stops_starting_rounds():
    """With time_budget_s no round starts after the budget: a budget shorter than one round
    measures that one round (4 of the 100 trials) and stops; the option round-trips through JSON."""
    graph = mlp_graph().bind_params(weights())
    tasks, task_weights = extract_tasks(graph, "llvm")
    scheduler = sc.TaskScheduler(tasks[:2], task_weights[:2])
    options = sc.TuningOptions(num_measure_trials=100, num_measures_per_round=4, population=16, num_iters=1,
                               min_repeat_ms=1.0, repeat=1, timeout_s=20.0, verbose=0, time_budget_s=0.001)
    assert sc.TuningOptions.from_json(options.to_json()).time_budget_s == 0.001
    _quiet_tune(scheduler, options)
    assert int(scheduler.task_cts.sum()) == 4
    with pytest.raises(InvalidWorkloadError, match="time_budget_s"):
        sc.TuningOptions(time_budget_s=-1)


def test_warmup_rounds_shrink_to_fit_a_time_budget():
    """Under a time budget every task's first round gets its share of half the budget: MobileNetV2's
    32 tasks with 20 minutes once spent the whole budget on 17 full warm-up rounds (about 70 s
    each) and left 15 tasks on their default schedules."""
    from scheduler_core.search import task_scheduler

    assert task_scheduler.warmup_scale(None, 10.0, 5, 70.0) == 1.0          # no budget
    assert task_scheduler.warmup_scale(1200.0, 0.0, 32, None) == 1.0        # the first round sets the pace
    assert task_scheduler.warmup_scale(1200.0, 70.0, 31, 70.0) == pytest.approx((600 - 70) / 31 / 70)
    assert task_scheduler.warmup_scale(1200.0, 10.0, 2, 70.0) == 1.0        # enough time: full rounds
    assert task_scheduler.warmup_scale(1200.0, 900.0, 3, 70.0) == 1e-3      # the warm-up share is spent


def test_a_shrunk_warmup_round_measures_fewer_programs_with_a_smaller_population(monkeypatch):
    from scheduler_core.search import task_scheduler
    from scheduler_core.search.search_policy import SketchPolicy

    populations: list = []
    asked: list = []  # programs each round asks to measure (a search may find fewer new ones)
    search = SketchPolicy.search

    def spy(self, num_measure_trials, *args, **kw):
        populations.append(self.params.population)
        asked.append(num_measure_trials)
        return search(self, num_measure_trials, *args, **kw)
    monkeypatch.setattr(SketchPolicy, "search", spy)
    monkeypatch.setattr(task_scheduler, "warmup_scale", lambda *a: 0.25)
    graph = mlp_graph().bind_params(weights())
    tasks, task_weights = extract_tasks(graph, "llvm")
    scheduler = sc.TaskScheduler(tasks[:3], task_weights[:3])
    options = sc.TuningOptions(num_measure_trials=10, num_measures_per_round=8, population=256, num_iters=1,
                               min_repeat_ms=1.0, repeat=1, timeout_s=20.0, verbose=0, time_budget_s=1e6)
    _quiet_tune(scheduler, options)
    # a round is at most 10 // 3 = 3 trials; warm-up: 3 rounds of max(2, 3 * 0.25) = 2 trials at
    # population max(64, 256 * 0.25) = 64; then full rounds (population 256) of 3 and 1 for the 4 left
    assert populations == [64, 64, 64, 256, 256], populations
    assert asked == [2, 2, 2, 3, 1], asked
