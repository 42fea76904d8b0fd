"""RQ job functions (plain importable functions; arguments are ids and numbers).

    tune_job(task_id, job_id, trials)
      Redis: task hash, DAG, records --> SearchTask, LGBMModel.update(records),
             SketchPolicy with every recorded state marked measured
      --> SketchPolicy.tune(TuningOptions(remaining trials, [RedisRecordSink]))
      --> records, best index, job progress in Redis (after every batch)
      --> best record --apply_layout_rewrite + build--> artifacts (so, o, ll, asm, h)
          and the cost-model snapshot

A retried or re-enqueued job (a worker killed mid-search, RQ's Retry) starts
over from Redis: it measures only ``trials - trials_done`` more states and
never a state already recorded for this workload and target.
"""

from __future__ import annotations

import logging
import os
import tempfile
import traceback
from typing import Any

from cost_model import LGBMModel
from scheduler_core.base.errors import BuildError, SchedulerCoreError
from scheduler_core.driver.program import ENTRY_NAME
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.search.search_policy import SketchPolicy
from scheduler_core.search.search_task import SearchTask
from scheduler_core.search.tuning_options import TuningOptions
from sketch_rules import SketchPolicyParams

from .best import best_program
from .job_state import JobState
from .measure_queue import NoMeasurementWorker, QueueBuilder, QueueRunner
from .redis_conn import current_connection
from .store import JobCancelled, RedisRecordSink, RedisStore

log = logging.getLogger(__name__)

ARTIFACT_FORMATS = ("so", "h", "o", "ll", "asm")


class UnknownTaskError(LookupError):
    """The job names a task that is not in Redis."""


# failures that a retry would repeat: the job ends failed instead of going back to RQ
DETERMINISTIC_ERRORS = (SchedulerCoreError, UnknownTaskError, NoMeasurementWorker)


def one_line_error(err: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, at most ``limit`` characters, for clients to read."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def preload_measured(measured: list):
    """Init-search callback marking every ``(MeasureInput, MeasureResult)`` as measured."""
    def callback(policy) -> None:
        for inp, res in measured:
            policy.add_measured(inp.state, res.cost)
    return callback


def tune_job(task_id: str, job_id: str, num_measure_trials: int) -> dict:
    """Search a stored task for ``num_measure_trials`` trials in total for this job.

    Parameters
    ----------
    task_id : str, a task created by RedisStore.create_task
    job_id : str, a job created by RedisStore.create_job
    num_measure_trials : int, measurements this job makes in all runs (retries
        subtract what the job already recorded)

    The task's ``tuning`` is a TuningOptions (its JSON form): per round, early stopping,
    seed, timeout_s (seconds per build and per run), min_repeat_ms, population,
    num_iters, measure ("local" or "queue"), verbose.

    Returns ``{"state", "trials_done", "best_cost_s"}``.  The job hash ends
    ``finished``, ``cancelled`` or ``failed`` with a one-line ``error`` (the traceback
    goes to the worker's log only).  A deterministic failure (DETERMINISTIC_ERRORS: an
    invalid task, a schedule that cannot be built, no measurement worker on the device
    queue) ends the job; anything else re-raises so that RQ retries it, and the retry
    continues from the records.
    """
    store = RedisStore(current_connection())
    job = store.get_job(job_id)
    if job is None:
        raise KeyError(f"unknown job {job_id!r}")
    if job["cancel"]:
        store.set_job_state(job_id, JobState.cancelled)
        return {"state": JobState.cancelled.value, "trials_done": job["trials_done"], "best_cost_s": job["best_cost_s"]}
    store.set_job_state(job_id, JobState.running)
    try:
        meta = store.get_task(task_id)
        if meta is None:
            raise UnknownTaskError(f"unknown task {task_id!r}")
        state = _search(store, meta, job_id, int(num_measure_trials))
        finalize_task(store, meta)
    except BaseException as err:
        traceback.print_exc()  # the worker's log keeps the detail; the job hash gets one line
        store.set_job_state(job_id, JobState.failed, one_line_error(err))
        if isinstance(err, DETERMINISTIC_ERRORS):
            return {"state": JobState.failed.value, "trials_done": store.get_job(job_id)["trials_done"],
                    "best_cost_s": store.get_job(job_id)["best_cost_s"]}
        raise
    store.set_job_state(job_id, state)
    job = store.get_job(job_id)
    return {"state": state.value, "trials_done": job["trials_done"], "best_cost_s": job["best_cost_s"]}


def _search(store: RedisStore, meta: dict, job_id: str, trials: int) -> JobState:
    """Run the search; JobState.finished or JobState.cancelled."""
    options = TuningOptions.from_json(meta["tuning"])
    task_data = store.load_task(meta)
    wk, target, dag = task_data.workload_key, str(task_data.target), task_data.compute_dag
    task = SearchTask(compute_dag=dag, workload_key=wk, target=task_data.target)
    measured = store.load_measured(wk, target, {wk: dag})
    best = store.best_record(wk, target)
    if best is not None and store.get_job(job_id)["best_cost_s"] is None:
        store.update_job(job_id, best_cost_s=repr(best[0]), best_gflops=repr(dag.flop_ct / best[0] / 1e9))
    remaining = trials - store.get_job(job_id)["trials_done"]
    if remaining <= 0:
        return JobState.finished
    model = LGBMModel(seed=options.seed)
    if measured:
        model.update([m[0] for m in measured], [m[1] for m in measured])
    params = SketchPolicyParams(population=options.population, num_iters=options.num_iters)
    policy = SketchPolicy(task, model, params=params, seed=options.seed + len(measured),
                          verbose=options.verbose, init_search_callbacks=[preload_measured(measured)])
    if options.measure == "queue":  # measurement workers attached to the device's queue
        builder: Any = QueueBuilder()
        runner: Any = QueueRunner(store.conn, meta["task_id"], target, timeout_s=options.timeout_s,
                                  cancelled=lambda: store.cancel_requested(job_id), job_id=job_id,
                                  min_repeat_ms=options.min_repeat_ms, repeat=options.repeat)
    else:
        builder = LocalBuilder(timeout_s=options.timeout_s)
        runner = LocalRunner(timeout_s=options.timeout_s, min_repeat_ms=options.min_repeat_ms,
                             repeat=options.repeat)
    run_options = TuningOptions.from_json({**options.to_json(), "num_measure_trials": remaining},
                                          builder=builder, runner=runner,
                                          measure_callbacks=[RedisRecordSink(store, task, job_id)])
    try:
        policy.tune(run_options)
        return JobState.finished
    except JobCancelled:
        return JobState.cancelled
    finally:
        builder.close()
        runner.close()
        _save_model(store, model, wk, target)


def _save_model(store: RedisStore, model: Any, wk: str, target: str) -> None:
    with tempfile.TemporaryDirectory(prefix="autosched_model_") as tmp:
        path = os.path.join(tmp, "model.json")
        model.save(path)
        with open(path, "rb") as f:
            store.save_model(wk, target, f.read())


def finalize_task(store: RedisStore, meta: dict) -> None:
    """Store the best program's artifacts under the task: so, h, o, ll, asm for a CPU target;
    cu, ptx, cubin, json (the launch description) for cuda."""
    program = best_program(store, meta["workload_key"], meta["target"])
    if program is None:
        return
    module = program.build()
    task_id = meta["task_id"]
    if module.type_key == "cuda_host":  # a cuda program: CUDA C, PTX, cubin, launch description
        device = module.imported_modules[0]
        store.save_artifact(task_id, "cu", device.get_source().encode())
        store.save_artifact(task_id, "json", device.launch_json().encode())
        for fmt, make in (("ptx", device.ptx), ("cubin", device.cubin)):
            try:
                store.save_artifact(task_id, fmt, make())
            except BuildError as err:  # no nvcc on this worker: the source and launch JSON still serve
                log.warning("task %s: no %s artifact: %s", task_id, fmt, err)
        return
    with tempfile.TemporaryDirectory(prefix="autosched_artifact_") as tmp:
        so = os.path.join(tmp, f"{ENTRY_NAME}.so")
        header = module.export_library(so)
        with open(so, "rb") as f:
            store.save_artifact(task_id, "so", f.read())
        with open(header, "rb") as f:
            store.save_artifact(task_id, "h", f.read())
    store.save_artifact(task_id, "o", module.object_code())
    store.save_artifact(task_id, "ll", module.get_source("ll").encode())
    store.save_artifact(task_id, "asm", module.get_source("asm").encode())
