"""Admission of new jobs, inside the WATCH/MULTI/EXEC that creates them (used by
``workers.store.RedisStore`` for tasks and ``workers.model_store.ModelStore`` for models).

    watch_active_job  at most one queued or running job per task (ActiveJobError)
    watch_admission   the limits on new jobs: trials per task, active jobs per token, queued
                      jobs overall, read in the transaction (AdmissionError, nothing written)
    admit             counts the new job against those limits, in the same MULTI/EXEC
    new_job_fields    the hash of a new job (JobState.queued)
"""

from __future__ import annotations

from dataclasses import dataclass

from . import keys
from .job_state import ACTIVE_STATES, JobState
from .records import HashFields, JobRecord, as_text


class ActiveJobError(Exception):
    """The task already has a queued or running job (a task has at most one active job).

    Attributes: ``task_id``, ``job_id`` (the active job), ``state`` (its JobState value).
    """

    def __init__(self, task_id: str, job_id: str, state: str):
        super().__init__(f"task {task_id!r} already has an active job {job_id!r} ({state})")
        self.task_id, self.job_id, self.state = task_id, job_id, state


def new_job_fields(job_id: str, task_id: str, trials: int, model_id: str | None = None) -> HashFields:
    """The hash of a new job of ``trials`` trials, queued now (a model job: ``task_id`` "", ``model_id``)."""
    return JobRecord.queued(job_id, task_id, trials, model_id).to_hash()


def watch_active_job(pipe, task_id: str) -> tuple[str, str] | None:
    """WATCH the task hash and its latest job; ``(job_id, state)`` of that job when it is active.

    ``pipe`` is a pipeline in immediate (WATCH) mode: a change to either key before the
    caller's EXEC aborts the transaction (WatchError).
    """
    pipe.watch(keys.task(task_id))
    latest = pipe.hget(keys.task(task_id), "latest_job_id")
    if not latest:
        return None
    latest = as_text(latest)
    pipe.watch(keys.job(latest))
    state = pipe.hget(keys.job(latest), "state")
    if state is None or as_text(state) not in {s.value for s in ACTIVE_STATES}:
        return None
    return latest, as_text(state)


@dataclass(frozen=True)
class Admission:
    """Limits a new job must fit, checked inside the transaction that creates it.

    Each limit is None for "no limit".  ``token_id``: the requester (a digest of its API
    token, see ``keys.token_jobs``); the job is counted against it in the same transaction.
    ``max_task_trials``: the task's ``trials_total`` over all its jobs plus the new job's
    trials may not pass it.  ``max_active_jobs_per_token``: the token's queued + running jobs
    must be below it.  ``max_queued_jobs``: jobs in state queued (service-wide) must be below it.
    """

    token_id: str | None = None
    max_task_trials: int | None = None
    max_active_jobs_per_token: int | None = None
    max_queued_jobs: int | None = None


class AdmissionError(Exception):
    """A new job over one of its :class:`Admission` limits; nothing was written.

    ``limit``: the Admission field (``"max_task_trials"``, ``"max_active_jobs_per_token"``,
    ``"max_queued_jobs"``); ``value``: the limit; ``current``: what the store counted
    (trials asked so far / active jobs of the token / queued jobs); ``task_id``: the task.
    """

    def __init__(self, limit: str, value: int, current: int, task_id: str | None):
        super().__init__(f"{limit}={value} reached ({current} counted) for task {task_id!r}")
        self.limit, self.value, self.current, self.task_id = limit, value, current, task_id


def _states(pipe, job_ids: list[str]) -> list[str | None]:
    """The ``state`` of each job hash (None for a missing one), read in immediate mode."""
    return [None if (v := pipe.hget(keys.job(j), "state")) is None else as_text(v) for j in job_ids]


def watch_admission(pipe, admission: Admission | None, task_id: str, task_exists: bool,
                     trials: int) -> tuple[list[str], list[str]]:
    """Check ``admission`` for a new job of ``trials`` on ``task_id``, WATCHing what it reads.

    ``pipe`` is in immediate (WATCH) mode and already watches the task hash.  Returns the ids
    to prune from the token's job set and from the queued set (ended / started jobs); the
    caller removes them inside its MULTI (a write before EXEC would abort its own WATCH).
    Raises AdmissionError.
    """
    if admission is None:
        return [], []
    a = admission
    if a.max_task_trials is not None:
        done = 0
        if task_exists:
            total = pipe.hget(keys.task(task_id), "trials_total")
            if total is not None:
                done = int(total)
            else:  # a task stored before trials_total existed: its latest job's trials
                latest = pipe.hget(keys.task(task_id), "latest_job_id")
                if latest:
                    pipe.watch(keys.job(as_text(latest)))
                    done = int(pipe.hget(keys.job(as_text(latest)), "trials_total") or 0)
        if done + trials > a.max_task_trials:
            raise AdmissionError("max_task_trials", a.max_task_trials, done, task_id)
    stale_token: list[str] = []
    if a.token_id is not None:
        pipe.watch(keys.token_jobs(a.token_id))
        ids = sorted(as_text(j) for j in pipe.smembers(keys.token_jobs(a.token_id)))
        active_values = {st.value for st in ACTIVE_STATES}
        stale_token = [j for j, st in zip(ids, _states(pipe, ids)) if st not in active_values]
        active = len(ids) - len(stale_token)
        if a.max_active_jobs_per_token is not None and active >= a.max_active_jobs_per_token:
            raise AdmissionError("max_active_jobs_per_token", a.max_active_jobs_per_token, active, task_id)
    pipe.watch(keys.queued_jobs())
    ids = sorted(as_text(j) for j in pipe.smembers(keys.queued_jobs()))
    stale_queued = [j for j, st in zip(ids, _states(pipe, ids)) if st != JobState.queued.value]
    queued = len(ids) - len(stale_queued)
    if a.max_queued_jobs is not None and queued >= a.max_queued_jobs:
        raise AdmissionError("max_queued_jobs", a.max_queued_jobs, queued, task_id)
    return stale_token, stale_queued


def admit(pipe, admission: Admission | None, job_id: str, stale: tuple[list[str], list[str]]) -> None:
    """Inside MULTI: count the new job against the token and the queued set, prune the stale ids."""
    stale_token, stale_queued = stale
    if admission is not None and admission.token_id is not None:
        if stale_token:
            pipe.srem(keys.token_jobs(admission.token_id), *stale_token)
        pipe.sadd(keys.token_jobs(admission.token_id), job_id)
    if stale_queued:
        pipe.srem(keys.queued_jobs(), *stale_queued)
    pipe.sadd(keys.queued_jobs(), job_id)
