"""The model resource: a whole model tuned as one job over all its tasks (seed 002).

    POST /models {graph, target, tuning}                       (application/json: ModelCreate)
    POST /models model=@net.onnx target=llvm tuning={...} shapes={...}   (multipart/form-data)
        an uploaded ONNX file (at most Settings.max_model_upload_bytes) is imported in a child
        process (workers.onnx_import: frontend.from_onnx, at most Settings.onnx_import_timeout_s;
        422 naming the node and op type, 503 when the service has no torch/onnx); its graph
        then goes the way of a JSON graph:
        --Graph.from_json (DAG limits from Settings; 422 naming the field, e.g.
          graph.calls[2].args[0])--> one task per distinct workload_key of its tensor programs
        --ModelStore.create_model_with_job (tasks, model, queued job in one Redis transaction;
          409 naming the active job while one of its tasks has one)
        --api.admit.admit_and_enqueue (RQ "tune" queue)--> 201 ModelCreated
    GET /models/{id}            state of the latest job, each task's best and trials, total latency
    GET /models/{id}/best       the best schedule of each task (as GET /tasks/{id}/best)
    GET /models/{id}/artifact   model.tar.gz: model.so (one entry per task, and model_run: the
                                whole model with its weights, when every call is a tensor
                                program), model.h, graph.json; ?format=so / ?format=h alone

A model's tasks are ordinary tasks: GET /tasks/{task_id}, its records, best, artifact and
resume work on them.  Library calls of the graph are kept in the model and not tuned.  The
limits are those of POST /tasks (trials per job, ops and tensor bytes of every function's DAG,
the model's trials over all its jobs, the token's active jobs, the queued jobs) plus at most
:data:`MAX_MODEL_FUNCTIONS` tensor-program functions.  Model jobs target CPUs; ``"measure":
"queue"`` needs a worker on the target's measurement queue (503 naming it otherwise), as a task.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from redis import Redis
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.base.target import Target
from scheduler_core.graph.ir import Graph
from workers.best import describe_best
from workers.model_artifact import artifact_member
from workers.model_store import ModelStore, decode_params, model_tasks
from workers.onnx_import import OnnxImportUnavailable, import_onnx_file
from workers.records import ModelRecord

from ..admit import admit_and_enqueue
from ..deps import ConnDep, SettingsDep
from ..errors import ConflictError, NotFoundError, error_responses
from ..limits import (
    DagTooLarge,
    LimitExceeded,
    RateLimitedToken,
    admission,
    check_dag_size,
    check_job_trials,
    check_measure_listener,
)
from ..model_schemas import (
    ModelBestPublic,
    ModelCreate,
    ModelCreated,
    ModelPublic,
    ModelTaskBest,
    ModelTaskPublic,
    ModelTaskRef,
    ModelUpload,
)
from ..schemas import BestPublic

router = APIRouter(prefix="/models", tags=["models"])
UPLOAD_PATH = "/models"  # where a multipart ONNX upload goes (its own body limit: api.deps.BodyLimitMiddleware)
BODY_SCHEMAS = (ModelCreate, ModelUpload)  # the bodies create_model reads itself (documented by api.main)
_IMPORTS = threading.BoundedSemaphore(1)  # ONNX imports at once (each a child process loading torch)

MAX_MODEL_FUNCTIONS = 256  # tensor-program functions of one graph (each also bounded by the DAG limits)
MODEL_LINKS = {
    **{op: {"operationId": op, "parameters": {"model_id": "$response.body#/model_id"}}
       for op in ("read_model", "read_model_best", "read_model_artifact")},
    "read_job": {"operationId": "read_job", "parameters": {"job_id": "$response.body#/job_id"}},
}


class ModelNotSupported(LimitExceeded):
    """A model asked for something model jobs do not do (a cuda target) (422)."""


class OnnxImportBusy(LimitExceeded):
    """The service cannot import an uploaded ONNX model now (503, Retry-After): another import
    runs, the import passed its time limit, or torch/onnx are not installed where it runs."""

    status = 503


def _graph(body: ModelCreate, settings) -> Graph:
    """The request's graph, checked; InvalidWorkloadError with a ``graph.``-prefixed path, or a 422 limit."""
    try:
        graph = Graph.from_json(body.graph, **settings.dag_limits())
        model_tasks(graph)  # at least one tensor program to tune
    except InvalidWorkloadError as err:
        path = getattr(err, "path", None) or ""
        raise InvalidWorkloadError(_message(err), f"graph.{path}" if path else "graph") from None
    if len(graph.functions) > MAX_MODEL_FUNCTIONS:
        raise DagTooLarge(f"the graph has {len(graph.functions)} functions, over {MAX_MODEL_FUNCTIONS}")
    for name, func in graph.functions.items():
        try:
            check_dag_size(settings, func.dag)
        except DagTooLarge as err:
            raise DagTooLarge(f"graph.functions.{name}: {err.detail}") from None
    return graph


def _message(err: InvalidWorkloadError) -> str:
    """The error's message without the ``path: `` prefix that InvalidWorkloadError puts before it."""
    text, path = str(err), getattr(err, "path", "")
    return text[len(path) + 2:] if path and text.startswith(f"{path}: ") else text


def _model(conn: Redis, model_id: str) -> tuple[ModelStore, ModelRecord]:
    store = ModelStore(conn)
    meta = store.get_model(model_id)
    if meta is None:
        raise NotFoundError(f"unknown model id {model_id!r}")
    return store, meta


def _schema_ref(model: Any) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


@router.post("", status_code=201, response_model=ModelCreated, operation_id="create_model",
             responses={201: {"description": "The model, its tasks and its job", "links": MODEL_LINKS},
                        **error_responses(408, 409, 413, 422, 429, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": _schema_ref(ModelCreate)},
                 "multipart/form-data": {"schema": _schema_ref(ModelUpload)}}}})
async def create_model(request: Request, settings: SettingsDep, conn: ConnDep,
                       token: RateLimitedToken) -> ModelCreated:
    """Validate the graph, store its tasks (one per distinct DAG) and start one job over all of them.

    The body is a ModelCreate (application/json: the graph as JSON, and optionally its weights
    as base64 .npz) or a ModelUpload (multipart/form-data: an ONNX file, imported here with
    ``frontend.from_onnx``; its initializers become the model's weights).  The weights go into
    the model's artifact (GET /models/{id}/artifact), never into the search."""
    if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        try:
            form = await request.form(max_files=1, max_fields=len(ModelUpload.model_fields))
        except StarletteHTTPException as err:  # Starlette's 400 for a malformed or oversized form
            raise RequestValidationError([{"type": "value_error", "loc": ("body",),
                                           "msg": f"multipart body: {err.detail}"}]) from None
        try:
            return await run_in_threadpool(_create_from_upload, form, settings, conn, token)
        finally:
            await form.close()
    body = _validated(_json_body(await request.body()))
    return await run_in_threadpool(_create_from_json, body, settings, conn, token)


def _json_body(raw: bytes) -> Any:
    """The request's JSON value; a 422 like FastAPI's for a body that is not JSON."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidWorkloadError("JSON nested too deeply to parse", "body") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",),
                                       "msg": f"request body: not valid JSON ({type(err).__name__})"}]) from None


def _validated(value: Any, loc: tuple = ("body",)) -> ModelCreate:
    """``value`` as a ModelCreate; a RequestValidationError (422) whose issues' locs start with ``loc``."""
    try:
        return ModelCreate.model_validate(value)
    except ValidationError as err:
        raise RequestValidationError([{**e, "loc": (*loc, *e["loc"])}
                                      for e in err.errors(include_url=False, include_input=False)]) from None


def _form_json(form, name: str, default: Any) -> Any:
    value = form.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise RequestValidationError([{"type": "string_type", "loc": ("body", name),
                                       "msg": f"form field {name!r} must be text (JSON), not a file"}])
    try:
        return json.loads(value)
    except ValueError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", name),
                                       "msg": f"form field {name!r} is not valid JSON"}]) from None


def _create_from_upload(form, settings, conn: Redis, token: str) -> ModelCreated:
    """POST /models with multipart/form-data: check the form, import the ONNX file, then :func:`_create`."""
    unknown = sorted(set(form.keys()) - set(ModelUpload.model_fields))
    if unknown:
        raise RequestValidationError([{"type": "extra_forbidden", "loc": ("body", unknown[0]),
                                       "msg": f"unknown form field {unknown[0]!r}; the fields are "
                                              f"{', '.join(ModelUpload.model_fields)}"}])
    twice = next((name for name in form.keys() if len(form.getlist(name)) > 1), None)
    if twice:
        raise RequestValidationError([{"type": "value_error", "loc": ("body", twice),
                                       "msg": f"form field {twice!r} is given more than once"}])
    upload = form.get("model")
    if not isinstance(upload, UploadFile):
        raise RequestValidationError([{"type": "missing", "loc": ("body", "model"),
                                       "msg": "form field 'model' must be the .onnx file (a file part)"}])
    target = form.get("target", "llvm")
    body = _validated({"graph": {}, "target": target, "tuning": _form_json(form, "tuning", {})})
    shapes = _form_json(form, "shapes", {})
    if not (isinstance(shapes, dict) and all(isinstance(v, list) and all(type(d) is int and d > 0 for d in v)
                                             for v in shapes.values())):
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "shapes"),
                                       "msg": "shapes must be a JSON object {input name: [positive int dims]}"}])
    _check_before_graph(body, settings, conn)  # cheap refusals before the import
    if not _IMPORTS.acquire(timeout=5):  # one import at a time; the next caller retries, no thread waits long
        raise OnnxImportBusy("another ONNX model is being imported; retry later", retry_after_s=30)
    try:
        with tempfile.TemporaryDirectory(prefix="autosched-onnx-") as tmp:
            path = os.path.join(tmp, "model.onnx")
            with open(path, "wb") as f:
                upload.file.seek(0)
                shutil.copyfileobj(upload.file, f)
            try:
                graph, params = import_onnx_file(path, shapes, timeout_s=settings.onnx_import_timeout_s)
            except OnnxImportUnavailable as err:
                raise OnnxImportBusy(str(err), retry_after_s=30) from None
    finally:
        _IMPORTS.release()
    body = body.model_copy(update={"graph": graph})
    return _create(body, _graph(body, settings), settings, conn, token, params)


def _check_request(body: ModelCreate, settings) -> None:
    """The refusals that need neither the graph nor Redis: trials over the job limit, a GPU target."""
    check_job_trials(settings, body.tuning.model_dump()["num_measure_trials"])
    if Target.parse(body.target).is_gpu:
        raise ModelNotSupported(f"target {body.target!r}: whole models are tuned for CPU (llvm) targets; "
                                "tune a cuda function with POST /tasks")


def _check_before_graph(body: ModelCreate, settings, conn: Redis) -> None:
    """The refusals that do not need the graph: :func:`_check_request`, then no measurement worker
    for ``"measure": "queue"`` (503)."""
    _check_request(body, settings)
    check_measure_listener(conn, body.tuning.model_dump()["measure"], body.target)


def _create_from_json(body: ModelCreate, settings, conn: Redis, token: str) -> ModelCreated:
    """The request's own errors (422) before the service's state (503: no measurement worker)."""
    _check_request(body, settings)
    graph = _graph(body, settings)
    params = _params(body, graph)
    check_measure_listener(conn, body.tuning.model_dump()["measure"], body.target)
    return _create(body, graph, settings, conn, token, params)


def _params(body: ModelCreate, graph: Graph) -> bytes | None:
    """The body's weights (base64 of an .npz), checked against the graph's params; None when
    absent.  InvalidWorkloadError (422) with path ``params`` / ``params.<name>``."""
    if body.params is None:
        return None
    try:
        data = base64.b64decode(body.params, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidWorkloadError("not base64 text (of an .npz file)", "params") from None
    decode_params(data, graph)
    return data


def _create(body: ModelCreate, graph: Graph, settings, conn: Redis, token: str,
            params: bytes | None = None) -> ModelCreated:
    """Store the model (its checked ``graph`` and ``params``, .npz bytes), its tasks and its job;
    the refusals have been made by the caller."""
    tuning = body.tuning.model_dump()  # the request form of TuningOptions: every field, defaults filled in
    trials = tuning["num_measure_trials"]
    store = ModelStore(conn)

    def create() -> tuple[str, str, ModelCreated]:
        model_id, tasks, job_id = store.create_model_with_job(graph, body.target, tuning,
                                                              trials, admission(settings, token), params)
        return model_id, job_id, ModelCreated(model_id=model_id, job_id=job_id,
                                              tasks=[ModelTaskRef.model_validate(t) for t in tasks])
    return admit_and_enqueue(store, "model", trials, create,
                             busy_hint=": a task of this model is being tuned; wait for that job or cancel it")


@router.get("/{model_id}", response_model=ModelPublic, operation_id="read_model",
            responses=error_responses(404, 422, 503))
def read_model(model_id: str, conn: ConnDep) -> ModelPublic:
    """The latest job's state and trials, each task's best latency / GFLOP/s / trials, and the
    model's total latency (sum of weight x best latency, seconds)."""
    store, meta = _model(conn, model_id)
    tasks, total = store.describe_tasks(meta)
    job = store.get_job(meta.latest_job_id) if meta.latest_job_id else None
    return ModelPublic(model_id=model_id, target=meta.target, created=meta.created, tuning=meta.tuning,
                       latest_job_id=meta.latest_job_id or None, state=job.state if job else None,
                       trials_done=job.trials_done if job else 0, trials_total=job.trials_total if job else 0,
                       total_latency_s=total, tasks=[ModelTaskPublic.model_validate(t) for t in tasks])


@router.get("/{model_id}/best", response_model=ModelBestPublic, operation_id="read_model_best",
            responses=error_responses(404, 409, 422, 503))
def read_model_best(model_id: str, conn: ConnDep) -> ModelBestPublic:
    """The best schedule of every task (steps, Python script, lowered program, latency, record;
    null for a task not measured yet).  404 for an unknown model; 409 while no task has a
    successful measurement."""
    store, meta = _model(conn, model_id)
    out = []
    for t in meta.tasks:
        task = store.get_task(t.task_id)
        best = describe_best(store, task) if task else None
        out.append(ModelTaskBest(task_id=t.task_id, workload_key=t.workload_key, functions=t.functions,
                                 weight=t.weight, best=BestPublic(task_id=t.task_id, **best) if best else None))
    if not any(t.best for t in out):
        raise ConflictError(f"model {model_id!r} has no successful measurement yet")
    _, total = store.describe_tasks(meta)
    return ModelBestPublic(model_id=model_id, total_latency_s=total, tasks=out)


MODEL_ARTIFACT_MEDIA = {"tar.gz": "application/gzip", "so": "application/octet-stream", "h": "text/plain"}


@router.get("/{model_id}/artifact", response_class=Response, operation_id="read_model_artifact",
            responses={200: {"content": {m: {} for m in MODEL_ARTIFACT_MEDIA.values()}},
                       **error_responses(404, 409, 422, 503)})
def read_model_artifact(model_id: str, conn: ConnDep,
                        format: Literal["tar.gz", "so", "h"] = "tar.gz") -> Response:
    """``format=tar.gz`` (default): ``model_<id>.tar.gz`` with ``model.so`` (one C entry point per
    task, the symbol of its first function), ``model.h`` (their prototypes and the calling
    convention, docs/calling_convention.md) and ``graph.json`` (the graph; each tensor-program
    function names its ``entry``: symbol, task, "tuned" or "default" schedule, argument order).
    ``format=so``: ``model.so`` alone; ``format=h``: ``model.h`` alone (text/plain).  An
    untuned task gets the naive schedule of its DAG.  404 for an unknown model; 409 until a
    model job has ended and written it."""
    store, meta = _model(conn, model_id)
    data = store.load_model_artifact(model_id)
    if data is None:
        job = store.get_job(meta.latest_job_id) if meta.latest_job_id else None
        hint = f"; its latest job {meta.latest_job_id} is {job.state.value}" if job else ""
        raise ConflictError(f"model {model_id!r} has no artifact yet (it is written when a model job ends){hint}")
    if format != "tar.gz":
        data = artifact_member(data, format)
    name = f"model_{model_id}.{format}"
    return Response(data, media_type=MODEL_ARTIFACT_MEDIA[format],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
