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
import time
from typing import Any

from cost_model import LGBMModel
from scheduler_core.base.errors import BuildError, SchedulerCoreError
from scheduler_core.driver.program import ENTRY_NAME
from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.search.search_policy import SketchPolicy
from scheduler_core.search.search_task import SearchTask
from scheduler_core.search.tuning_options import TuningOptions
from sketch_rules import SketchPolicyParams

from .best import best_program
from .job_logs import job_logging, one_line
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


class PhaseReporter:
    """``SketchPolicy.on_phase`` of a job: each new phase goes to the job hash (``phase``,
    ``phase_since`` in float seconds, one HSET) and to the log; a repeated phase is ignored.
    ``reporter("")`` clears it (the job ended)."""

    def __init__(self, store: Any, job_id: str):
        self.store, self.job_id, self.phase = store, job_id, None

    def __call__(self, phase: str) -> None:
        if phase == self.phase:
            return
        self.phase = phase
        self.store.update_job(self.job_id, phase=phase, phase_since=repr(time.time()) if phase else "")
        if phase:
            log.info("phase: %s", phase)


class BatchLog:
    """Measure callback ``(policy, inputs, results)`` logging each batch: at INFO the number measured,
    errors and the best so far (``best_cost_s``: the job's best before this run, seconds, or None);
    at WARNING, when some failed, the errors by kind and the first error message."""

    def __init__(self, flop_ct: float, best_cost_s: float | None = None):
        self.flop_ct, self.best, self.measured = float(flop_ct), best_cost_s, 0

    def __call__(self, policy: Any, inputs: list, results: list) -> None:
        errors: dict[str, int] = {}
        first = ""
        for res in results:
            if res.cost is None:
                name = MeasureErrorNo(res.error_no).name
                errors[name] = errors.get(name, 0) + 1
                first = first or one_line(res.error_msg, 200)
            elif self.best is None or res.cost < self.best:
                self.best = res.cost
        self.measured += len(results)
        n_err = sum(errors.values())
        task = getattr(policy, "task", None)
        name = getattr(getattr(task, "compute_dag", None), "name", "") or ""
        where = f" of {name}" if name else ""
        if self.best is None:
            log.info("batch%s measured: %d programs, %d errors, no successful measurement yet (%d this run)",
                     where, len(results), n_err, self.measured)
        else:
            gflops = self.flop_ct / self.best / 1e9 if self.flop_ct else 0.0
            log.info("batch%s measured: %d programs, %d errors, best %.4g ms (%.2f GFLOP/s) (%d this run)",
                     where, len(results), n_err, self.best * 1e3, gflops, self.measured)
        if n_err:
            kinds = ", ".join(f"{k} x{v}" for k, v in sorted(errors.items()))
            log.warning("%d of %d measurements failed: %s; first: %s", n_err, len(results), kinds,
                        first or "(no message)")


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
    num_iters, measure ("local" or "queue"), verbose (the search logs instead of printing).

    Returns ``{"state", "trials_done", "best_cost_s"}``.  The job hash ends
    ``finished``, ``cancelled`` or ``failed`` with a one-line ``error`` (the traceback
    goes to the worker's log only).  A deterministic failure (DETERMINISTIC_ERRORS: an
    invalid task, a schedule that cannot be built, no measurement worker on the device
    queue) ends the job; anything else re-raises so that RQ retries it, and the retry
    continues from the records.  While it runs, the hash's ``phase`` / ``phase_since`` follow
    the search (:class:`PhaseReporter`) and its log records go to ``keys.job_log(job_id)``
    (workers.job_logs) besides the worker's log file.
    """
    store = RedisStore(current_connection())
    job = store.get_job(job_id)
    if job is None:
        raise KeyError(f"unknown job {job_id!r}")
    with job_logging(store.conn, job_id):
        return _run_tune_job(store, task_id, job_id, int(num_measure_trials), job)


def _summary(store: RedisStore, job_id: str, state: JobState) -> dict:
    job = store.get_job(job_id) or {}
    return {"state": state.value, "trials_done": job.get("trials_done", 0), "best_cost_s": job.get("best_cost_s")}


def end_job(store: Any, job_id: str, state: JobState, error: str = "") -> dict:
    """Clear the job's phase, set its ended ``state`` (with ``error``), log the end; the summary."""
    store.update_job(job_id, phase="", phase_since="")
    store.set_job_state(job_id, state, error)
    summary = _summary(store, job_id, state)
    best = summary["best_cost_s"]
    log.info("job %s ended %s: %d trials, best %s", job_id, state.value, summary["trials_done"],
             "none" if best is None else f"{best * 1e3:.4g} ms")
    return summary


def begin_job(store: Any, job_id: str, subject: str, trials: int, job: dict) -> PhaseReporter | None:
    """Start a tune or model job: log its start (and a resumption), clear its phase, mark it
    running; its PhaseReporter.  None when it was cancelled before it started (not marked)."""
    if job["cancel"]:
        log.info("job %s cancelled before it started", job_id)
        return None
    log.info("job %s started: %s, %d trials (%d done before)", job_id, subject, trials, job["trials_done"])
    if job["trials_done"]:
        log.warning("job %s resumed after an interruption: %d of %d trials already measured", job_id,
                    job["trials_done"], trials)
    store.update_job(job_id, phase="", phase_since="")
    store.set_job_state(job_id, JobState.running)
    return PhaseReporter(store, job_id)


def _run_tune_job(store: RedisStore, task_id: str, job_id: str, trials: int, job: dict) -> dict:
    phase = begin_job(store, job_id, f"task {task_id}", trials, job)
    if phase is None:
        return end_job(store, job_id, JobState.cancelled)
    try:
        meta = store.get_task(task_id)
        if meta is None:
            raise UnknownTaskError(f"unknown task {task_id!r}")
        state = _search(store, meta, job_id, trials, phase)
        phase("saving")
        finalize_task(store, meta)
    except BaseException as err:
        error = one_line_error(err)
        if isinstance(err, DETERMINISTIC_ERRORS):
            log.error("job %s failed: %s", job_id, error, exc_info=err)
            return end_job(store, job_id, JobState.failed, error)
        log.error("job %s failed: %s; RQ retries it when retries are left (it continues from its records)",
                  job_id, error, exc_info=err)
        store.update_job(job_id, phase="", phase_since="")
        store.set_job_state(job_id, JobState.failed, error)
        raise
    return end_job(store, job_id, state)


def _search(store: RedisStore, meta: dict, job_id: str, trials: int, on_phase: Any = None) -> JobState:
    """Run the search; JobState.finished or JobState.cancelled.  ``on_phase``: SketchPolicy.on_phase."""
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
        log.info("no trials left to measure (%d of %d done)", trials - remaining, trials)
        return JobState.finished
    log.info("search on %s: %d trials to measure, %d per round, %d states recorded before, measure=%s",
             target, remaining, options.num_measures_per_round, len(measured), options.measure)
    model = LGBMModel(seed=options.seed)
    if measured:
        model.update([m[0] for m in measured], [m[1] for m in measured])
    params = SketchPolicyParams(population=options.population, num_iters=options.num_iters)
    policy = SketchPolicy(task, model, params=params, seed=options.seed + len(measured),
                          verbose=0, init_search_callbacks=[preload_measured(measured)])
    policy.on_phase = on_phase
    if options.measure == "queue":  # measurement workers attached to the device's queue
        builder: Any = QueueBuilder()
        runner: Any = QueueRunner(store.conn, meta["task_id"], target, timeout_s=options.timeout_s,
                                  cancelled=lambda: store.cancel_requested(job_id), job_id=job_id,
                                  min_repeat_ms=options.min_repeat_ms, repeat=options.repeat)
    else:
        builder = LocalBuilder(timeout_s=options.timeout_s)
        runner = LocalRunner(timeout_s=options.timeout_s, min_repeat_ms=options.min_repeat_ms,
                             repeat=options.repeat)
    # verbose 0: the search's progress lines would go to the worker's stdout; BatchLog logs them
    run_options = TuningOptions.from_json({**options.to_json(), "num_measure_trials": remaining, "verbose": 0},
                                          builder=builder, runner=runner,
                                          measure_callbacks=[BatchLog(dag.flop_ct, best[0] if best else None),
                                                             RedisRecordSink(store, task, job_id)])
    try:
        policy.tune(run_options)
        return JobState.finished
    except JobCancelled:
        log.info("cancel requested: the search stopped after its current batch")
        return JobState.cancelled
    finally:
        builder.close()
        runner.close()
        if on_phase is not None:
            on_phase("saving")
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
        log.warning("task %s: no successful measurement, so no artifact", meta["task_id"])
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
        log.info("artifacts of task %s written (cuda: cu, json, ptx, cubin when nvcc is there)", task_id)
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
    log.info("artifacts of task %s written: %s (best %.4g ms)", task_id, ", ".join(ARTIFACT_FORMATS),
             program_cost_ms(store, meta))


def program_cost_ms(store: RedisStore, meta: dict) -> float:
    """The task's best measured latency in milliseconds (nan when it has none)."""
    best = store.best_record(meta["workload_key"], meta["target"])
    return float("nan") if best is None else best[0] * 1e3
