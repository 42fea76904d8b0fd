"""Response bodies of the task list and the tuning curve (what the dashboard draws).

    TaskPage (GET /tasks) = items: [TaskSummary], total, offset, limit
    Curve (GET /tasks/{id}/curve) = points: [CurvePoint], best: [CurveBest], errors: {name: count}

Built from ``workers.task_index``'s dicts; its float seconds become ISO 8601 strings in UTC
(``api.schemas.Timestamp``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from workers.job_state import JobState

from .schemas import Timestamp


class TaskSummary(BaseModel):
    """One task of the list: what it tunes, how far it got, and its latest job."""

    task_id: str
    workload_key: str
    name: str = Field(description="the DAG's computed ops, by name, joined by '+' (e.g. 'matmul+out')")
    target: str
    trials: int = Field(description="records measured for this workload on this target, over all jobs")
    best_cost_s: float | None = Field(None, description="latency of the best record, in seconds (median of its "
                                                         "repeats); null before a successful measurement")
    best_gflops: float | None = None
    state: JobState | None = Field(None, description="the latest job's state; null for a task without a job")
    latest_job_id: str | None = None
    created: Timestamp = None


class TaskPage(BaseModel):
    """A page of tasks, newest first; ``total`` counts every task that matches the filters."""

    items: list[TaskSummary]
    total: int
    offset: int
    limit: int


class CurvePoint(BaseModel):
    """One measurement, in the order the task's records were measured."""

    trial: int = Field(description="1-based position in the task's records")
    cost_s: float | None = Field(description="seconds (median of the repeats); null for a failed measurement")
    gflops: float | None = None
    error: str | None = Field(description="null, or the MeasureErrorNo name of a failed measurement")
    timestamp: Timestamp = None


class CurveBest(BaseModel):
    """A trial whose measurement beat every earlier one."""

    trial: int
    cost_s: float
    gflops: float | None = None


class Curve(BaseModel):
    """The tuning curve of a task: every measurement, the best-so-far steps, errors by kind."""

    task_id: str
    points: list[CurvePoint]
    best: list[CurveBest]
    errors: dict[str, int] = Field(description="MeasureErrorNo name -> count")
