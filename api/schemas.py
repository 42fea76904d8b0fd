"""Request and response bodies, one schema family per resource.

    TaskCreate --POST /tasks--> TaskCreated ; TaskPublic ; TaskResume --POST /tasks/{id}/resume--> TaskCreated
    JobPublic (GET/DELETE /jobs/{id}) ; RecordsPage ; BestPublic ; Health

Request schemas are strict (no "10" for 10, no true for 1) and forbid unknown
fields, so a typo is a 422 naming the field instead of a silently ignored option.
The DAG itself is checked by ``ComputeDAG.from_json`` in the route (its limits
live in Settings), not here.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from scheduler_core.base.target import Target as _LibraryTarget


def _check_target(target: str) -> str:
    """The canonical text of ``target`` (``Target.parse(target).str``).

    Raises InvalidTargetError (a ValueError, so a 422) with the library's message,
    which names the allowed kinds, option keys, CPU or feature names.
    """
    return _LibraryTarget.parse(target).str


Target = Annotated[str, Field(max_length=512, description="target string, e.g. 'llvm -mcpu=skylake-avx512'"),
                   AfterValidator(_check_target)]
Trials = Annotated[int, Field(ge=1, le=100_000, description="measurement trials, 1..100000")]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class TuningOptions(_Request):
    """The tuning options of a search (Ansor's TuningOptions, service subset)."""

    num_measure_trials: Trials = 64
    num_measures_per_round: int = Field(16, ge=1, le=1024, description="programs measured per round")
    early_stopping: int | None = Field(None, ge=1, le=100_000, description="stop after this many rounds without gain")
    timeout_s: float = Field(10.0, gt=0, le=3600, allow_inf_nan=False, description="build/run timeout, in seconds")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of the search's random generator")
    population: int = Field(2048, ge=8, le=16384, description="evolutionary population (Ansor: 2048)")
    num_iters: int = Field(4, ge=0, le=64, description="evolution generations per round (Ansor: 4)")
    measure: Literal["local", "queue"] = Field(
        "local", description="'local': the search job builds and times; 'queue': measurement workers on the "
                             "device's queue (measure:<kind>:<model>) do")


class TaskCreate(_Request):
    """POST /tasks: a ComputeDAG in its JSON wire format, a target and tuning options."""

    dag: dict[str, Any] = Field(description="ComputeDAG JSON (docs/dag_json_schema.md)")
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
    created: float | None = None      # seconds since the epoch
    tuning: dict[str, Any] = {}
    latest_job_id: str | None = None


class JobState(str, enum.Enum):
    queued = "queued"
    running = "running"
    finished = "finished"
    failed = "failed"
    cancelled = "cancelled"


ACTIVE_STATES = (JobState.queued, JobState.running)


class JobPublic(BaseModel):
    job_id: str
    task_id: str
    state: JobState
    trials_done: int = 0
    trials_total: int = 0
    best_cost_s: float | None = None  # best measured latency so far, in seconds
    best_gflops: float | None = None
    errors: dict[str, int] = {}       # MeasureErrorNo name -> count
    created: float | None = None      # timestamps in seconds since the epoch
    started: float | None = None
    ended: float | None = None
    error: str | None = None


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
