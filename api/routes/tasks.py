"""The task resource: create (and start a search), read, records, best, artifact, resume.

    POST /tasks --ComputeDAG.from_json (limits from Settings)--> store.create_task
                --store.create_job--> enqueue_tune (RQ "tune" queue) --> 201 TaskCreated
"""

from __future__ import annotations

import json
from typing import Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse

from scheduler_core.dag.compute_dag import ComputeDAG
from workers.best import describe_best
from workers.job_state import ACTIVE_STATES, JobState
from workers.queues import enqueue_tune

from ..deps import ConnDep, SettingsDep, StoreDep, TaskDep
from ..errors import ConflictError, NotFoundError
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


def _check_idle(store, task: dict) -> None:
    """ConflictError (409) while the task's latest job is queued or running."""
    latest = task.get("latest_job_id")
    job = store.get_job(latest) if latest else None
    if job and JobState(job["state"]) in ACTIVE_STATES:
        raise ConflictError(f"task {task['task_id']!r} already has an active job {latest!r} ({job['state']})")


def _start_job(store, conn, task: dict, trials: int) -> str:
    """Create a job of ``trials`` trials on ``task`` and enqueue it; 409 while another is active."""
    _check_idle(store, task)
    job_id = store.create_job(task["task_id"], trials)
    enqueue_tune(conn, task["task_id"], job_id, trials)
    return job_id


@router.post("", status_code=201, response_model=TaskCreated)
def create_task(body: TaskCreate, settings: SettingsDep, store: StoreDep, conn: ConnDep) -> TaskCreated:
    """Validate the DAG, create (or reuse) the task of its workload and target, start a search."""
    dag = ComputeDAG.from_json(body.dag, **settings.dag_limits())
    existing = store.task_for_workload(dag.workload_key, body.target)
    if existing:  # before create_task replaces its tuning
        _check_idle(store, store.get_task(existing))
    task_id, workload_key = store.create_task(dag, body.target, body.tuning.model_dump())
    job_id = _start_job(store, conn, store.get_task(task_id), body.tuning.num_measure_trials)
    return TaskCreated(task_id=task_id, job_id=job_id, workload_key=workload_key)


@router.get("/{task_id}", response_model=TaskPublic)
def read_task(task: TaskDep) -> TaskPublic:
    return TaskPublic.model_validate(task)


@router.post("/{task_id}/resume", status_code=201, response_model=TaskCreated)
def resume_task(body: TaskResume, task: TaskDep, store: StoreDep, conn: ConnDep) -> TaskCreated:
    """A new job that continues from the task's records (nothing measured is measured again)."""
    job_id = _start_job(store, conn, task, body.num_measure_trials)
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
