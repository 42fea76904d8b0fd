"""Whole models in Redis: one model over ordinary tasks, one job over all of them.

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
import io
import json
import time
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import redis

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.graph.ir import Graph
from scheduler_core.search.tuning_options import TuningOptions

from . import keys
from .admission import (
    Admission,
    AdmissionError,
    admit,
    new_job_fields,
    watch_admission,
)
from .records import ModelRecord, ModelTaskRef, as_text
from .store import RedisStore, canonical_target, stage_task, watch_task


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


@dataclass(frozen=True)
class ModelTaskProgress:
    """A task of a model with its best so far: ``best_cost_s`` (seconds, None before a successful
    measurement) and ``best_gflops``; ``trials``: records of the task over all its jobs;
    ``job_trials``: measured by one model job; ``flop_ct``: floating-point operations of one call."""

    task_id: str
    workload_key: str
    functions: tuple[str, ...]
    weight: int
    best_cost_s: float | None
    best_gflops: float | None
    trials: int
    job_trials: int
    flop_ct: float


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


def encode_params(params: Mapping[str, Any]) -> bytes:
    """``{param name: array}`` as the bytes of an uncompressed ``.npz`` (``numpy.savez``)."""
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in params.items()}
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode_params(data: bytes, graph: Graph | None = None) -> dict[str, np.ndarray]:
    """The arrays of ``.npz`` bytes (no pickled objects); with ``graph``, each checked against the
    graph's param of that name (``Graph.bind_params``).  Raises InvalidWorkloadError (path
    ``params`` or ``params.<name>``) for bytes that are not an .npz, an object array, a name
    that is not a param or a shape/dtype that differs from the param's."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            out = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise InvalidWorkloadError(f"not a readable .npz of arrays: {type(err).__name__}: {err}", "params") from None
    if graph is not None:
        types = {p.name: p.type for p in graph.params}
        for name, arr in out.items():
            if name not in types:
                raise InvalidWorkloadError(f"{name!r} is not a param of the graph (params: {sorted(types)})",
                                           f"params.{name}")
            want = types[name]
            if arr.shape != want.shape or str(arr.dtype) != want.dtype:
                raise InvalidWorkloadError(f"expected {want.dtype}{list(want.shape)}, got {arr.dtype}{list(arr.shape)}",
                                           f"params.{name}")
    return out


def graph_digest(graph: Graph) -> str:
    """sha256 of the graph's canonical JSON (sorted keys): the identity of a model's structure."""
    return hashlib.sha256(json.dumps(graph.to_json(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ModelStore(RedisStore):
    """:class:`RedisStore` plus whole models (see the module docstring and :mod:`workers.keys`)."""

    def create_model_with_job(self, graph: Graph, target: str, tuning: TuningOptions | dict | None,
                              trials: int, admission: Admission | None = None, params: bytes | None = None
                              ) -> tuple[str, tuple[ModelTaskRef, ...], str]:
        """Store ``graph`` as a model on ``target`` with a new queued job of ``trials`` trials;
        ``params``: its weights (:func:`encode_params` bytes, checked by :func:`decode_params`),
        stored in the same transaction (the model keeps earlier weights when None).

        Returns ``(model_id, tasks, job_id)``.  Raises ActiveJobError when one of its tasks has an
        active job, AdmissionError over a limit of ``admission`` (``max_task_trials`` bounds the
        model's trials over all its jobs), InvalidWorkloadError for a graph without a tensor program;
        nothing is written then.
        The caller enqueues the job (``workers.queues.enqueue_model_tune``).
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
                    model_id = as_text(existing) if existing is not None else uuid.uuid4().hex
                    p.watch(keys.model_meta(model_id))
                    watched = [watch_task(p, t.workload_key, target, job_wanted=True) for t in tasks]
                    stale: tuple[list[str], list[str]] = ([], [])
                    if admission is not None:
                        asked = int(p.hget(keys.model_meta(model_id), "trials_total") or 0)
                        if admission.max_task_trials is not None and asked + trials > admission.max_task_trials:
                            raise AdmissionError("max_task_trials", admission.max_task_trials, asked, model_id)
                        stale = watch_admission(p, replace(admission, max_task_trials=None), model_id, False, trials)
                    now_s = time.time()
                    refs = tuple(ModelTaskRef(w.task_id, t.workload_key, tuple(t.functions), t.weight)
                                 for w, t in zip(watched, tasks))
                    p.multi()
                    for w, t in zip(watched, tasks):
                        stage_task(p, w, t.workload_key, target, t.dag.to_json(), tuning_text, job_id, now_s)
                    p.set(keys.model_graph(model_id), graph_text)
                    if params is not None:
                        p.set(keys.model_params(model_id), params)
                    meta: dict[Any, Any] = {"model_id": model_id, "target": target, "tuning": tuning_text,
                            "tasks": json.dumps([r.to_json() for r in refs]), "latest_job_id": job_id}
                    if existing is None:
                        meta["created"] = repr(now_s)
                        p.set(index, model_id)
                    p.hset(keys.model_meta(model_id), mapping=meta)
                    p.hincrby(keys.model_meta(model_id), "trials_total", trials)
                    p.hset(keys.job(job_id), mapping=new_job_fields(job_id, "", trials, model_id))
                    admit(p, admission, job_id, stale)
                    p.execute()
                    return model_id, refs, job_id
                except redis.WatchError:
                    continue

    def load_params(self, model_id: str) -> dict[str, np.ndarray]:
        """The model's stored weights (``{param name: array}``; empty when none were sent)."""
        data = self.conn.get(keys.model_params(model_id))
        return decode_params(data.encode() if isinstance(data, str) else data) if data else {}

    def get_model(self, model_id: str) -> ModelRecord | None:
        """The model's record, or None for an unknown id."""
        return ModelRecord.from_hash(self.conn.hgetall(keys.model_meta(model_id)))

    def load_graph(self, model_id: str) -> Graph:
        """The stored graph of a model; KeyError when none is stored."""
        text = self.conn.get(keys.model_graph(model_id))
        if text is None:
            raise KeyError(f"no graph stored for model {model_id!r}")
        return Graph.from_json(as_text(text))

    def describe_tasks(self, meta: ModelRecord,
                       job_id: str | None = None) -> tuple[list[ModelTaskProgress], float | None]:
        """Each task of a model with its best so far (``job_trials``: measured by ``job_id``, default
        the model's latest job), and the weighted sum of the best latencies in seconds (None while a
        task has none)."""
        job_id = job_id or meta.latest_job_id
        done = self.task_progress(job_id, [t.task_id for t in meta.tasks]) if job_id else {}
        out: list[ModelTaskProgress] = []
        total: float | None = 0.0
        for t in meta.tasks:
            best = self.best_record(t.workload_key, meta.target)
            cost = best[0] if best else None
            flop = self.load_dag(t.workload_key).flop_ct
            out.append(ModelTaskProgress(t.task_id, t.workload_key, t.functions, t.weight, cost,
                                         flop / cost / 1e9 if cost else None,
                                         self.count_records(t.workload_key, meta.target),
                                         done.get(t.task_id, 0), flop))
            total = total + t.weight * cost if (cost is not None and total is not None) else None
        return out, total

    def save_model_artifact(self, model_id: str, data: bytes) -> None:
        self.conn.set(keys.model_artifact(model_id), data)

    def load_model_artifact(self, model_id: str) -> bytes | None:
        data = self.conn.get(keys.model_artifact(model_id))
        return data.encode() if isinstance(data, str) else data
