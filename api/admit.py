"""Admit and enqueue a new job: the one sequence of POST /tasks, POST /tasks/{id}/resume and POST /models.

    create() (the store's WATCH/MULTI/EXEC: the job hash, the admission limits)
      ActiveJobError --> 409 naming the active job; AdmissionError --> ``limits.refusal`` (409/429/503)
    --> workers.queues.enqueue_job(kind, subject, job) ; an enqueue that fails ends the job
        ``failed`` (it never blocks its task) and re-raises

Only the request whose transaction created the job enqueues it, so concurrent POSTs of one
workload start one search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from workers.admission import ActiveJobError, AdmissionError
from workers.job_state import JobState
from workers.queues import enqueue_job
from workers.store import RedisStore

from .errors import ConflictError
from .limits import refusal

Created = TypeVar("Created")


def admit_and_enqueue(store: RedisStore, kind: str, trials: int,
                      create: Callable[[], tuple[str, str, Created]], busy_hint: str = "") -> Created:
    """Create a job with ``create() -> (subject_id, job_id, what the route returns)`` and enqueue it.

    kind : "task" or "model" (``workers.queues.JOB_FUNCS``); trials : the job's trials (for the
    refusal's message); busy_hint : appended to the 409 of a subject with an active job.
    Raises ConflictError (409), a ``limits.refusal`` (409, 429, 503), or what the enqueue raised.
    """
    try:
        subject_id, job_id, created = create()
    except ActiveJobError as err:
        raise ConflictError(f"{err}{busy_hint}") from None
    except AdmissionError as err:
        raise refusal(err, trials, kind) from None
    try:
        enqueue_job(store.conn, kind, subject_id, job_id, trials)
    except Exception as err:
        store.set_job_state(job_id, JobState.failed, f"could not enqueue: {type(err).__name__}: {err}"[:300])
        raise
    return created
