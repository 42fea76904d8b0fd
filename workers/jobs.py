"""RQ job functions (plain importable functions; arguments are ids and numbers).

    tune_job(task_id, job_id, trials)
      Redis: task hash, DAG, records --> SearchTask, LGBMModel.update(records),
             SketchPolicy with every recorded state marked measured
      --> SketchPolicy.tune(TuningOptions(remaining trials, [RedisRecordSink]))
      --> records, best index, job progress in Redis (after every batch)
      --> best record --apply_layout_rewrite + build--> artifacts (so, o, ll, asm, h)
          and the cost-model snapshot

A retried or re-enqueued job (a worker killed mid-search, RQ's Retry) starts
over from Redis: it measures only ``trials - trials_done`` more states and
never a state already recorded for this workload and target.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from typing import Any

import numpy as np

from scheduler_core.build_module import build
from scheduler_core.layout_rewrite import apply_layout_rewrite
from scheduler_core.measure import LocalBuilder, LocalRunner, MeasureErrorNo
from scheduler_core.measure_record import decode_record
from scheduler_core.search_policy import SketchPolicy, SketchPolicyParams
from scheduler_core.search_task import SearchTask, TuningOptions

from .redis_conn import get_connection
from .store import JobCancelled, RedisRecordSink, RedisStore

ENTRY_NAME = "default_function"   # the C symbol of the compiled best program
ARTIFACT_FORMATS = ("so", "h", "o", "ll", "asm")
# tuning JSON keys that set SketchPolicyParams fields
POLICY_KEYS = ("population", "num_iters", "mutation_prob", "eps_greedy", "sample_init_min_population")


def _connection():
    from rq import get_current_job
    job = get_current_job()
    return job.connection if job is not None else get_connection()


def policy_params(tuning: dict) -> SketchPolicyParams:
    """SketchPolicyParams with the fields given in ``tuning`` (e.g. population=64, num_iters=1)."""
    return SketchPolicyParams(**{k: tuning[k] for k in POLICY_KEYS if tuning.get(k) is not None})


def preload_measured(measured: list):
    """Init-search callback marking every ``(MeasureInput, MeasureResult)`` as measured."""
    def callback(policy) -> None:
        for inp, res in measured:
            ok = res.error_no == MeasureErrorNo.NO_ERROR and res.costs
            policy.add_measured(inp.state, float(np.mean(res.costs)) if ok else None)
    return callback


def tune_job(task_id: str, job_id: str, num_measure_trials: int) -> dict:
    """Search a stored task for ``num_measure_trials`` trials in total for this job.

    Parameters
    ----------
    task_id : str, a task created by RedisStore.create_task
    job_id : str, a job created by RedisStore.create_job
    num_measure_trials : int, measurements this job makes in all runs (retries
        subtract what the job already recorded)

    Tuning keys read from the task: num_measures_per_round, early_stopping, seed,
    timeout_s (seconds per build and per run), min_repeat_ms, verbose, and the
    SketchPolicyParams fields in POLICY_KEYS.

    Returns ``{"state", "trials_done", "best_cost_s"}``.  The job hash ends
    ``finished``, ``cancelled`` or ``failed``; a failure re-raises so that RQ
    retries the job.
    """
    store = RedisStore(_connection())
    job = store.get_job(job_id)
    if job is None:
        raise KeyError(f"unknown job {job_id!r}")
    if job["cancel"]:
        store.set_job_state(job_id, "cancelled")
        return {"state": "cancelled", "trials_done": job["trials_done"], "best_cost_s": job["best_cost_s"]}
    store.set_job_state(job_id, "running")
    try:
        meta = store.get_task(task_id)
        if meta is None:
            raise KeyError(f"unknown task {task_id!r}")
        state = _search(store, meta, job_id, int(num_measure_trials))
        _finalize(store, meta)
    except BaseException as err:
        store.set_job_state(job_id, "failed", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=5)}")
        raise
    store.set_job_state(job_id, state)
    job = store.get_job(job_id)
    return {"state": state, "trials_done": job["trials_done"], "best_cost_s": job["best_cost_s"]}


def _search(store: RedisStore, meta: dict, job_id: str, trials: int) -> str:
    """Run the search; ``"finished"`` or ``"cancelled"``."""
    from cost_model import LGBMModel
    tuning: dict = meta["tuning"]
    wk, target = meta["workload_key"], meta["target"]
    dag = store.load_dag(wk)
    task = SearchTask(compute_dag=dag, workload_key=wk, target=target)
    measured = store.load_measured(wk, target, {wk: dag})
    best = store.best_record(wk, target)
    if best is not None and store.get_job(job_id)["best_cost_s"] is None:
        store.update_job(job_id, best_cost_s=repr(best[0]), best_gflops=repr(dag.flop_ct / best[0] / 1e9))
    remaining = trials - store.get_job(job_id)["trials_done"]
    if remaining <= 0:
        return "finished"
    seed = int(tuning.get("seed") or 0)
    model = LGBMModel(seed=seed)
    if measured:
        model.update([m[0] for m in measured], [m[1] for m in measured])
    policy = SketchPolicy(task, model, params=policy_params(tuning), seed=seed + len(measured),
                          verbose=0, init_search_callbacks=[preload_measured(measured)])
    timeout_s = float(tuning.get("timeout_s") or 10)
    if tuning.get("measure") == "queue":  # measurement workers attached to the device's queue
        from .measure_queue import QueueBuilder, QueueRunner
        builder = QueueBuilder()
        runner = QueueRunner(store.conn, meta["task_id"], target, timeout_s=timeout_s)
    else:
        builder = LocalBuilder(timeout_s=timeout_s)
        runner = LocalRunner(timeout_s=timeout_s, min_repeat_ms=float(tuning.get("min_repeat_ms") or 100))
    options = TuningOptions(num_measure_trials=remaining,
                            num_measures_per_round=int(tuning.get("num_measures_per_round") or 64),
                            early_stopping=tuning.get("early_stopping"), verbose=int(tuning.get("verbose") or 0),
                            builder=builder, runner=runner,
                            measure_callbacks=[RedisRecordSink(store, task, job_id)], seed=seed)
    try:
        policy.tune(options)
        return "finished"
    except JobCancelled:
        return "cancelled"
    finally:
        if hasattr(builder, "close"):
            builder.close()
        runner.close()
        _save_model(store, model, wk, target)


def _save_model(store: RedisStore, model: Any, wk: str, target: str) -> None:
    with tempfile.TemporaryDirectory(prefix="autosched_model_") as tmp:
        path = os.path.join(tmp, "model.json")
        model.save(path)
        with open(path, "rb") as f:
            store.save_model(wk, target, f.read())


def build_best(store: RedisStore, workload_key: str, target: str):
    """``(Module, State)`` of the best record (layout rewrite applied), or None without one."""
    best = store.best_record(workload_key, target)
    if best is None:
        return None
    dag = store.load_dag(workload_key)
    inp, _ = decode_record(best[1], {workload_key: dag})
    state = apply_layout_rewrite(inp.state)
    return build(state, list(dag.tensors), target, name=ENTRY_NAME), state


def _finalize(store: RedisStore, meta: dict) -> None:
    """Store the best program's artifacts (so, h, o, ll, asm) under the task."""
    built = build_best(store, meta["workload_key"], meta["target"])
    if built is None:
        return
    module, _ = built
    task_id = meta["task_id"]
    with tempfile.TemporaryDirectory(prefix="autosched_artifact_") as tmp:
        so = os.path.join(tmp, f"{ENTRY_NAME}.so")
        header = module.export_library(so)
        with open(so, "rb") as f:
            store.save_artifact(task_id, "so", f.read())
        with open(header, "rb") as f:
            store.save_artifact(task_id, "h", f.read())
    store.save_artifact(task_id, "o", module.object_code())
    store.save_artifact(task_id, "ll", module.get_source("ll").encode())
    store.save_artifact(task_id, "asm", module.get_source("asm").encode())
