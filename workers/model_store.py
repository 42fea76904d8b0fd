"""Whole models in Redis: one model over ordinary tasks, one job over all of them (issue 12).

    POST /models --create_model_with_job--> in one WATCH/MULTI/EXEC:
        per distinct workload_key of the graph's tensor programs: its DAG, its task (created, or
            the existing task of that workload and target: its records are reused) whose
            ``latest_job_id`` becomes the model job;
        the graph JSON, the model hash (tasks, weights, tuning), the model_for_graph index;
        the job hash (``task_id`` empty, ``model_id`` set) and the admission limits.
    ActiveJobError (nothing written) while any of those tasks has a queued or running job, so a
    task is never searched by two jobs at once, whether they are model or task jobs.

A model is its graph on one target: the same graph (same canonical JSON) POSTed again on the
same target is the same model, and its new job continues from every task's records.  Keys come
from :mod:`workers.keys`; the transaction helpers are those of :mod:`workers.store`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

import redis
from rq import Retry

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.graph.ir import Graph
from scheduler_core.search.tuning_options import TuningOptions

from . import keys
from .admission import (
    ActiveJobError,
    Admission,
    AdmissionError,
    admit,
    new_job_fields,
    watch_active_job,
    watch_admission,
)
from .queues import DEFAULT_JOB_TIMEOUT_S, DEFAULT_RETRIES, tune_queue
from .store import RedisStore, canonical_target

MODEL_JOB_FUNC = "workers.model_jobs.model_tune_job"


@dataclass(frozen=True)
class ModelTask:
    """One task of a model: the tensor programs of one workload_key.

    workload_key : the DAG's key; dag : its ComputeDAG; functions : names of the graph
    functions with this DAG (in order of first call); weight : how many calls run it
    (the latency weight of Ansor's task scheduler).
    """

    workload_key: str
    dag: ComputeDAG
    functions: tuple
    weight: int


def model_tasks(graph: Graph) -> list[ModelTask]:
    """The tasks of ``graph``: one per distinct workload_key of its tir calls, in order of first call.

    Identical functions (same DAG) are one task whose weight counts the calls of all of them,
    as ``extract_tasks`` merges them.  Library calls are not tuned.  Raises
    InvalidWorkloadError (path ``calls``) for a graph without a tensor-program call.
    """
    found: dict[str, dict] = {}
    for _, call, func in graph.tir_calls():
        entry = found.setdefault(func.workload_key, {"dag": func.dag, "functions": [], "weight": 0})
        if call.func not in entry["functions"]:
            entry["functions"].append(call.func)
        entry["weight"] += 1
    if not found:
        raise InvalidWorkloadError("the graph calls no tensor program (tir function): nothing to tune", "calls")
    return [ModelTask(wk, e["dag"], tuple(e["functions"]), e["weight"]) for wk, e in found.items()]


def graph_digest(graph: Graph) -> str:
    """sha256 of the graph's canonical JSON (sorted keys): the identity of a model's structure."""
    return hashlib.sha256(json.dumps(graph.to_json(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class ModelStore(RedisStore):
    """:class:`RedisStore` plus whole models (see the module docstring and :mod:`workers.keys`)."""

    def create_model_with_job(self, graph: Graph, target: str, tuning: TuningOptions | dict | None,
                              trials: int, admission: Admission | None = None) -> tuple[str, list[dict], str]:
        """Store ``graph`` as a model on ``target`` with a new queued job of ``trials`` trials.

        Returns ``(model_id, tasks, job_id)``; each task is ``{task_id, workload_key, functions,
        weight}``.  Raises ActiveJobError when one of its tasks has an active job, AdmissionError
        over a limit of ``admission`` (``max_task_trials`` bounds the model's trials over all its
        jobs), InvalidWorkloadError for a graph without a tensor program; nothing is written then.
        The caller enqueues the job (:func:`enqueue_model_tune`).
        """
        if not isinstance(tuning, TuningOptions):
            tuning = TuningOptions.from_json(dict(tuning or {}))
        tasks = model_tasks(graph)
        target = canonical_target(target)
        graph_text, tuning_text = json.dumps(graph.to_json()), json.dumps(tuning.to_json())
        index = keys.model_for_graph(graph_digest(graph), target)
        job_id, trials = uuid.uuid4().hex, int(trials)
        with self.conn.pipeline(transaction=True) as p:
            while True:
                try:
                    p.watch(index)
                    existing = p.get(index)
                    model_id = _s(existing) if existing is not None else uuid.uuid4().hex
                    p.watch(keys.model_meta(model_id))
                    ids, complete = [], []
                    for t in tasks:
                        tindex = keys.task_for_workload(t.workload_key, target)
                        p.watch(tindex)
                        found = p.get(tindex)
                        task_id = _s(found) if found is not None else uuid.uuid4().hex
                        p.watch(keys.task(task_id))
                        if found is not None:
                            active = watch_active_job(p, task_id)
                            if active is not None:
                                raise ActiveJobError(task_id, *active)
                        ids.append((task_id, found is None))
                        complete.append(found is not None and p.hexists(keys.task(task_id), "workload_key"))
                    stale: tuple[list[str], list[str]] = ([], [])
                    if admission is not None:
                        asked = int(p.hget(keys.model_meta(model_id), "trials_total") or 0)
                        if admission.max_task_trials is not None and asked + trials > admission.max_task_trials:
                            raise AdmissionError("max_task_trials", admission.max_task_trials, asked, model_id)
                        stale = watch_admission(p, replace(admission, max_task_trials=None), model_id, False, trials)
                    now = repr(time.time())
                    public = [{"task_id": tid, "workload_key": t.workload_key, "functions": list(t.functions),
                               "weight": t.weight} for (tid, _), t in zip(ids, tasks)]
                    p.multi()
                    for (task_id, new_index), done, t in zip(ids, complete, tasks):
                        p.setnx(keys.dag(t.workload_key), t.dag.to_json())
                        if new_index:
                            p.set(keys.task_for_workload(t.workload_key, target), task_id)
                        fields: dict[Any, Any] = {"tuning": tuning_text, "latest_job_id": job_id}
                        if not done:
                            fields.update(task_id=task_id, workload_key=t.workload_key, target=target, created=now)
                            p.zadd(keys.tasks_by_created(), {task_id: float(now)})  # workers.task_index
                        p.hset(keys.task(task_id), mapping=fields)
                    p.set(keys.model_graph(model_id), graph_text)
                    meta: dict[Any, Any] = {"model_id": model_id, "target": target, "tuning": tuning_text,
                            "tasks": json.dumps(public), "latest_job_id": job_id}
                    if existing is None:
                        meta["created"] = now
                        p.set(index, model_id)
                    p.hset(keys.model_meta(model_id), mapping=meta)
                    p.hincrby(keys.model_meta(model_id), "trials_total", trials)
                    p.hset(keys.job(job_id), mapping={**new_job_fields(job_id, "", trials), "model_id": model_id})
                    admit(p, admission, job_id, stale)
                    p.execute()
                    return model_id, public, job_id
                except redis.WatchError:
                    continue

    def get_model(self, model_id: str) -> dict | None:
        """The model hash with ``tasks`` and ``tuning`` decoded, or None for an unknown id."""
        h: dict[str, Any] = {_s(k): _s(v) for k, v in self.conn.hgetall(keys.model_meta(model_id)).items()}
        if not h.get("target"):
            return None
        h["tasks"] = json.loads(h.get("tasks") or "[]")
        h["tuning"] = json.loads(h.get("tuning") or "{}")
        h["created"] = float(h.get("created") or 0.0)
        h["trials_total"] = int(h.get("trials_total") or 0)
        return h

    def load_graph(self, model_id: str) -> Graph:
        """The stored graph of a model; KeyError when none is stored."""
        text = self.conn.get(keys.model_graph(model_id))
        if text is None:
            raise KeyError(f"no graph stored for model {model_id!r}")
        return Graph.from_json(_s(text))

    def task_progress(self, job_id: str, task_ids: list[str]) -> dict[str, int]:
        """``{task_id: trials this model job measured for it}``."""
        values = self.conn.hmget(keys.job(job_id), [f"trials_done:{t}" for t in task_ids]) if task_ids else []
        return {t: int(v or 0) for t, v in zip(task_ids, values)}

    def add_task_trials(self, job_id: str, task_id: str, n: int, pipeline=None):
        """HINCRBY the model job's ``trials_done:<task_id>`` by ``n``."""
        return (pipeline or self.conn).hincrby(keys.job(job_id), f"trials_done:{task_id}", int(n))

    def describe_tasks(self, meta: dict, job_id: str | None = None) -> tuple[list[dict], float | None]:
        """Each task of a model (hash from :meth:`get_model`) with its best so far, and the total.

        Per task: task_id, workload_key, functions, weight, ``best_cost_s`` (seconds, None
        before a successful measurement), ``best_gflops``, ``trials`` (records of the task over
        all its jobs), ``job_trials`` (measured by ``job_id``, default the model's latest job) and
        ``flop_ct`` (floating-point operations of one call).
        The total is the weighted sum of the best latencies in seconds (None while a task has none).
        """
        job_id = job_id or meta.get("latest_job_id") or ""
        tasks = meta["tasks"]
        done = self.task_progress(job_id, [t["task_id"] for t in tasks]) if job_id else {}
        out: list[dict] = []
        total: float | None = 0.0
        for t in tasks:
            best = self.best_record(t["workload_key"], meta["target"])
            cost = best[0] if best else None
            flop = self.load_dag(t["workload_key"]).flop_ct
            out.append({**t, "best_cost_s": cost, "best_gflops": flop / cost / 1e9 if cost else None,
                        "trials": self.count_records(t["workload_key"], meta["target"]),
                        "job_trials": done.get(t["task_id"], 0), "flop_ct": flop})
            total = total + t["weight"] * cost if (cost is not None and total is not None) else None
        return out, total

    def save_model_artifact(self, model_id: str, data: bytes) -> None:
        self.conn.set(keys.model_artifact(model_id), data)

    def load_model_artifact(self, model_id: str) -> bytes | None:
        data = self.conn.get(keys.model_artifact(model_id))
        return data.encode() if isinstance(data, str) else data


def enqueue_model_tune(conn: redis.Redis, model_id: str, job_id: str, trials: int,
                       job_timeout_s: int | None = None, retries: int = DEFAULT_RETRIES):
    """Enqueue ``model_tune_job(model_id, job_id, trials)`` on the ``tune`` queue; the rq.Job.

    As ``enqueue_tune``: the RQ job id is ``job_id``; a retry (or a job requeued after its
    worker died) continues from the records.  job_timeout_s in seconds (default 6 hours).
    """
    return tune_queue(conn).enqueue(
        MODEL_JOB_FUNC, args=(model_id, job_id, int(trials)), job_id=job_id,
        job_timeout=int(job_timeout_s or DEFAULT_JOB_TIMEOUT_S),
        retry=Retry(max=retries) if retries > 0 else None, result_ttl=7 * 24 * 3600, failure_ttl=7 * 24 * 3600)

