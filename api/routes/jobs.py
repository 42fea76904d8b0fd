"""GET /jobs/{job_id} (progress of a search job) and DELETE /jobs/{job_id} (cancel it)."""

from __future__ import annotations

from fastapi import APIRouter

from workers.job_state import ACTIVE_STATES

from ..deps import StoreDep
from ..errors import ConflictError, NotFoundError, error_responses
from ..schemas import JobPublic

router = APIRouter(prefix="/jobs", tags=["jobs"])


def _load(store, job_id: str) -> JobPublic:
    job = store.get_job(job_id)
    if not job:
        raise NotFoundError(f"unknown job id {job_id!r}")
    return JobPublic.model_validate(job)


@router.get("/{job_id}", response_model=JobPublic, operation_id="read_job", responses=error_responses(404, 422, 503))
def read_job(job_id: str, store: StoreDep) -> JobPublic:
    """State, trials done/total, best latency and GFLOP/s so far, error counts, timestamps."""
    return _load(store, job_id)


@router.delete("/{job_id}", response_model=JobPublic, operation_id="cancel_job",
                responses=error_responses(404, 409, 422, 503))
def cancel_job(job_id: str, store: StoreDep) -> JobPublic:
    """Cancel a job: a queued one at once, a running one after its current batch (409 once ended)."""
    job = _load(store, job_id)
    if job.state not in ACTIVE_STATES or not store.request_cancel(job_id):
        raise ConflictError(f"job {job_id!r} has already ended ({job.state.value})")
    return _load(store, job_id)
