"""The task resource: create (and start a search), read, records, best, artifact, resume.

    POST /tasks --api.dag_schema.check_dag_structure (the pydantic models of the wire format: types,
                fields, kinds)--> ComputeDAG.from_json (references, dtypes, scopes, bounds; limits
                from Settings)--> store.create_task_with_job
                (task, index and queued job in one Redis transaction; 409 naming the active
                job while the task has one) --api.admit.admit_and_enqueue (RQ "tune" queue)--> 201 TaskCreated
    POST /tasks/{id}/resume --store.create_job (the same rule, atomic)--> admit_and_enqueue --> 201
    GET /tasks --workers.task_index.list_tasks--> TaskPage (newest first, filter by state / workload)
    GET /tasks/{id}/curve --workers.task_index.task_curve--> Curve (every record, best so far, errors;
                the DAG's FLOPs and text; the task's jobs with their baselines: store.task_jobs)

Only the request whose transaction created the job enqueues it, so concurrent POSTs of one
workload start one search.

Both POSTs are bounded first (api.limits, limits in Settings): the token's request rate (429 +
Retry-After), trials per job (422), the DAG's ops and tensor bytes (422), a worker on the
measurement queue for "measure": "queue" (503 naming the queue), the task's trials over all
its jobs (409), the token's queued + running jobs (429) and the jobs waiting on the tune queue
(503); the last three are checked inside the transaction that creates the job.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from scheduler_core.dag.compute_dag import ComputeDAG
from workers.best import describe_best
from workers.job_state import JobState
from workers.records import TaskRecord
from workers.store import RedisStore
from workers.task_index import dag_flops, list_tasks, task_curve

from ..admit import admit_and_enqueue
from ..dag_schema import check_dag_structure
from ..dashboard_schemas import Curve, TaskPage, curve_jobs
from ..deps import ConnDep, SettingsDep, StoreDep, TaskDep
from ..errors import ConflictError, error_responses
from ..limits import (
    RateLimitedToken,
    admission,
    check_dag_size,
    check_job_trials,
    check_measure_listener,
    check_measure_mode,
)
from ..schemas import (
    BestPublic,
    FromRecord,
    RecordsPage,
    TaskCreate,
    TaskCreated,
    TaskPublic,
    TaskResume,
)

router = APIRouter(prefix="/tasks", tags=["tasks"])

ARTIFACT_MEDIA = {"so": "application/octet-stream", "o": "application/octet-stream",
                  "h": "text/plain", "ll": "text/plain", "asm": "text/plain",
                  "cu": "text/plain", "ptx": "text/plain", "cubin": "application/octet-stream",
                  "json": "application/json"}
ARTIFACT_SUFFIX = {"asm": "s"}
# OpenAPI links of a 201 TaskCreated: where its task_id and job_id lead (clients and schemathesis'
# stateful phase follow them).  DELETE /jobs/{id} (cancel) is not linked: it cancels, and the job
# stays readable with state "cancelled", which a generic client would take for a failed delete.
TASK_LINKS = {
    **{op: {"operationId": op, "parameters": {"task_id": "$response.body#/task_id"}}
       for op in ("read_task", "read_records", "read_best", "read_artifact", "resume_task")},
    "read_job": {"operationId": "read_job", "parameters": {"job_id": "$response.body#/job_id"}},
}


def _job_hint(store: RedisStore, task: TaskRecord) -> str:
    """``"; its job J is running"`` for the task's latest job, or ``""`` without one."""
    job_id = task.latest_job_id
    job = store.get_job(job_id) if job_id else None
    return f"; its latest job {job_id} is {job.state.value}" if job else ""


@router.post("", status_code=201, response_model=TaskCreated, operation_id="create_task",
             responses={201: {"description": "The task and its first job", "links": TASK_LINKS},
                        **error_responses(408, 409, 413, 422, 429, 503)})
def create_task(body: TaskCreate, settings: SettingsDep, store: StoreDep, conn: ConnDep,
                token: RateLimitedToken) -> TaskCreated:
    """Validate the DAG, create (or reuse) the task of its workload and target, start a search."""
    tuning = body.tuning.model_dump()  # the request form of TuningOptions: every field, defaults filled in
    trials = tuning["num_measure_trials"]
    check_job_trials(settings, trials)
    check_dag_structure(body.dag)
    dag = ComputeDAG.from_json(body.dag, require_concrete_shapes=True, **settings.dag_limits())
    check_dag_size(settings, dag)
    check_measure_mode(tuning["measure"], body.target)
    check_measure_listener(conn, tuning["measure"], body.target)

    def create() -> tuple[str, str, TaskCreated]:
        task_id, workload_key, job_id = store.create_task_with_job(dag, body.target, tuning,
                                                                   trials, admission(settings, token))
        return task_id, job_id, TaskCreated(task_id=task_id, job_id=job_id, workload_key=workload_key)
    return admit_and_enqueue(store, "task", trials, create)


@router.get("", response_model=TaskPage, operation_id="list_tasks", responses=error_responses(422, 503))
def read_task_list(conn: ConnDep,
                   state: Annotated[JobState | None, Query(description="the state of the task's latest job")] = None,
                   workload: str | None = Query(None, max_length=200,
                                                description="a substring of the workload_key or of the DAG's name"),
                   limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=2**31)) -> TaskPage:
    """The tasks, newest first, a page at a time: workload, target, records measured, best latency
    (seconds) and GFLOP/s, and the latest job's state; ``total`` counts every task that matches."""
    items, total = list_tasks(conn, state=state, workload=workload, limit=limit, offset=offset)
    return TaskPage(items=items, total=total, offset=offset, limit=limit)


@router.get("/{task_id}/curve", response_model=Curve, operation_id="read_curve",
            responses=error_responses(404, 422, 503))
async def read_curve(task: TaskDep, conn: ConnDep, store: StoreDep) -> Curve:
    """The tuning curve: one point per record in the order measured (latency in seconds and
    GFLOP/s, or the error's MeasureErrorNo name), the trials where the best improved, the
    errors counted by kind, the DAG's FLOPs and text, and every job that measured the task (its
    first trial, the baselines its worker timed, the peak estimate).  404 for an unknown task."""
    curve = await run_in_threadpool(task_curve, conn, task.workload_key, task.target)
    jobs = await run_in_threadpool(store.task_jobs, task.task_id)
    dag = await run_in_threadpool(store.load_dag, task.workload_key)
    flop = dag_flops(conn, {task.workload_key})[task.workload_key]
    return Curve(task_id=task.task_id, **curve, flop_ct=flop, dag_text=str(dag),
                 jobs=curve_jobs(task.task_id, jobs, flop))


@router.get("/{task_id}", response_model=TaskPublic, operation_id="read_task", responses=error_responses(404, 422, 503))
async def read_task(task: TaskDep) -> FromRecord:
    return TaskPublic.model_validate(task)


@router.post("/{task_id}/resume", status_code=201, response_model=TaskCreated, operation_id="resume_task",
             responses={201: {"description": "The task's new job", "links": TASK_LINKS},
                        **error_responses(404, 408, 409, 413, 422, 429, 503)})
def resume_task(body: TaskResume, token: RateLimitedToken, task: TaskDep, store: StoreDep, conn: ConnDep,
                settings: SettingsDep) -> TaskCreated:
    """A new job that continues from the task's records (nothing measured is measured again)."""
    check_job_trials(settings, body.num_measure_trials)
    check_measure_mode(task.tuning.get("measure", "local"), task.target)
    check_measure_listener(conn, task.tuning.get("measure", "local"), task.target)

    def create() -> tuple[str, str, TaskCreated]:
        job_id = store.create_job(task.task_id, body.num_measure_trials, admission(settings, token))
        return task.task_id, job_id, TaskCreated(task_id=task.task_id, job_id=job_id,
                                                    workload_key=task.workload_key)
    return admit_and_enqueue(store, "task", body.num_measure_trials, create)


@router.get("/{task_id}/records", response_model=RecordsPage, operation_id="read_records",
            responses={200: {"content": {"application/x-ndjson": {}}}, **error_responses(404, 422, 503)})
def read_records(task: TaskDep, store: StoreDep, settings: SettingsDep,
                 offset: int = Query(0, ge=0), limit: int = Query(100, ge=1),
                 format: Literal["json", "jsonl"] = "json"):
    """A page of the task's measurement records; ``format=jsonl`` downloads them as JSON lines."""
    limit = min(limit, settings.records_page_max)
    lines = list(store.iter_records(task.workload_key, task.target, offset, offset + limit))
    if format == "jsonl":
        return PlainTextResponse("".join(line + "\n" for line in lines), media_type="application/x-ndjson")
    total = store.count_records(task.workload_key, task.target)
    return RecordsPage(task_id=task.task_id, offset=offset, limit=limit, total=total,
                       records=[json.loads(line) for line in lines])


@router.get("/{task_id}/best", response_model=BestPublic, operation_id="read_best",
            responses=error_responses(404, 409, 422, 503))
def read_best(task: TaskDep, store: StoreDep) -> BestPublic:
    """The best schedule so far: steps, Python script, lowered program, latency, record.
    404 for an unknown task; 409 while the task has no successful measurement."""
    best = describe_best(store, task)
    if best is None:  # the task exists: 409 (not 404) until a measurement succeeds
        raise ConflictError(f"task {task.task_id!r} has no successful measurement yet{_job_hint(store, task)}")
    return BestPublic(task_id=task.task_id, **best)


@router.get("/{task_id}/artifact", response_class=Response, operation_id="read_artifact",
            responses={200: {"content": {"application/octet-stream": {}, "text/plain": {}, "application/json": {}}},
                       **error_responses(404, 409, 422, 503)})
def read_artifact(task: TaskDep, store: StoreDep,
                  format: Literal["so", "h", "o", "ll", "asm", "cu", "ptx", "cubin", "json"] = "so") -> Response:
    """The compiled best program.  CPU targets: ``so`` (shared library), ``h`` (its C header),
    ``o`` (object), ``ll`` (LLVM IR), ``asm``; cuda: ``cu`` (CUDA C), ``ptx``, ``cubin``,
    ``json`` (the launch description: kernels, grid, block, arguments).  404 for an unknown
    task; 409 while the task has no such artifact (they are written when a job ends with a
    successful measurement)."""
    data = store.load_artifact(task.task_id, format)
    if data is None:  # the task exists: its artifacts are written when a job ends with a best record
        raise ConflictError(f"task {task.task_id!r} has no {format} artifact yet (it is written when a job "
                            f"ends with a successful measurement){_job_hint(store, task)}")
    name = f"{task.task_id}.{ARTIFACT_SUFFIX.get(format, format)}"
    return Response(data, media_type=ARTIFACT_MEDIA[format],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
