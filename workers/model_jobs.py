"""The RQ job of a whole model: the one job pipeline of :mod:`workers.jobs` over all its tasks
(Ansor, section 6).

    model_tune_job(model_id, job_id, trials)
      Redis: model hash, graph --> extract_tasks(graph, target): one SearchTask per workload_key,
             weight = its calls --> JobPlan(tasks, weights, the model's task ids)
      --> workers.jobs.run_job / search_job: one LGBMModel shared by the tasks' policies, trained on
          every recorded measurement; TaskScheduler(tasks, weights, "gradient"); per batch, in one
          MULTI/EXEC, the task's new records + best index, the job's trials_done / errors and
          ``trials_done:<task_id>``; the job's ``best_cost_s``: the model's weighted latency once
          every task has one (RedisRecordSink)
      --> finalize_model: per task, the task's own artifacts (as a task job); the whole-model .tar.gz

A retried or requeued job (its worker killed) measures only ``trials - trials_done`` more and
never a state already recorded; every finished batch is in Redis, so nothing is lost.
"""

from __future__ import annotations

import logging

from scheduler_core.graph.ir import Graph
from scheduler_core.graph.tasks import extract_tasks
from scheduler_core.measure.record_file import decode_record

from .job_plan import JobPlan
from .jobs import UnknownSubjectError, finalize_task, run_job
from .model_artifact import EntrySchedule, build_model_artifact
from .model_store import ModelStore
from .records import ModelRecord
from .redis_conn import current_connection

log = logging.getLogger(__name__)


class UnknownModelError(UnknownSubjectError):
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

    def plan() -> JobPlan:
        meta = store.get_model(model_id)
        if meta is None:
            raise UnknownModelError(f"unknown model {model_id!r}")
        return model_plan(meta, store.load_graph(model_id))

    def finalize(_: JobPlan) -> None:
        meta = store.get_model(model_id)
        if meta is None:
            raise UnknownModelError(f"unknown model {model_id!r}")
        finalize_model(store, meta, store.load_graph(model_id))

    return run_job(store, job_id, f"model {model_id}", int(num_measure_trials), plan, finalize)


def model_plan(meta: ModelRecord, graph: Graph) -> JobPlan:
    """The JobPlan of a model hash (``ModelStore.get_model``) and its graph: the graph's tasks
    (``extract_tasks``) with their weights and stored task ids.  Raises UnknownModelError when
    the graph's tasks are not the stored ones."""
    tasks, weights = extract_tasks(graph, meta.target)
    ids = {t.workload_key: t.task_id for t in meta.tasks}
    if {t.workload_key for t in tasks} != set(ids):
        raise UnknownModelError(f"model {meta.model_id!r}: its graph's tasks differ from the stored tasks")
    return JobPlan(tuple(tasks), tuple(int(w) for w in weights), tuple(ids[t.workload_key] for t in tasks),
                   meta.target, meta.tuning, per_task_trials=True)


def model_entries(store: ModelStore, meta: ModelRecord) -> list[EntrySchedule]:
    """One EntrySchedule per task of the model: its best record's State, else None (the
    artifact builds the default schedule, ``graph.build.default_state``)."""
    entries = []
    for t in meta.tasks:
        best = store.best_record(t.workload_key, meta.target)
        if best is None:
            entries.append(EntrySchedule(t.task_id, t.workload_key, t.functions, None))
            continue
        inp, _ = decode_record(best[1], {t.workload_key: store.load_dag(t.workload_key)})
        entries.append(EntrySchedule(t.task_id, t.workload_key, t.functions, inp.state, best[0]))
    return entries


def finalize_model(store: ModelStore, meta: ModelRecord, graph: Graph) -> None:
    """Each task's own artifacts (``finalize_task``) and the whole-model .tar.gz with the stored
    weights."""
    for t in meta.tasks:
        finalize_task(store, t.task_id, t.workload_key, meta.target)
    data = build_model_artifact(graph, meta.target, model_entries(store, meta), store.load_params(meta.model_id))
    store.save_model_artifact(meta.model_id, data)
    log.info("model artifact of %s written (%d bytes)", meta.model_id, len(data))
