"""RQ job functions (plain importable functions; arguments are ids and numbers) and the one job
pipeline they share: a task job is a model job with one task of weight 1.

    tune_job(task_id, job_id, trials)           JobPlan.of_task: one task, weight 1
    model_tune_job(model_id, job_id, trials)    (workers.model_jobs) the model's tasks and weights
      --run_job: one lifecycle (begin, PhaseReporter, end; a deterministic failure ends the job,
        anything else re-raises for RQ's retry)
      --search_job: Redis records --> one LGBMModel, every recorded state marked measured
        --> TaskScheduler(tasks, weights).tune(remaining trials, [TaskBatchLog, RedisRecordSink])
            (one task: its SketchPolicy with early stopping)
        --> records, best index, job progress in Redis (after every batch)
      --> finalize: the best record of each task --apply_layout_rewrite + build--> artifacts
          (so, o, ll, asm, h; cuda: cu, ptx, cubin, json); a model's .tar.gz; a task job's
          numpy (and torch) baseline and the machine's estimated peak (workers.baselines)

A retried or re-enqueued job (a worker killed mid-search, RQ's Retry) starts
over from Redis: it measures only ``trials - trials_done`` more states and
never a state already recorded for this workload and target.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rq import get_current_job

from scheduler_core.base.errors import BuildError, SchedulerCoreError
from scheduler_core.driver.program import ENTRY_NAME
from scheduler_core.runtime.cuda_module import CudaModule
from scheduler_core.search.search_task import SearchTask
from scheduler_core.search.task_scheduler import TaskScheduler
from scheduler_core.search.tuning_options import TuningOptions

from .baselines import record_job_baselines
from .best import best_program
from .job_logs import job_logging, one_line
from .job_plan import JobPlan, load_measured, make_measurer, preload_measured, save_cost_model, trained_cost_model
from .job_state import JobState
from .measure_queue import NoMeasurementWorker
from .record_sink import RedisRecordSink, error_counts
from .records import JobRecord
from .redis_conn import current_connection
from .store import JobCancelled, RedisStore

log = logging.getLogger(__name__)

ARTIFACT_FORMATS = ("so", "h", "o", "ll", "asm")


class UnknownSubjectError(LookupError):
    """The job names a task or model that is not in Redis (a retry would not find it either)."""


class UnknownTaskError(UnknownSubjectError):
    """The job names a task that is not in Redis."""


# failures that a retry would repeat: the job ends failed instead of going back to RQ
# failures that a re-run would repeat: the job ends failed, RQ does not retry it.  RecursionError:
# an input too deep for a recursive walk fails the same way every time.
DETERMINISTIC_ERRORS = (SchedulerCoreError, UnknownSubjectError, NoMeasurementWorker, RecursionError)


def one_line_error(err: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, at most ``limit`` characters, for clients to read."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# the phases of the search (SketchPolicy.enter_phase) where a cancel request is checked: before
# sketches, before sampling, before each evolution generation (one HGET each); building and
# measuring stop at the end of the chunk being measured (RedisRecordSink), which is kept
SEARCH_PHASES = ("sketches", "initial population", "evolution")


class PhaseReporter:
    """``SketchPolicy.on_phase`` of a job: each new phase goes to the job hash (``phase``,
    ``phase_since`` in float seconds, one HSET) and to the log; a repeated phase is ignored.
    ``reporter("")`` clears it (the job ended)."""

    def __init__(self, store: RedisStore, job_id: str):
        self.store, self.job_id = store, job_id
        self.phase: str | None = None

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
        errors = error_counts(results)
        first = next((one_line(res.error_msg, 200) for res in results if res.cost is None), "")
        for res in results:
            if res.cost is not None and (self.best is None or res.cost < self.best):
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


class TaskBatchLog:
    """Measure callback of a job: one :class:`BatchLog` per task (the best so far is that task's,
    starting from its stored best)."""

    def __init__(self, store: RedisStore, target: str) -> None:
        self.store, self.target = store, target
        self.logs: dict[str, BatchLog] = {}

    def __call__(self, policy: Any, inputs: list, results: list) -> None:
        if not inputs:
            return
        task = inputs[0].task
        wk = str(task.workload_key)
        if wk not in self.logs:
            best = self.store.best_record(wk, self.target)
            self.logs[wk] = BatchLog(task.compute_dag.flop_ct, best[0] if best else None)
        self.logs[wk](policy, inputs, results)


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

    def plan() -> JobPlan:
        meta = store.get_task(task_id)
        if meta is None:
            raise UnknownTaskError(f"unknown task {task_id!r}")
        task = store.load_task(meta)
        search_task = SearchTask(compute_dag=task.compute_dag, workload_key=task.workload_key, target=task.target)
        return JobPlan.of_task(search_task, task_id, meta.tuning)

    def finalize(p: JobPlan) -> None:
        finalize_task(store, p.task_ids[0], str(p.tasks[0].workload_key), p.target)
        record_job_baselines(store, job_id, p.tasks[0].compute_dag, p.target)

    return run_job(store, job_id, f"task {task_id}", int(num_measure_trials), plan, finalize)


def run_job(store: RedisStore, job_id: str, subject: str, trials: int, plan: Callable[[], JobPlan],
            finalize: Callable[[JobPlan], None]) -> dict:
    """The one lifecycle of a tune or model job, its log records going to ``keys.job_log(job_id)``.

    ``plan()`` reads what the job searches (UnknownSubjectError when it is gone); :func:`search_job`
    searches it; ``finalize(plan)`` writes the artifacts.  Returns :func:`end_job`'s summary.  A
    DETERMINISTIC_ERRORS failure ends the job ``failed``; anything else marks it failed and
    re-raises, so that RQ retries it (the retry continues from the records).  Raises KeyError
    for an unknown job.
    """
    job = store.get_job(job_id)
    if job is None:
        raise KeyError(f"unknown job {job_id!r}")
    with job_logging(store.conn, job_id):
        phase = begin_job(store, job_id, subject, trials, job)
        if phase is None:
            return end_job(store, job_id, JobState.cancelled)
        try:
            the_plan = plan()
            state = search_job(store, the_plan, job_id, trials, phase)
            phase("saving")
            finalize(the_plan)
        except BaseException as err:
            error = one_line_error(err)
            if isinstance(err, DETERMINISTIC_ERRORS):
                log.error("job %s failed: %s", job_id, error, exc_info=err)
                return end_job(store, job_id, JobState.failed, error)
            store.update_job(job_id, phase="", phase_since="")
            rq_job = get_current_job()
            if rq_job is not None and (rq_job.retries_left or 0) > 0:
                # RQ runs it again: the job waits in its queue (never failed -> running -> failed)
                log.error("job %s stopped: %s; RQ retries it (%d retries left; it continues from its "
                          "records)", job_id, error, rq_job.retries_left, exc_info=err)
                store.set_job_state(job_id, JobState.queued, f"retrying after {error}")
            else:
                log.error("job %s failed: %s", job_id, error, exc_info=err)
                store.set_job_state(job_id, JobState.failed, error)
            raise
        return end_job(store, job_id, state)


def _summary(store: RedisStore, job_id: str, state: JobState) -> dict:
    job = store.get_job(job_id)
    return {"state": state.value, "trials_done": job.trials_done if job else 0,
            "best_cost_s": job.best_cost_s if job else None}


def end_job(store: RedisStore, job_id: str, state: JobState, error: str = "") -> dict:
    """Clear the job's phase, set its ended ``state`` (with ``error``), log the end; the summary."""
    store.update_job(job_id, phase="", phase_since="")
    store.set_job_state(job_id, state, error)
    summary = _summary(store, job_id, state)
    best = summary["best_cost_s"]
    log.info("job %s ended %s: %d trials, best %s", job_id, state.value, summary["trials_done"],
             "none" if best is None else f"{best * 1e3:.4g} ms")
    return summary


def begin_job(store: RedisStore, job_id: str, subject: str, trials: int, job: JobRecord) -> PhaseReporter | None:
    """Start a tune or model job: log its start (and a resumption), clear its phase, mark it
    running; its PhaseReporter.  None when it was cancelled before it started (not marked)."""
    if job.cancel:
        log.info("job %s cancelled before it started", job_id)
        return None
    log.info("job %s started: %s, %d trials (%d done before)", job_id, subject, trials, job.trials_done)
    if job.trials_done:
        log.warning("job %s resumed after an interruption: %d of %d trials already measured", job_id,
                    job.trials_done, trials)
    store.update_job(job_id, phase="", phase_since="")
    store.set_job_state(job_id, JobState.running)
    return PhaseReporter(store, job_id)


def search_job(store: RedisStore, plan: JobPlan, job_id: str, trials: int, on_phase: Any = None) -> JobState:
    """Search the plan's tasks for what is left of ``trials``; JobState.finished or JobState.cancelled.

    ``on_phase``: SketchPolicy.on_phase (the job's PhaseReporter).
    """
    options = TuningOptions.from_json(dict(plan.tuning))
    sink = RedisRecordSink(store, plan.tasks, job_id, plan.weights,
                           plan.ids_by_workload if plan.per_task_trials else None)
    sink.publish_best()  # the tasks' best so far, before this job measures anything
    store.mark_first_trials(job_id, list(plan.task_ids), [str(t.workload_key) for t in plan.tasks], plan.target)
    job = store.get_job(job_id)
    remaining = trials - (job.trials_done if job else 0)
    if remaining <= 0:
        log.info("no trials left to measure (%d of %d done)", trials - remaining, trials)
        return JobState.finished
    measured = load_measured(store, plan)
    n_measured = sum(len(records) for records in measured.values())
    log.info("search on %s: %d task(s), %d trials to measure, %d per round, %d states recorded before, "
             "measure=%s", plan.target, len(plan.tasks), remaining, options.num_measures_per_round, n_measured,
             options.measure)
    model = trained_cost_model(measured, options.seed)
    builder, runner = make_measurer(store, plan, options, job_id)
    # verbose 0: the search's progress lines would go to the worker's stdout; TaskBatchLog logs them.
    # A resumed search does not repeat its random choices: the scheduler's picks and a lone task's
    # policy are reseeded by the states recorded before; a model's policies keep seed + task index.
    seed = options.seed + (n_measured if len(plan.tasks) == 1 else 0)
    run_options = TuningOptions.from_json(
        {**options.to_json(), "num_measure_trials": remaining, "verbose": 0, "seed": seed},
        builder=builder, runner=runner, measure_callbacks=[TaskBatchLog(store, plan.target), sink])
    scheduler = TaskScheduler(plan.tasks, plan.weights, strategy="gradient", seed=options.seed + n_measured)

    def phase_or_cancel(phase: str) -> None:
        """A cancel stops the search between its steps, not only after a measured batch."""
        if phase in SEARCH_PHASES and store.cancel_requested(job_id):
            raise JobCancelled(job_id)
        if on_phase is not None:
            on_phase(phase)
    try:
        # one cost model for every task, as Ansor's task scheduler shares its XGBModel
        scheduler.tune(run_options, cost_model_factory=lambda: model, on_phase=phase_or_cancel,
                       init_search_callbacks=[preload_measured(measured)])
        return JobState.finished
    except JobCancelled:
        log.info("cancel requested: the search stopped; every batch measured before is kept")
        return JobState.cancelled
    finally:
        builder.close()
        runner.close()
        if on_phase is not None:
            on_phase("saving")
        save_cost_model(store, model, plan)


def finalize_task(store: RedisStore, task_id: str, workload_key: str, target: str) -> None:
    """Store the best program's artifacts under the task: so, h, o, ll, asm for a CPU target;
    cu, ptx, cubin, json (the launch description) for cuda."""
    program = best_program(store, workload_key, target)
    if program is None:
        log.warning("task %s: no successful measurement, so no artifact", task_id)
        return
    module = program.build()
    if isinstance(module, CudaModule):  # a cuda program: CUDA C, PTX, cubin, launch description
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
    best = store.best_record(workload_key, target)
    log.info("artifacts of task %s written: %s (best %.4g ms)", task_id, ", ".join(ARTIFACT_FORMATS),
             float("nan") if best is None else best[0] * 1e3)
