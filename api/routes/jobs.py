"""GET /jobs/{job_id} (progress of a search job), GET /jobs/{job_id}/logs (its log, text) and
DELETE /jobs/{job_id} (cancel it)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse

from workers.job_logs import JOB_LOG_CAP, read_job_log
from workers.job_state import ACTIVE_STATES
from workers.records import JobRecord
from workers.store import RedisStore

from ..deps import StoreDep
from ..errors import ConflictError, NotFoundError, error_responses
from ..schemas import FromRecord, JobPublic

router = APIRouter(prefix="/jobs", tags=["jobs"])
log = logging.getLogger(__name__)


def _load(store: RedisStore, job_id: str) -> JobRecord:
    job = store.get_job(job_id)
    if job is None:
        raise NotFoundError(f"unknown job id {job_id!r}")
    return job


@router.get("/{job_id}", response_model=JobPublic, operation_id="read_job", responses=error_responses(404, 422, 503))
def read_job(job_id: str, store: StoreDep) -> FromRecord:
    """State, phase, trials done/total, best latency and GFLOP/s so far, error counts, timestamps."""
    return JobPublic.model_validate(_load(store, job_id))


# response_class=Response: the error responses stay documented as JSON (ErrorBody), the 200 as text
@router.get("/{job_id}/logs", response_class=Response, operation_id="read_job_logs",
            responses={200: {"description": "one line per log record, oldest first: "
                                            "'2026-11-24T01:30:00.123Z INFO workers.jobs: message'",
                             "content": {"text/plain": {"schema": {"type": "string"}}}},
                       **error_responses(404, 422, 503)})
def read_job_logs(job_id: str, store: StoreDep,
                  tail: int | None = Query(None, ge=0, le=JOB_LOG_CAP,
                                           description="only the last N lines (default: all kept, "
                                                       f"at most the last {JOB_LOG_CAP})")) -> PlainTextResponse:
    """The job's log as text: start, phases, every measured batch (errors and best so far),
    artifacts, end state, warnings and failures (404 for an unknown job; empty before it runs)."""
    if store.get_job(job_id) is None:
        raise NotFoundError(f"unknown job id {job_id!r}")
    lines = read_job_log(store.conn, job_id, tail)
    return PlainTextResponse("".join(line + "\n" for line in lines))


@router.delete("/{job_id}", response_model=JobPublic, operation_id="cancel_job",
                responses=error_responses(404, 409, 422, 503))
def cancel_job(job_id: str, store: StoreDep) -> FromRecord:
    """Cancel a job: a queued one at once, a running one after its current batch (409 once ended)."""
    job = _load(store, job_id)
    if job.state not in ACTIVE_STATES or not store.request_cancel(job_id):
        raise ConflictError(f"job {job_id!r} has already ended ({job.state.value})")
    log.info("job %s: cancel requested (it was %s)", job_id, job.state.value)
    return JobPublic.model_validate(_load(store, job_id))
