"""Response bodies of the task list and the tuning curve (what the dashboard draws).

    TaskPage (GET /tasks) = items: [TaskSummary], total, offset, limit
    Curve (GET /tasks/{id}/curve) = points: [CurvePoint], best: [CurveBest], errors: {name: count},
        flop_ct, dag_text, jobs: [CurveJob] (each job's first trial, baselines and the peak estimate)

Built from ``workers.task_index``'s dicts; its float seconds become ISO 8601 strings in UTC
(``api.schemas.Timestamp``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from workers.job_state import JobState
from workers.records import JobRecord

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


class CurveBaseline(BaseModel):
    """What a user would otherwise call (``workers.records.BaselineTiming``), timed by the worker at
    the end of the job at the tuned program's thread count."""

    library: str = Field(description="'numpy' or 'torch'")
    formula: str = Field(description="the library calls, e.g. 'out = (A @ B) + C'")
    seconds: float = Field(description="median seconds of one call")
    threads: int
    gflops: float | None = Field(None, description="the DAG's FLOPs over ``seconds``, in GFLOP/s")


class CurveJob(BaseModel):
    """One job that measured the task (its own tune jobs and its models' jobs), oldest first."""

    job_id: str
    model_id: str | None = None
    state: JobState
    trials_total: int
    trials_done: int
    first_trial: int | None = Field(None, description="the trial (as CurvePoint.trial) of the job's first "
                                                      "measurement; null for a job stored before it was kept")
    best_cost_s: float | None = None
    created: Timestamp = None
    started: Timestamp = None
    ended: Timestamp = None
    baselines: list[CurveBaseline] = Field(default_factory=list, description="empty: none timed (a DAG with no "
                                           "numpy formulation, a cuda target, a model job, a job not ended)")
    peak_gflops: float | None = Field(None, description="an estimate of the measuring machine's float32 peak, "
                                                        "GFLOP/s (not a measurement)")
    peak_how: str = Field("", description="how the peak was estimated")


class Curve(BaseModel):
    """The tuning curve of a task: every measurement, the best-so-far steps, errors by kind, the
    DAG (FLOPs and its text) and the jobs that measured it."""

    task_id: str
    points: list[CurvePoint]
    best: list[CurveBest]
    errors: dict[str, int] = Field(description="MeasureErrorNo name -> count")
    flop_ct: float = Field(0.0, description="floating-point operations of one run of the DAG (0: not countable)")
    dag_text: str = Field("", description="the DAG as Ansor prints it, one line per op")
    jobs: list[CurveJob] = Field(default_factory=list)


def curve_jobs(task_id: str, jobs: list[JobRecord], flop_ct: float) -> list[CurveJob]:
    """The CurveJobs of a task's ``jobs`` (``RedisStore.task_jobs``); GFLOP/s from ``flop_ct``."""
    out = []
    for j in jobs:
        first = j.first_trials.get(task_id)
        out.append(CurveJob(
            job_id=j.job_id, model_id=j.model_id, state=j.state, trials_total=j.trials_total,
            trials_done=j.task_trials.get(task_id, 0) if j.model_id else j.trials_done,
            first_trial=None if first is None else first + 1, best_cost_s=j.best_cost_s if not j.model_id else None,
            created=j.created, started=j.started, ended=j.ended,
            baselines=[CurveBaseline(library=b.library, formula=b.formula, seconds=b.seconds, threads=b.threads,
                                     gflops=flop_ct / b.seconds / 1e9 if flop_ct > 0 and b.seconds > 0 else None)
                       for b in j.baselines],
            peak_gflops=j.peak.gflops if j.peak else None, peak_how=j.peak.how if j.peak else ""))
    return out
