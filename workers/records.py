"""Typed service records: a task, a job and a model as they live in their Redis hashes.

    Redis hash (bytes or text values) --from_hash--> TaskRecord | JobRecord | ModelRecord
    record --to_hash--> {field: text or int}  (what HSET writes; the layout of ``workers.keys``)

The hashes keep their historical layout, so data stored before these classes reads back:
numbers as their ``repr`` text, absent values as ``""`` (or no field), ``tuning``,
``errors`` and a model's ``tasks`` as JSON text, a model job's per-task trials as
``trials_done:<task_id>`` fields.  Times are float seconds since the epoch (None: not yet).
The API builds its response schemas from these classes (``api.schemas``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .job_state import JobState

# what HSET writes: field name -> text or integer (Any key: redis' own typing takes bytes, str, numbers)
HashFields = dict[Any, str | int]
TASK_TRIALS_PREFIX = "trials_done:"  # a model job's trials of one task: ``trials_done:<task_id>``


def as_text(v: Any) -> str:
    """A Redis reply (bytes or not) as text."""
    return v.decode() if isinstance(v, bytes) else str(v)


def decode_hash(h: Mapping[Any, Any]) -> dict[str, str]:
    """A Redis hash reply with its names and values as text."""
    return {as_text(k): as_text(v) for k, v in h.items()}


def _float(text: str | None) -> float | None:
    return float(text) if text else None


def _text(value: float | None) -> str:
    return "" if value is None else repr(float(value))


@dataclass(frozen=True)
class TaskRecord:
    """One workload on one target (``keys.task``): the unit whose records every job extends.

    created : seconds since the epoch; tuning : TuningOptions' JSON form (the latest job's);
    latest_job_id : "" before the first job; trials_total : trials asked over all its jobs.
    """

    task_id: str
    workload_key: str
    target: str
    created: float = 0.0
    tuning: Mapping[str, Any] = field(default_factory=dict)
    latest_job_id: str = ""
    trials_total: int = 0

    @classmethod
    def from_hash(cls, h: Mapping[Any, Any]) -> TaskRecord | None:
        """The record of a task hash; None for an absent or incomplete one (no workload_key)."""
        d = decode_hash(h)
        if not d.get("workload_key"):
            return None
        return cls(d.get("task_id", ""), d["workload_key"], d.get("target", ""), float(d.get("created") or 0.0),
                   json.loads(d.get("tuning") or "{}"), d.get("latest_job_id", ""), int(d.get("trials_total") or 0))

    def to_hash(self) -> HashFields:
        return {"task_id": self.task_id, "workload_key": self.workload_key, "target": self.target,
                "created": repr(float(self.created)), "tuning": json.dumps(dict(self.tuning)),
                "latest_job_id": self.latest_job_id, "trials_total": int(self.trials_total)}


@dataclass(frozen=True)
class BaselineTiming:
    """What a user would otherwise call, timed by the worker at the end of a task job
    (``workers.baselines``): ``library`` ("numpy" or "torch"), its ``formula`` (e.g.
    ``out = (A @ B) + C``), median ``seconds`` of a call, at ``threads`` threads (the tuned
    program's)."""

    library: str
    formula: str
    seconds: float
    threads: int


@dataclass(frozen=True)
class PeakEstimate:
    """An estimate of the measuring machine's peak float32 speed, in GFLOP/s, and ``how`` it was
    computed (``workers.baselines.peak_estimate``: cores x vector lanes x 2 (FMA) x FMA units x GHz)."""

    gflops: float
    how: str


@dataclass(frozen=True)
class JobRecord:
    """One search job (``keys.job``): a task job (``task_id``) or a model job (``model_id``).

    trials_done / trials_total : measurements made / asked; best_cost_s : the best latency
    (a model's weighted latency) in seconds, best_gflops its speed (None before a success);
    errors : {MeasureErrorNo name: count}; created / started / ended / phase_since : seconds
    since the epoch (None: not yet); error : the one-line failure; cancel : a cancel was asked;
    phase : the running search's phase ("" when none); task_trials : a model job's trials per task;
    first_trials : {task_id: records of the task before this job measured} (its first trial is
    that + 1; written once, when its search starts); baselines : the numpy (and torch) baseline
    timed at the end of a task job ((): none, e.g. a DAG with no numpy formulation, a cuda target);
    peak : the estimated peak of the machine that timed them (None: not estimated).
    """

    job_id: str
    task_id: str
    state: JobState
    trials_total: int = 0
    trials_done: int = 0
    model_id: str | None = None
    best_cost_s: float | None = None
    best_gflops: float | None = None
    errors: Mapping[str, int] = field(default_factory=dict)
    created: float | None = None
    started: float | None = None
    ended: float | None = None
    error: str = ""
    cancel: bool = False
    phase: str = ""
    phase_since: float | None = None
    task_trials: Mapping[str, int] = field(default_factory=dict)
    first_trials: Mapping[str, int] = field(default_factory=dict)
    baselines: tuple[BaselineTiming, ...] = ()
    peak: PeakEstimate | None = None

    @classmethod
    def queued(cls, job_id: str, task_id: str, trials: int, model_id: str | None = None) -> JobRecord:
        """A new job, queued now."""
        return cls(job_id, task_id, JobState.queued, int(trials), model_id=model_id, created=time.time())

    @classmethod
    def from_hash(cls, h: Mapping[Any, Any]) -> JobRecord | None:
        """The record of a job hash; None for an absent one."""
        d = decode_hash(h)
        if not d:
            return None
        trials = {k[len(TASK_TRIALS_PREFIX):]: int(v or 0) for k, v in d.items() if k.startswith(TASK_TRIALS_PREFIX)}
        return cls(d.get("job_id", ""), d.get("task_id", ""), JobState(d.get("state") or JobState.queued.value),
                   int(d.get("trials_total") or 0), int(d.get("trials_done") or 0), d.get("model_id") or None,
                   _float(d.get("best_cost_s")), _float(d.get("best_gflops")), json.loads(d.get("errors") or "{}"),
                   _float(d.get("created")), _float(d.get("started")), _float(d.get("ended")), d.get("error", ""),
                   bool(int(d.get("cancel") or 0)), d.get("phase", ""), _float(d.get("phase_since")), trials,
                   {str(k): int(v) for k, v in json.loads(d.get("first_trials") or "{}").items()},
                   tuple(BaselineTiming(**b) for b in json.loads(d.get("baselines") or "[]")),
                   PeakEstimate(**json.loads(d["peak"])) if d.get("peak") else None)

    def to_hash(self) -> HashFields:
        h: HashFields = {
            "job_id": self.job_id, "task_id": self.task_id, "state": self.state.value,
            "trials_done": int(self.trials_done), "trials_total": int(self.trials_total),
            "best_cost_s": _text(self.best_cost_s), "best_gflops": _text(self.best_gflops),
            "errors": json.dumps(dict(self.errors)), "created": _text(self.created), "started": _text(self.started),
            "ended": _text(self.ended), "error": self.error, "cancel": int(self.cancel)}
        if self.phase or self.phase_since is not None:
            h.update(phase=self.phase, phase_since=_text(self.phase_since))
        if self.model_id is not None:
            h["model_id"] = self.model_id
        h.update({f"{TASK_TRIALS_PREFIX}{t}": int(n) for t, n in self.task_trials.items()})
        if self.first_trials:
            h["first_trials"] = json.dumps({t: int(n) for t, n in self.first_trials.items()})
        if self.baselines:
            h["baselines"] = json.dumps([asdict(b) for b in self.baselines])
        if self.peak is not None:
            h["peak"] = json.dumps(asdict(self.peak))
        return h


@dataclass(frozen=True)
class ModelTaskRef:
    """One task of a model: the graph functions with one DAG (one workload_key) and their calls."""

    task_id: str
    workload_key: str
    functions: tuple[str, ...]
    weight: int

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "workload_key": self.workload_key, "functions": list(self.functions),
                "weight": int(self.weight)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ModelTaskRef:
        return cls(str(obj["task_id"]), str(obj["workload_key"]), tuple(obj.get("functions") or ()),
                   int(obj.get("weight") or 1))


@dataclass(frozen=True)
class ModelRecord:
    """A model's graph on one target (``keys.model_meta``): its tasks, tuning and latest job.

    created : seconds since the epoch; trials_total : trials asked over all its jobs.
    """

    model_id: str
    target: str
    tasks: tuple[ModelTaskRef, ...] = ()
    tuning: Mapping[str, Any] = field(default_factory=dict)
    latest_job_id: str = ""
    created: float = 0.0
    trials_total: int = 0

    @classmethod
    def from_hash(cls, h: Mapping[Any, Any]) -> ModelRecord | None:
        """The record of a model hash; None for an absent one (no target)."""
        d = decode_hash(h)
        if not d.get("target"):
            return None
        tasks = tuple(ModelTaskRef.from_json(t) for t in json.loads(d.get("tasks") or "[]"))
        return cls(d.get("model_id", ""), d["target"], tasks, json.loads(d.get("tuning") or "{}"),
                   d.get("latest_job_id", ""), float(d.get("created") or 0.0), int(d.get("trials_total") or 0))

    def to_hash(self) -> HashFields:
        return {"model_id": self.model_id, "target": self.target, "tuning": json.dumps(dict(self.tuning)),
                "tasks": json.dumps([t.to_json() for t in self.tasks]), "latest_job_id": self.latest_job_id,
                "created": repr(float(self.created)), "trials_total": int(self.trials_total)}
