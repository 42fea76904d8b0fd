"""Request and response bodies, one schema family per resource.

    TaskCreate --POST /tasks--> TaskCreated ; TaskPublic ; TaskResume --POST /tasks/{id}/resume--> TaskCreated
    JobPublic (GET/DELETE /jobs/{id}) ; RecordsPage ; BestPublic ; Health
    ErrorBody (every 4xx/5xx but 422) ; ValidationErrorBody (every 422) ; ValidationIssue

Request schemas are strict (no "10" for 10, no true for 1) and forbid unknown
fields, so a typo is a 422 naming the field instead of a silently ignored option.
The DAG itself is checked by ``ComputeDAG.from_json`` in the route (its limits
live in Settings), not here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model

from scheduler_core.base.target import Target as _LibraryTarget
from scheduler_core.search.tuning_options import FIELDS_BY_NAME, TUNING_FIELDS, TuningField
from workers.job_state import JobState

from .dag_schema import dag_schema


def _check_target(target: str) -> str:
    """The canonical text of ``target`` (``Target.parse(target).str``).

    Raises InvalidTargetError (a ValueError, so a 422) with the library's message,
    which names the allowed kinds, option keys, CPU or feature names.
    """
    return _LibraryTarget.parse(target).str


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


def _tuning_field(f: TuningField) -> tuple:
    """The (annotation, Field) of one tuning option, from the library's single table."""
    extra: dict = {}
    if isinstance(f.type, tuple):
        annotation: Any = Literal[f.type]
    elif f.type == "int|None":
        annotation = int | None
    else:
        annotation = f.type
        if f.type is float:
            extra["allow_inf_nan"] = False
    return annotation, Field(f.default, ge=f.ge, gt=f.gt, le=f.le, description=f.doc, **extra)


# The request form of scheduler_core's TuningOptions: same fields, defaults and bounds
# (TUNING_FIELDS); the route turns it into the library object with TuningOptions.from_json.
TuningOptions = create_model(
    "TuningOptions", __base__=_Request, __doc__="How long and how to tune (Ansor's TuningOptions).",
    **{f.name: _tuning_field(f) for f in TUNING_FIELDS})


# A valid POST /tasks body (B = A + A on 4 floats), the OpenAPI example: the docs' "try it out"
# and schemathesis' examples phase create a real task with it (tests/api/test_schemathesis.py).
TASK_EXAMPLE = {
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
        description="ComputeDAG JSON (docs/dag_json_schema.md), validated by ComputeDAG.from_json")
    target: Target = "llvm"
    tuning: TuningOptions = Field(default_factory=TuningOptions)


class TaskResume(_Request):
    """POST /tasks/{id}/resume: how many more trials to measure."""

    num_measure_trials: Trials


class TaskCreated(BaseModel):
    task_id: str
    job_id: str
    workload_key: str


class TaskPublic(BaseModel):
    task_id: str
    workload_key: str
    target: str
    created: Timestamp = None         # ISO 8601, UTC
    tuning: dict[str, Any] = {}
    latest_job_id: str | None = None


class JobPublic(BaseModel):
    job_id: str
    task_id: str                      # "" for a model job (POST /models), which has model_id
    model_id: str | None = None
    state: JobState
    trials_done: int = 0
    trials_total: int = 0
    best_cost_s: float | None = None  # best measured latency so far, in seconds
    best_gflops: float | None = None
    errors: dict[str, int] = {}       # MeasureErrorNo name -> count
    created: Timestamp = None         # ISO 8601 timestamps, UTC
    started: Timestamp = None
    ended: Timestamp = None
    error: str | None = None
    phase: str = ""                   # of a running search: sketches, initial population, evolution,
    phase_since: Timestamp = None     # building, measuring, saving; "" (and null) when none


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
