"""What a job searches and how it measures: the parts of ``workers.jobs.search_job``.

    JobPlan(tasks, weights, task_ids, target, tuning)   a task job: one task of weight 1
    make_measurer        (builder, runner): this worker, or the target's measurement queue per task
    load_measured        every task's records --> trained_cost_model (one model for all its tasks), and
    preload_measured     the states every policy marks measured (never measured again)
    save_cost_model      the job's cost model as each task's snapshot
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cost_model import LGBMModel
from scheduler_core.measure.data import MeasureInput, MeasureResult
from scheduler_core.measure.local_runner import local_measurer
from scheduler_core.search.search_task import SearchTask
from scheduler_core.search.tuning_options import TuningOptions

from .measure_queue import QueueBuilder, QueueRunner
from .store import RedisStore

Measured = list[tuple[MeasureInput, MeasureResult]]


@dataclass(frozen=True)
class JobPlan:
    """What a job searches: its tasks (one per workload_key, on one target) and their weights.

    tasks : SearchTasks; weights : calls of each per model run (1 for a task job);
    task_ids : the stored task of each (same order); target : canonical target text;
    tuning : TuningOptions' JSON form (the task's or the model's); per_task_trials : whether
    the job hash counts ``trials_done:<task_id>`` (a model job).
    """

    tasks: tuple[SearchTask, ...]
    weights: tuple[int, ...]
    task_ids: tuple[str, ...]
    target: str
    tuning: Mapping[str, Any]
    per_task_trials: bool = False

    @classmethod
    def of_task(cls, task: SearchTask, task_id: str, tuning: Mapping[str, Any]) -> JobPlan:
        """The plan of a task job: one task of weight 1."""
        return cls((task,), (1,), (task_id,), str(task.target), tuning)

    @property
    def ids_by_workload(self) -> dict[str, str]:
        return {str(t.workload_key): tid for t, tid in zip(self.tasks, self.task_ids)}


class TaskQueueRunner:
    """A runner that sends each batch to the measurement queue as a batch of its own task.

    A measurement worker rebuilds a batch from its task's stored DAG (``measure_job(task_id,
    steps)``), and the task scheduler measures one task per batch, so each task gets its
    ``QueueRunner``, made on first use by ``make(workload_key)``.
    """

    def __init__(self, make: Callable[[str], Any]):
        self.make = make
        self.runners: dict[str, Any] = {}

    def run(self, inputs: list, build_results: list, verbose: int = 0) -> list:
        if not inputs:
            return []
        wk = inputs[0].task.workload_key
        if wk not in self.runners:
            self.runners[wk] = self.make(wk)
        return self.runners[wk].run(inputs, build_results, verbose)

    def close(self) -> None:
        for r in self.runners.values():
            r.close()


def make_measurer(store: RedisStore, plan: JobPlan, options: TuningOptions, job_id: str) -> tuple[Any, Any]:
    """``(builder, runner)`` of a job: on this worker (``measure="local"``), or by the measurement
    workers of the target's queue (``"queue"``), each batch as one of its task's."""
    if options.measure != "queue":
        return local_measurer(options.timeout_s, options.min_repeat_ms, options.repeat)
    task_ids = plan.ids_by_workload
    return QueueBuilder(), TaskQueueRunner(lambda wk: QueueRunner(
        store.conn, task_ids[wk], plan.target, timeout_s=options.timeout_s,
        cancelled=lambda: store.cancel_requested(job_id), job_id=job_id,
        min_repeat_ms=options.min_repeat_ms, repeat=options.repeat))


def preload_measured(measured: Mapping[str, Measured]) -> Callable[[Any], None]:
    """Init-search callback marking the recorded ``(MeasureInput, MeasureResult)`` of the policy's
    task as measured (``{workload_key: records}``)."""
    def callback(policy: Any) -> None:
        for inp, res in measured.get(str(policy.task.workload_key), ()):
            policy.add_measured(inp.state, res.cost)
    return callback


def load_measured(store: RedisStore, plan: JobPlan) -> dict[str, Measured]:
    """Every recorded measurement of the plan's tasks, ``{workload_key: [(input, result)]}``."""
    return {str(t.workload_key): store.load_measured(str(t.workload_key), plan.target,
                                                     {str(t.workload_key): t.compute_dag})
            for t in plan.tasks}


def trained_cost_model(measured: Mapping[str, Measured], seed: int) -> LGBMModel:
    """An LGBMModel (seeded ``seed``) trained on every recorded measurement of the job's tasks: the
    one cost model its policies share, as Ansor's task scheduler shares its XGBModel."""
    model = LGBMModel(seed=seed)
    inputs = [inp for records in measured.values() for inp, _ in records]
    if inputs:
        model.update(inputs, [res for records in measured.values() for _, res in records])
    return model


def save_cost_model(store: RedisStore, model: Any, plan: JobPlan) -> None:
    """The job's cost model (``model.save``'s JSON) as the snapshot of each of its tasks."""
    with tempfile.TemporaryDirectory(prefix="autosched_model_") as tmp:
        path = os.path.join(tmp, "model.json")
        model.save(path)
        with open(path, "rb") as f:
            data = f.read()
    for task in plan.tasks:
        store.save_model(str(task.workload_key), plan.target, data)


__all__ = ["JobPlan", "TaskQueueRunner", "make_measurer", "preload_measured", "load_measured", "trained_cost_model",
           "save_cost_model"]
