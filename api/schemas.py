"""Request and response bodies, one schema family per resource.

    TaskCreate --POST /tasks--> TaskCreated ; TaskPublic ; TaskResume --POST /tasks/{id}/resume--> TaskCreated
    JobPublic (GET/DELETE /jobs/{id}) ; RecordsPage ; BestPublic ; Health
    ErrorBody (every 4xx/5xx but 422) ; ValidationErrorBody (every 422) ; ValidationIssue

Request schemas are strict (no "10" for 10, no true for 1) and forbid unknown
fields, so a typo is a 422 naming the field instead of a silently ignored option.
The DAG itself is checked in the route: its structure by the models of ``api.dag_schema`` (whose
JSON Schema the ``dag`` field carries), then by ``ComputeDAG.from_json`` (its limits live in
Settings), so that every DAG problem is one 422 naming its path.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model

from scheduler_core.base.target import Target as _LibraryTarget
from scheduler_core.search.tuning_options import FIELDS_BY_NAME, TUNING_FIELDS, TuningField
from workers.records import JobRecord, TaskRecord

from .dag_schema import dag_schema


def _check_target(target: str) -> str:
    """The canonical text of ``target`` (``str(Target.parse(target))``).

    Raises InvalidTargetError (a ValueError, so a 422) with the library's message,
    which names the allowed kinds, option keys, CPU or feature names.
    """
    return str(_LibraryTarget.parse(target))


def epoch_to_datetime(value: Any) -> Any:
    """Seconds since the epoch (float, int or their text, as Redis keeps them) -> an aware UTC
    datetime; None, "" and 0 (never set) -> None; a datetime or ISO 8601 text passes through."""
    if value is None or value == "" or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
    if isinstance(value, str):
        try:
            return epoch_to_datetime(float(value))
        except ValueError:
            return value
    return value


# Every created/started/ended (and phase_since) of a response: ISO 8601 in UTC, e.g.
# "2026-11-24T01:30:00.123456Z", or null.  Redis keeps float seconds; the schema converts.
Timestamp = Annotated[datetime | None, BeforeValidator(epoch_to_datetime),
                      Field(description="ISO 8601 time in UTC (e.g. 2026-11-24T01:30:00.123456Z), or null")]

Target = Annotated[str, Field(max_length=512, description="target string, e.g. 'llvm -mcpu=skylake-avx512'"),
                   AfterValidator(_check_target)]
_TRIALS = FIELDS_BY_NAME["num_measure_trials"]
Trials = Annotated[int, Field(ge=_TRIALS.ge, le=_TRIALS.le, description=_TRIALS.doc)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


def _tuning_field(f: TuningField) -> tuple[Any, Any]:
    """The (annotation, Field) of one tuning option, from the library's single table."""
    extra: dict = {}
    if isinstance(f.type, tuple):
        annotation: Any = Literal[f.type]
    elif f.type == "int|None":
        annotation = int | None
    elif f.type == "float|None":
        annotation = float | None
        extra["allow_inf_nan"] = False
    else:
        annotation = f.type
        if f.type is float:
            extra["allow_inf_nan"] = False
    return annotation, Field(f.default, ge=f.ge, gt=f.gt, le=f.le, description=f.doc, **extra)


# The request form of scheduler_core's TuningOptions: same fields, defaults and bounds
# (TUNING_FIELDS); the route turns it into the library object with TuningOptions.from_json.
_TUNING: dict[str, Any] = {f.name: _tuning_field(f) for f in TUNING_FIELDS}
TuningOptions = create_model(
    "TuningOptions", __base__=_Request, __doc__="How long and how to tune (Ansor's TuningOptions).", **_TUNING)


# A valid POST /tasks body (B = A + A on 4 floats), the OpenAPI example: the docs' "try it out"
# and schemathesis' examples phase create a real task with it (tests/api/test_schemathesis.py).
TASK_EXAMPLE: dict[str, Any] = {
    "dag": {"format": "autosched.compute_dag", "version": 1, "vars": [{"dtype": "int32", "name": "i"}],
            "tensors": [[0, 0], [1, 0]],
            "ops": [{"kind": "placeholder", "name": "A", "dtype": "float32", "shape": [4]},
                    {"kind": "compute", "name": "B", "shape": [4], "axis": [0], "attrs": {}, "tag": "",
                     "body": {"kind": "binary", "op": "add", "dtype": "float32",
                              "a": {"kind": "load", "dtype": "float32", "tensor": [0, 0],
                                    "indices": [{"kind": "var", "id": 0}]},
                              "b": {"kind": "load", "dtype": "float32", "tensor": [0, 0],
                                    "indices": [{"kind": "var", "id": 0}]}}}]},
    "target": "llvm",
    "tuning": {"num_measure_trials": 8},
}


class TaskCreate(_Request):
    """POST /tasks: a ComputeDAG in its JSON wire format, a target and tuning options."""

    model_config = ConfigDict(json_schema_extra={"examples": [TASK_EXAMPLE]})

    dag: Annotated[dict[str, Any], WithJsonSchema(dag_schema(TASK_EXAMPLE["dag"]))] = Field(
        description="ComputeDAG JSON (docs/dag_json_schema.md), validated by the models of this schema, "
                    "then by ComputeDAG.from_json")
    target: Target = "llvm"
    tuning: TuningOptions = Field(default_factory=TuningOptions)


class TaskResume(_Request):
    """POST /tasks/{id}/resume: how many more trials to measure."""

    num_measure_trials: Trials


TIME_FIELDS = ("created", "started", "ended", "phase_since")  # float seconds in a record, ISO 8601 in a response


class FromRecord(BaseModel):
    """Base of the schemas built by :func:`record_schema`: they validate a record object itself."""

    model_config = ConfigDict(from_attributes=True)


def record_schema(record: type, name: str, doc: str, exclude: tuple[str, ...] = ()) -> type[FromRecord]:
    """A response schema built from a ``workers.records`` dataclass: its fields, types and defaults,
    without ``exclude``, each of TIME_FIELDS as a :data:`Timestamp`.  It validates a record
    itself (``from_attributes``), so a route answers ``Schema.model_validate(store.get_job(...))``."""
    hints = typing.get_type_hints(record)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in exclude:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        else:
            default = ...
        fields[f.name] = (Timestamp if f.name in TIME_FIELDS else hints[f.name], default)
    return create_model(name, __base__=FromRecord, __doc__=doc, **fields)


class TaskCreated(BaseModel):
    task_id: str
    job_id: str
    workload_key: str


# GET /tasks/{id}: workers.records.TaskRecord (created: ISO 8601, UTC; latest_job_id "" before a job)
TaskPublic = record_schema(TaskRecord, "TaskPublic", "A task: one workload on one target, its tuning and latest job.",
                           exclude=("trials_total",))

# GET /jobs/{id}: workers.records.JobRecord.  task_id is "" for a model job (POST /models), which has
# model_id; best_cost_s in seconds; errors: MeasureErrorNo name -> count; timestamps ISO 8601, UTC;
# phase of a running search: sketches, initial population, evolution, building, measuring, saving
# ("" and null when none).
JobPublic = record_schema(JobRecord, "JobPublic", "A search job: its state, progress, best so far and errors.",
                          exclude=("cancel", "task_trials"))


class RecordsPage(BaseModel):
    task_id: str
    offset: int
    limit: int
    total: int
    records: list[Any]                # decoded record JSON lines (measure_record format)


class BestPublic(BaseModel):
    task_id: str
    cost_s: float                     # latency of the best program, in seconds
    gflops: float | None = None
    steps: list[Any] = []             # transform steps, JSON
    script: str = ""                  # the Python schedule script
    lowered: str = ""                 # the lowered loop program
    record: Any = None                # the record line, decoded


class Health(BaseModel):
    status: str
    redis: bool


class ValidationIssue(BaseModel):
    """One problem of a rejected request, in FastAPI's shape (the input is never echoed)."""

    type: str                         # e.g. "missing", "int_parsing", "invalid_workload"
    loc: list[str | int]              # where: ["body", "tuning", "seed"], ["query", "offset"], ...
    msg: str
    ctx: dict[str, str] | None = None  # the constraint, e.g. {"ge": "0"}


class ErrorBody(BaseModel):
    """The body of every error response except 422 (401, 404, 409, 413, 503, ...)."""

    error: str = Field(description="kind of error: the exception class (NotFoundError, ConflictError, "
                                   "ServiceUnavailable, Unauthorized, ContentTooLarge, ...)")
    detail: str = Field(description="one-line message naming what is wrong")


class ValidationErrorBody(BaseModel):
    """The body of every 422, whether the request schema or the library's DAG/target check rejected it.

    ``detail`` is the list of problems (FastAPI's shape) when the request schema rejected the
    request (``error``: RequestValidationError, or the library error a schema validator raised,
    e.g. InvalidTargetError for ``target``), else the one-line message of the library error
    (InvalidWorkloadError, a limit of api.limits, ...); ``path`` is the DAG path of an
    InvalidWorkloadError (e.g. ``ops[4].body.b.tensor``; ``""`` for the DAG itself), else null.
    """

    error: str = Field(description="RequestValidationError (schema), InvalidWorkloadError (DAG), "
                                   "InvalidTargetError (target) or another library / limit error class")
    detail: list[ValidationIssue] | str = Field(description="the schema problems, or the library error's message")
    path: str | None = Field(None, description="DAG path of an InvalidWorkloadError, else null")
