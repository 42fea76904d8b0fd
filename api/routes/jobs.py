"""GET /jobs/{job_id} (progress of a search job), GET /jobs/{job_id}/logs (its log, text),
GET /jobs/{job_id}/events (both, streamed as server-sent events) and DELETE /jobs/{job_id} (cancel it).

GET /jobs/{job_id}/events (``text/event-stream``, ``sse_starlette.EventSourceResponse``):

    event: progress   data: the job's JobPublic JSON, first at once, then whenever it changes
                      (trials_done, state, phase, best, errors, timestamps)
    event: log        data: one log line (as GET /jobs/{id}/logs gives it), oldest first
    event: end        data: the job's last JobPublic JSON, once it ended (finished, failed,
                      cancelled) and its last log lines were sent; the stream then closes
    ": ping ..."      a comment every EVENTS_PING_S (15) seconds, a heartbeat for the client and proxies

The stream reads the job and its new log lines every ``Settings.events_poll_s`` seconds, each read
a short hop to the thread pool (``run_in_threadpool``, as the other async routes read Redis), and
awaits in between: an open stream holds no thread.  It stops when the client disconnects
(sse-starlette listens for it and cancels the stream), when the server shuts down (sse-starlette
ends open streams, so a graceful stop does not wait on them) and after ``Settings.events_max_s``
seconds without an ``end`` (a client opens it again, as an EventSource does by itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from workers.job_logs import JOB_LOG_CAP, LogCursor, open_log_cursor, read_job_log, read_new_log_lines
from workers.job_state import ACTIVE_STATES, ENDED_STATES
from workers.records import JobRecord
from workers.store import RedisStore

from ..deps import SettingsDep, StoreDep
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


EVENTS_PING_S = 15  # seconds between two heartbeat comments of a stream
END_SETTLE_S = 2.0  # a job ended longer ago than this has logged its last line (it logs the end after setting it)
EVENTS_DOC = ("Server-sent events: `progress` (data: the job's JSON, at once and whenever it changes), `log` "
              "(data: one new log line), `end` (data: the job's last JSON, once it ended; the stream closes), "
              f"and a `: ping` comment every {EVENTS_PING_S} s")
# each event as OpenAPI 3.2 describes a text/event-stream item (schemathesis checks every one against it)
EVENTS_CONTENT = {"text/event-stream": {"itemSchema": {
    "type": "object", "required": ["event", "data"],
    "properties": {"event": {"type": "string", "enum": ["progress", "log", "end"]},
                   "data": {"type": "string", "description": "progress, end: the job's JSON (JobPublic); "
                                                             "log: one log line"}}}}}


def _read(store: RedisStore, job_id: str, cursor: LogCursor | None, tail: int | None,
          logs: bool) -> tuple[JobRecord | None, list[str], LogCursor | None]:
    """One read of a stream: the job, the log lines to send (the first read: the last ``tail``,
    None: all kept) and the cursor after them."""
    job = store.get_job(job_id)
    if not logs:
        return job, [], None
    if cursor is None:
        lines, cursor = open_log_cursor(store.conn, job_id, tail)
        return job, lines, cursor
    return job, read_new_log_lines(store.conn, job_id, cursor), cursor


def _public(job: JobRecord) -> str:
    return json.dumps(JobPublic.model_validate(job).model_dump(mode="json"), separators=(",", ":"))


async def job_events(store: RedisStore, job_id: str, logs: bool, tail: int | None, poll_s: float,
                     max_s: float) -> AsyncIterator[ServerSentEvent]:
    """The events of ``job_id`` (see the module docstring) until it ends or ``max_s`` seconds pass
    (sse-starlette cancels it when the client goes)."""
    deadline = time.monotonic() + max_s
    cursor: LogCursor | None = None
    sent: str | None = None
    ended_seen = 0  # reads that found the job ended
    how = "the server's events_max_s passed"
    try:
        while True:
            job, lines, cursor = await run_in_threadpool(_read, store, job_id, cursor, tail, logs)
            if job is None:  # deleted while streamed
                how = "the job is gone"
                return
            for line in lines:
                yield ServerSentEvent(line, event="log")
            public = _public(job)
            if public != sent:
                yield ServerSentEvent(public, event="progress")
                sent = public
            if job.state in ENDED_STATES:
                ended_seen += 1
                # its last lines come after the state: read once more unless it ended long ago, then
                # until a read brings none (at most 4)
                settled = job.ended is not None and time.time() - job.ended > END_SETTLE_S
                if settled or (ended_seen > 1 and not lines) or ended_seen > 4:
                    how = "the job ended"
                    yield ServerSentEvent(public, event="end")
                    return
            if time.monotonic() + poll_s > deadline:
                return
            await asyncio.sleep(poll_s)
    except BaseException:  # the client went (sse-starlette cancels the stream) or the server stops
        how = "the client went or the server stops"
        raise
    finally:
        log.debug("job %s: event stream closed: %s", job_id, how)


# response_class=Response: the error responses stay documented as JSON (ErrorBody), the 200 as a stream
@router.get("/{job_id}/events", response_class=Response, operation_id="stream_job_events",
            responses={200: {"description": EVENTS_DOC, "content": EVENTS_CONTENT}, **error_responses(404, 422, 503)})
async def stream_job_events(
        job_id: str, store: StoreDep, settings: SettingsDep,
        logs: bool = Query(True, description="send the job's log lines as `log` events"),
        tail: int | None = Query(None, ge=0, le=JOB_LOG_CAP,
                                 description="of the lines logged before the stream opened, only the last N "
                                             "(0: only new lines; default: all kept)"),
) -> EventSourceResponse:
    """The job's progress and log as server-sent events until it ends: `progress` (its JSON, as
    GET /jobs/{id} answers, at once and whenever trials, state, phase, best or errors change), `log`
    (each new line, as GET /jobs/{id}/logs gives them), then `end` (its last JSON) once it finished,
    failed or was cancelled; a `: ping` comment every 15 s keeps a quiet stream open.  The stream
    also closes after the service's `events_max_s` (then open it again) and when the client goes.
    404 for an unknown job, before the stream starts."""
    if await run_in_threadpool(store.get_job, job_id) is None:
        raise NotFoundError(f"unknown job id {job_id!r}")
    return EventSourceResponse(job_events(store, job_id, logs, tail, settings.events_poll_s, settings.events_max_s),
                               ping=EVENTS_PING_S)


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
