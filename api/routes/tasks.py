"""The task resource: create (and start a search), read, records, best, artifact, resume.

    POST /tasks --ComputeDAG.from_json (limits from Settings)--> store.create_task_with_job
                (task, index and queued job in one Redis transaction; 409 naming the active
                job while the task has one) --> enqueue_tune (RQ "tune" queue) --> 201 TaskCreated
    POST /tasks/{id}/resume --store.create_job (the same rule, atomic)--> enqueue_tune --> 201

Only the request whose transaction created the job enqueues it, so concurrent POSTs of one
workload start one search.

Both POSTs are bounded first (api.limits, limits in Settings): the token's request rate (429 +
Retry-After), trials per job (422), the DAG's ops and tensor bytes (422), a worker on the
measurement queue for "measure": "queue" (503 naming the queue), the task's trials over all
its jobs (409), the token's queued + running jobs (429) and the tune queue's length (503).
"""

from __future__ import annotations

import json
from typing import Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse

from scheduler_core.dag.compute_dag import ComputeDAG
from workers.best import describe_best
from workers.job_state import JobState
from workers.queues import enqueue_tune
from workers.store import ActiveJobError

from ..deps import ConnDep, SettingsDep, StoreDep, TaskDep
from ..errors import ConflictError, NotFoundError
from ..limits import (
    RateLimitedToken,
    check_capacity,
    check_dag_size,
    check_job_trials,
    check_measure_listener,
    check_task_trials,
)
from ..schemas import (
    BestPublic,
    RecordsPage,
    TaskCreate,
    TaskCreated,
    TaskPublic,
    TaskResume,
)

router = APIRouter(prefix="/tasks", tags=["tasks"])

ARTIFACT_MEDIA = {"so": "application/octet-stream", "o": "application/octet-stream",
                  "ll": "text/plain", "asm": "text/plain"}


def _conflict(err: ActiveJobError) -> ConflictError:
    """The 409 of a task that already has a queued or running job; it names that job."""
    return ConflictError(str(err))


def _enqueue(store, conn, task_id: str, job_id: str, trials: int) -> None:
    """Enqueue the job just created; if that fails the job ends ``failed`` (it never blocks the task)."""
    try:
        enqueue_tune(conn, task_id, job_id, trials)
    except Exception as err:
        store.set_job_state(job_id, JobState.failed, f"could not enqueue: {type(err).__name__}: {err}"[:300])
        raise


@router.post("", status_code=201, response_model=TaskCreated)
def create_task(body: TaskCreate, settings: SettingsDep, store: StoreDep, conn: ConnDep,
                token: RateLimitedToken) -> TaskCreated:
    """Validate the DAG, create (or reuse) the task of its workload and target, start a search."""
    trials = body.tuning.num_measure_trials
    check_job_trials(settings, trials)
    dag = ComputeDAG.from_json(body.dag, require_concrete_shapes=True, **settings.dag_limits())
    check_dag_size(settings, dag)
    check_measure_listener(conn, body.tuning.measure, body.target)
    check_task_trials(settings, store, store.task_for_workload(dag.workload_key, body.target), trials)
    check_capacity(settings, store, conn, token)
    try:
        task_id, workload_key, job_id = store.create_task_with_job(dag, body.target, body.tuning.model_dump(),
                                                                   trials)
    except ActiveJobError as err:
        raise _conflict(err) from None
    store.add_token_job(token, job_id)
    _enqueue(store, conn, task_id, job_id, trials)
    return TaskCreated(task_id=task_id, job_id=job_id, workload_key=workload_key)


@router.get("/{task_id}", response_model=TaskPublic)
def read_task(task: TaskDep) -> TaskPublic:
    return TaskPublic.model_validate(task)


@router.post("/{task_id}/resume", status_code=201, response_model=TaskCreated)
def resume_task(body: TaskResume, token: RateLimitedToken, task: TaskDep, store: StoreDep, conn: ConnDep,
                settings: SettingsDep) -> TaskCreated:
    """A new job that continues from the task's records (nothing measured is measured again)."""
    check_job_trials(settings, body.num_measure_trials)
    check_measure_listener(conn, task["tuning"].get("measure", "local"), task["target"])
    check_task_trials(settings, store, task["task_id"], body.num_measure_trials)
    check_capacity(settings, store, conn, token)
    try:
        job_id = store.create_job(task["task_id"], body.num_measure_trials)
    except ActiveJobError as err:
        raise _conflict(err) from None
    store.add_token_job(token, job_id)
    _enqueue(store, conn, task["task_id"], job_id, body.num_measure_trials)
    return TaskCreated(task_id=task["task_id"], job_id=job_id, workload_key=task["workload_key"])


@router.get("/{task_id}/records", response_model=RecordsPage,
            responses={200: {"content": {"application/x-ndjson": {}}}})
def read_records(task: TaskDep, store: StoreDep, settings: SettingsDep,
                 offset: int = Query(0, ge=0), limit: int = Query(100, ge=1),
                 format: Literal["json", "jsonl"] = "json"):
    """A page of the task's measurement records; ``format=jsonl`` downloads them as JSON lines."""
    limit = min(limit, settings.records_page_max)
    lines = list(store.iter_records(task["workload_key"], task["target"], offset, offset + limit))
    if format == "jsonl":
        return PlainTextResponse("".join(line + "\n" for line in lines), media_type="application/x-ndjson")
    total = store.count_records(task["workload_key"], task["target"])
    return RecordsPage(task_id=task["task_id"], offset=offset, limit=limit, total=total,
                       records=[json.loads(line) for line in lines])


@router.get("/{task_id}/best", response_model=BestPublic)
def read_best(task: TaskDep, store: StoreDep) -> BestPublic:
    """The best schedule so far: steps, Python script, lowered program, latency, record."""
    best = describe_best(store, task)
    if best is None:
        raise NotFoundError(f"task {task['task_id']!r} has no successful measurement yet")
    return BestPublic(task_id=task["task_id"], **best)


@router.get("/{task_id}/artifact", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}, "text/plain": {}}}})
def read_artifact(task: TaskDep, store: StoreDep, format: Literal["so", "o", "ll", "asm"] = "so") -> Response:
    """The compiled best program (``so``: shared library, ``o``: object, ``ll``: LLVM IR, ``asm``)."""
    data = store.load_artifact(task["task_id"], format)
    if data is None:
        raise NotFoundError(f"task {task['task_id']!r} has no {format} artifact yet")
    name = f"{task['task_id']}.{'s' if format == 'asm' else format}"
    return Response(data, media_type=ARTIFACT_MEDIA[format],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
