"""The RQ job of a whole model: one TaskScheduler over all its tasks (Ansor, section 6).

    model_tune_job(model_id, job_id, trials)
      Redis: model hash, graph, every task's records
        --> extract_tasks(graph, target): one SearchTask per workload_key, weight = its calls
        --> one LGBMModel shared by the tasks' policies (as Ansor's task scheduler), trained on
            every recorded measurement; every recorded state marked measured (PreloadMeasuredStates)
      --> TaskScheduler(tasks, weights, "gradient").tune(remaining trials, [ModelRecordSink])
      --> per batch, in one MULTI/EXEC: the task's new records + best index (the same store
          calls as a task job), the job's trials_done / errors and ``trials_done:<task_id>``;
          then the job's ``best_cost_s``: the model's weighted latency once every task has one
      --> per task: the task's own artifacts (as a task job); the whole-model .tar.gz

A retried or requeued job (its worker killed) measures only ``trials - trials_done`` more and
never a state already recorded; every finished batch is in Redis, so nothing is lost.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from typing import Any

from cost_model import LGBMModel
from scheduler_core.graph.ir import Graph
from scheduler_core.graph.tasks import extract_tasks
from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.measure.record import decode_record, encode_dag_line, encode_record
from scheduler_core.schedule.loop_state import State
from scheduler_core.search.task_scheduler import TaskScheduler
from scheduler_core.search.tuning_options import TuningOptions

from .job_logs import job_logging
from .job_state import JobState
from .jobs import DETERMINISTIC_ERRORS, BatchLog, begin_job, end_job, finalize_task, one_line_error
from .measure_queue import QueueBuilder, QueueRunner
from .model_artifact import EntrySchedule, build_model_artifact
from .model_store import ModelStore
from .redis_conn import current_connection
from .store import JobCancelled

log = logging.getLogger(__name__)


class UnknownModelError(LookupError):
    """The job names a model that is not in Redis (or its graph no longer matches its tasks)."""


def model_tune_job(model_id: str, job_id: str, num_measure_trials: int) -> dict:
    """Tune every task of a stored model for ``num_measure_trials`` trials in all.

    Parameters
    ----------
    model_id : str, a model created by ModelStore.create_model_with_job
    job_id : str, the job created with it
    num_measure_trials : int, measurements this job makes over all tasks in all runs
        (a retry subtracts what the job already recorded)

    The model's ``tuning`` is a TuningOptions (JSON): per round, seed, timeout_s,
    min_repeat_ms, repeat, population, num_iters, measure ("local": on this worker; "queue":
    by the measurement workers of the target's queue, each batch as one of its task's), verbose (the job
    logs instead: its records go to ``keys.job_log(job_id)`` and the worker's log file).  Returns ``{"state",
    "trials_done", "best_cost_s"}`` (best_cost_s: the model's weighted latency in seconds).
    The job ends ``finished``, ``cancelled`` or ``failed`` with a one-line error; a
    deterministic failure ends the job, anything else re-raises so that RQ retries it.
    """
    store = ModelStore(current_connection())
    job = store.get_job(job_id)
    if job is None:
        raise KeyError(f"unknown job {job_id!r}")
    with job_logging(store.conn, job_id):
        return _run_model_job(store, model_id, job_id, int(num_measure_trials), job)


def _run_model_job(store: ModelStore, model_id: str, job_id: str, trials: int, job: dict) -> dict:
    phase = begin_job(store, job_id, f"model {model_id}", trials, job)
    if phase is None:
        return end_job(store, job_id, JobState.cancelled)
    try:
        meta = store.get_model(model_id)
        if meta is None:
            raise UnknownModelError(f"unknown model {model_id!r}")
        graph = store.load_graph(model_id)
        state = _search(store, meta, graph, job_id, trials, phase)
        phase("saving")
        finalize_model(store, meta, graph)
    except BaseException as err:
        error = one_line_error(err)
        if isinstance(err, (*DETERMINISTIC_ERRORS, UnknownModelError)):
            log.error("job %s failed: %s", job_id, error, exc_info=err)
            return end_job(store, job_id, JobState.failed, error)
        log.error("job %s failed: %s; RQ retries it when retries are left (it continues from its records)",
                  job_id, error, exc_info=err)
        store.update_job(job_id, phase="", phase_since="")
        store.set_job_state(job_id, JobState.failed, error)
        raise
    return end_job(store, job_id, state)


class ModelBatchLog:
    """Measure callback of a model job: :class:`workers.jobs.BatchLog` per task (the best so far
    is that task's)."""

    def __init__(self) -> None:
        self.logs: dict[str, BatchLog] = {}

    def __call__(self, policy: Any, inputs: list, results: list) -> None:
        task = policy.task
        if task.workload_key not in self.logs:
            self.logs[task.workload_key] = BatchLog(task.compute_dag.flop_ct)
        self.logs[task.workload_key](policy, inputs, results)


class ModelRecordSink:
    """Measure callback ``(policy, inputs, results)`` of a model job: writes each batch to Redis.

    The batch belongs to ``policy.task`` (a TaskScheduler measures one task per batch).  One
    MULTI/EXEC per batch: the records whose state is new for that task's workload+target and
    its best index (``RedisStore.append_new_records``, as a task job), the job's trials_done
    and error counts, and ``trials_done:<task_id>``.  Then the job's ``best_cost_s`` and
    ``best_gflops`` become the model's weighted latency (seconds) and speed once every task has
    a best.  Raises JobCancelled after writing when a cancel was requested.

    store : ModelStore; job_id : the model job; meta : the model hash (``get_model``)
    """

    def __init__(self, store: ModelStore, job_id: str, meta: dict):
        self.store, self.job_id, self.meta = store, job_id, meta
        self.task_ids = {t["workload_key"]: t["task_id"] for t in meta["tasks"]}
        self._indexed: set = set()

    def __call__(self, policy: Any, inputs: list, results: list) -> None:
        wk, target = policy.task.workload_key, self.meta["target"]
        records: list[tuple[str, float | None]] = []
        errors: dict[str, int] = {}
        for inp, res in zip(inputs, results):
            records.append((encode_record(inp, res), res.cost))
            if res.cost is None:
                name = MeasureErrorNo(res.error_no).name
                errors[name] = errors.get(name, 0) + 1
        if records:
            if wk not in self._indexed:
                self.store.index_record_states(wk, target)
                self._indexed.add(wk)
            with self.store.conn.pipeline(transaction=True) as p:
                self.store.append_new_records(wk, target, records, pipeline=p)
                self.store.add_job_progress(self.job_id, len(records), errors, None, 0.0, pipeline=p)
                self.store.add_task_trials(self.job_id, self.task_ids[wk], len(records), pipeline=p)
                p.execute()
            update_model_best(self.store, self.meta, self.job_id)
        if self.store.cancel_requested(self.job_id):
            raise JobCancelled(self.job_id)


def update_model_best(store: ModelStore, meta: dict, job_id: str) -> float | None:
    """Set the job's best_cost_s / best_gflops to the model's weighted latency once every task
    has a best; returns that latency in seconds (None before)."""
    tasks, total = store.describe_tasks(meta, job_id)
    if total is None or total <= 0:
        return None
    flop = sum(t["weight"] * t["flop_ct"] for t in tasks)
    store.update_job(job_id, best_cost_s=repr(total), best_gflops=repr(flop / total / 1e9))
    return total


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


def _search(store: ModelStore, meta: dict, graph: Graph, job_id: str, trials: int,
            on_phase: Any = None) -> JobState:
    """Run the task scheduler; JobState.finished or JobState.cancelled."""
    options = TuningOptions.from_json(meta["tuning"])
    target = meta["target"]
    tasks, weights = extract_tasks(graph, target)
    stored = {t["workload_key"] for t in meta["tasks"]}
    if {t.workload_key for t in tasks} != stored:
        raise UnknownModelError(f"model {meta['model_id']!r}: its graph's tasks differ from the stored tasks")
    update_model_best(store, meta, job_id)
    remaining = trials - (store.get_job(job_id) or {}).get("trials_done", 0)
    if remaining <= 0:
        log.info("no trials left to measure (%d of %d done)", trials - remaining, trials)
        return JobState.finished
    log.info("model on %s: %d tasks, %d trials to measure, measure=%s", target, len(tasks), remaining,
             options.measure)
    model = LGBMModel(seed=options.seed)
    builder: Any
    runner: Any
    if options.measure == "queue":  # measurement workers attached to the device's queue, per task
        task_ids = {t["workload_key"]: t["task_id"] for t in meta["tasks"]}
        builder = QueueBuilder()
        runner = TaskQueueRunner(lambda wk: QueueRunner(
            store.conn, task_ids[wk], target, timeout_s=options.timeout_s,
            cancelled=lambda: store.cancel_requested(job_id), job_id=job_id,
            min_repeat_ms=options.min_repeat_ms, repeat=options.repeat))
    else:
        builder = LocalBuilder(timeout_s=options.timeout_s)
        runner = LocalRunner(timeout_s=options.timeout_s, min_repeat_ms=options.min_repeat_ms,
                             repeat=options.repeat)
    # verbose 0: the scheduler's progress table would go to the worker's stdout; ModelBatchLog logs
    run_options = TuningOptions.from_json({**options.to_json(), "num_measure_trials": remaining, "verbose": 0},
                                          builder=builder, runner=runner,
                                          measure_callbacks=[ModelBatchLog(), ModelRecordSink(store, job_id, meta)])
    with tempfile.TemporaryDirectory(prefix="autosched_model_job_") as tmp:
        log_file, n_measured = _write_records(store, tasks, target, model, os.path.join(tmp, "records.jsonl"))
        scheduler = TaskScheduler(tasks, weights, strategy="gradient", seed=options.seed + n_measured,
                                  load_log_file=log_file if n_measured else None)
        try:
            # one cost model for every task, as Ansor's task scheduler shares its XGBModel
            scheduler.tune(run_options, cost_model_factory=lambda: model, on_phase=on_phase)
            return JobState.finished
        except JobCancelled:
            log.info("cancel requested: the search stopped after its current batch")
            return JobState.cancelled
        finally:
            builder.close()
            runner.close()


def _write_records(store: ModelStore, tasks: list, target: str, model: Any, path: str) -> tuple[str, int]:
    """Write every task's records (with its DAG line) to ``path`` for PreloadMeasuredStates and
    train ``model`` on them; ``(path, number of records)``."""
    inputs: list = []
    results: list = []
    with open(path, "w") as f:
        for t in tasks:
            wk = t.workload_key
            f.write(encode_dag_line(wk, t.compute_dag) + "\n")
            for line in store.iter_records(wk, target):
                f.write(line + "\n")
            for inp, res in store.load_measured(wk, target, {wk: t.compute_dag}):
                inputs.append(inp)
                results.append(res)
    if inputs:
        model.update(inputs, results)
    return path, len(inputs)


def model_entries(store: ModelStore, meta: dict) -> list[EntrySchedule]:
    """One EntrySchedule per task of the model: its best record's State, else the naive
    schedule of its DAG (``State.from_dag``: the loops as written)."""
    entries = []
    for t in meta["tasks"]:
        wk = t["workload_key"]
        dag = store.load_dag(wk)
        best = store.best_record(wk, meta["target"])
        if best is None:
            entries.append(EntrySchedule(t["task_id"], wk, tuple(t["functions"]), State.from_dag(dag), False))
            continue
        inp, _ = decode_record(best[1], {wk: dag})
        entries.append(EntrySchedule(t["task_id"], wk, tuple(t["functions"]), inp.state, True, best[0]))
    return entries


def finalize_model(store: ModelStore, meta: dict, graph: Graph) -> None:
    """Each task's own artifacts (``finalize_task``) and the whole-model .tar.gz."""
    for t in meta["tasks"]:
        task = store.get_task(t["task_id"])
        if task is not None:
            finalize_task(store, task)
    data = build_model_artifact(graph, meta["target"], model_entries(store, meta))
    store.save_model_artifact(meta["model_id"], data)
    log.info("model artifact of %s written (%d bytes)", meta["model_id"], len(data))
