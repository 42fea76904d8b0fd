"""The model job through a real RQ worker (SimpleWorker, JSON serializer) on a real Redis.

    graph: h1 = dense0(x, w); h2 = test.relu(h1) (library); h3 = dense1(h2, w); out = bias(h3, b)
      dense0 and dense1 have one DAG -> one task of weight 2; bias -> a task of weight 1
    create_model_with_job(2 trials) --enqueue_model_tune--> worker
      --> the first task (by first call) measured, the other untuned: its entry in the artifact
          is the naive schedule ("default"); model.so runs the graph like the reference evaluator
    the same graph again (same model, new job, 4 trials) --> the untuned task is measured, no
      state is measured twice, the artifact now says "tuned" for both; the same job run again
      (an RQ retry) measures nothing new
    "measure": "queue" --> every batch measured by a measurement worker (a child process)

The helpers (graph, running an artifact) are shared with tests/api/test_models.py.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.graph.ir import (
    Call,
    Graph,
    GraphVar,
    PrimFunction,
    TensorType,
    as_ndarray,
    get_func,
    register_func,
    run_reference,
)
from scheduler_core.runtime.loader import load_module
from workers.model_store import ModelStore, model_tasks
from workers.processes import start_worker_process, stop_worker_processes
from workers.queues import enqueue_model_tune, measure_queue_name, tune_queue
from workers.store import ActiveJobError

N, K = 8, 16
TUNING = {"num_measures_per_round": 2, "population": 16, "num_iters": 1, "seed": 0, "min_repeat_ms": 5,
          "repeat": 1}

pytestmark = pytest.mark.integration  # real Redis / RQ worker


def _relu(x, out) -> None:
    out.copyfrom(np.maximum(x.numpy(), 0))  # written in place (out.numpy() would be a copy)


register_func("test.relu", _relu, override=True)


def _dense() -> ComputeDAG:
    A = te.placeholder((N, K), name="A")
    W = te.placeholder((K, K), name="W")
    r = te.reduce_axis((0, K), name="r")
    C = te.compute((N, K), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r), name="dense")
    return ComputeDAG([A, W, C])


def _bias() -> ComputeDAG:
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((N, K), name="B")
    return ComputeDAG([A, B, te.compute((N, K), lambda i, j: A[i, j] + B[i, j], name="bias_add")])


def model_graph() -> Graph:
    """The test model: two functions with one DAG (weight 2), a bias add, a library relu."""
    t = TensorType((N, K))
    v = lambda name: GraphVar(name, t)  # noqa: E731
    funcs = {"dense0": PrimFunction("dense0", _dense()), "dense1": PrimFunction("dense1", _dense()),
             "bias": PrimFunction("bias", _bias())}
    calls = (Call("tir", "dense0", ("x", "w"), (v("h1"),)), Call("library", "test.relu", ("h1",), (v("h2"),)),
             Call("tir", "dense1", ("h2", "w"), (v("h3"),)), Call("tir", "bias", ("h3", "b"), (v("out"),)))
    return Graph((GraphVar("x", t),), (GraphVar("w", TensorType((K, K))), v("b")), calls, ("out",), funcs)


def tir_only_graph() -> Graph:
    """:func:`model_graph` without its library call: dense0, dense1, bias (a C executor exports)."""
    g = model_graph()
    h1, _, h3, out = (c.outputs for c in g.calls)
    calls = (Call("tir", "dense0", ("x", "w"), h1), Call("tir", "dense1", ("h1", "w"), h3),
             Call("tir", "bias", ("h3", "b"), out))
    return Graph(g.inputs, g.params, calls, g.outputs, g.functions)


def model_inputs() -> list:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((N, K), (K, K), (N, K))]


def open_artifact(data: bytes, tmp: Path) -> tuple[Path, str, dict]:
    """Unpack a model .tar.gz into ``tmp``: ``(model.so path, model.h text, graph.json)``."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["graph.json", "model.h", "model.so"]
        tar.extractall(tmp, filter="data")
    return tmp / "model.so", (tmp / "model.h").read_text(), json.loads((tmp / "graph.json").read_text())


def run_artifact(so: Path, graph_json: dict, *args) -> list:
    """Run the graph of ``graph.json`` on numpy arrays: each tir call through its entry of ``so``
    (arguments in the entry's ``args`` order), each library call through the registered function."""
    graph = Graph.from_json(graph_json)
    values = {v.name: a for v, a in zip((*graph.inputs, *graph.params), args)}
    for c in graph.calls:
        ins = [values[a] for a in c.args]
        outs = [np.zeros(o.type.shape, o.type.dtype) for o in c.outputs]
        if c.kind == "tir":
            entry = graph_json["functions"][c.func]["entry"]
            module = load_module(so, entry["symbol"])
            module(*[(ins if kind == "input" else outs)[k] for kind, k in entry["args"]])
        else:
            get_func(c.func)(*[as_ndarray(a) for a in (*ins, *outs)])
        for o, arr in zip(c.outputs, outs):
            values[o.name] = arr
    return [values[o] for o in graph.outputs]


def reference_outputs(args: list) -> list:
    return run_reference(model_graph(), *args)


def _work(conn) -> None:
    SimpleWorker([tune_queue(conn)], connection=conn, serializer=JSONSerializer).work(burst=True)


def test_model_tasks_merge_identical_functions():
    tasks = model_tasks(model_graph())
    assert [(t.functions, t.weight) for t in tasks] == [(("dense0", "dense1"), 2), (("bias",), 1)]


def test_model_job_tunes_every_task_and_builds_one_library(redis_server, tmp_path):
    redis_server.flushall()
    store = ModelStore(redis_server)
    graph = model_graph()
    model_id, tasks, job_id = store.create_model_with_job(graph, "llvm", TUNING, 1)
    dense, bias = tasks
    assert (list(dense.functions), dense.weight, bias.weight) == (["dense0", "dense1"], 2, 1)
    # one active job per task: neither the same model nor one of its tasks can start another
    with pytest.raises(ActiveJobError):
        store.create_model_with_job(graph, "llvm", TUNING, 2)
    with pytest.raises(ActiveJobError):
        store.create_job(bias.task_id, 2)
    enqueue_model_tune(redis_server, model_id, job_id, 1)
    _work(redis_server)
    job = store.get_job(job_id)
    assert job.state == "finished", job.error
    assert job.trials_done == 1 and job.model_id == model_id and job.task_id == ""
    # one trial for two tasks: the first task (by first call) was measured; the other one waits
    # (with 2 trials each task would get one: a round is at most trials / tasks, TVM's rule)
    assert store.task_progress(job_id, [dense.task_id, bias.task_id]) == {dense.task_id: 1, bias.task_id: 0}
    assert store.count_records(dense.workload_key, "llvm") == 1
    assert store.best_record(dense.workload_key, "llvm") is not None
    assert store.load_artifact(dense.task_id, "so")[:4] == b"\x7fELF"   # the task's own artifact
    so, header, gj = open_artifact(store.load_model_artifact(model_id), tmp_path / "first")
    assert gj["functions"]["dense0"]["entry"]["symbol"] == gj["functions"]["dense1"]["entry"]["symbol"] == "dense0"
    assert gj["functions"]["dense0"]["entry"]["schedule"] == "tuned"
    assert gj["functions"]["bias"]["entry"]["schedule"] == "default"   # untuned: the naive schedule
    assert "int32_t dense0(" in header and "int32_t bias(" in header
    args = model_inputs()
    for got, want in zip(run_artifact(so, gj, *args), reference_outputs(args)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    # the same graph again: the same model, a new job that continues from the records
    before = store.step_records(dense.workload_key, "llvm")
    model2, tasks2, job2 = store.create_model_with_job(graph, "llvm", TUNING, 4)
    assert model2 == model_id and [t.task_id for t in tasks2] == [dense.task_id, bias.task_id]
    enqueue_model_tune(redis_server, model_id, job2, 4)
    _work(redis_server)
    job = store.get_job(job2)
    assert job.state == "finished" and job.trials_done == 4, job.error
    progress = store.task_progress(job2, [dense.task_id, bias.task_id])
    assert progress[bias.task_id] >= 2 and sum(progress.values()) == 4   # the unstarted task came first
    after = store.step_records(dense.workload_key, "llvm")
    assert after[:len(before)] == before and len(set(after)) == len(after)
    assert store.count_records(bias.workload_key, "llvm") == progress[bias.task_id]
    described, total = store.describe_tasks(store.get_model(model_id))
    assert total == pytest.approx(sum(t.weight * t.best_cost_s for t in described))
    assert job.best_cost_s == pytest.approx(total)
    # what RQ's retry of the same job runs (a worker died after the last batch): nothing new
    counts = [store.count_records(t.workload_key, "llvm") for t in (dense, bias)]
    enqueue_model_tune(redis_server, model_id, job2, 4)
    _work(redis_server)
    assert store.get_job(job2).state == "finished"
    assert [store.count_records(t.workload_key, "llvm") for t in (dense, bias)] == counts
    so, _, gj = open_artifact(store.load_model_artifact(model_id), tmp_path / "second")
    assert {gj["functions"][f]["entry"]["schedule"] for f in ("dense0", "bias")} == {"tuned"}
    for got, want in zip(run_artifact(so, gj, *args), reference_outputs(args)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_unknown_model_fails_the_job(redis_server):
    store = ModelStore(redis_server)
    _, _, job_id = store.create_model_with_job(model_graph(), "llvm", TUNING, 2)
    enqueue_model_tune(redis_server, "no-such-model", job_id, 2, retries=0)
    _work(redis_server)
    job = store.get_job(job_id)
    assert job.state == "failed" and "no-such-model" in job.error


def test_model_job_measures_on_the_measurement_queue(redis_server):
    """``"measure": "queue"``: each batch goes to a measurement worker as a batch of its own task."""
    redis_server.flushall()
    store = ModelStore(redis_server)
    measurer = start_worker_process(redis_server, (measure_queue_name("llvm"),), burst=False)
    try:
        model_id, tasks, job_id = store.create_model_with_job(model_graph(), "llvm", {**TUNING, "measure": "queue"}, 4)
        enqueue_model_tune(redis_server, model_id, job_id, 4, retries=0)
        _work(redis_server)
    finally:
        stop_worker_processes([measurer])
    job = store.get_job(job_id)
    assert job.state == "finished" and job.trials_done == 4, job.error
    for t in tasks:
        assert store.count_records(t.workload_key, "llvm") == 2
        assert store.best_record(t.workload_key, "llvm") is not None
    assert store.load_model_artifact(model_id)


def _square() -> ComputeDAG:
    A = te.placeholder((N, K), name="A")
    return ComputeDAG([A, te.compute((N, K), lambda i, j: A[i, j] * A[i, j], name="square")])


def test_a_budget_smaller_than_a_round_still_gives_every_task_its_rounds(redis_server):
    """48 trials over 3 tasks with the default 64 programs per round (TVM's task scheduler): a
    round is at most trials / tasks, so each task is measured, none takes the whole budget."""
    redis_server.flushall()
    store = ModelStore(redis_server)
    t = TensorType((N, K))
    v = lambda name: GraphVar(name, t)  # noqa: E731
    funcs = {"dense": PrimFunction("dense", _dense()), "square": PrimFunction("square", _square()),
             "bias": PrimFunction("bias", _bias())}
    calls = (Call("tir", "dense", ("x", "w"), (v("h1"),)), Call("tir", "square", ("h1",), (v("h2"),)),
             Call("tir", "bias", ("h2", "b"), (v("out"),)))
    graph = Graph((GraphVar("x", t),), (GraphVar("w", TensorType((K, K))), v("b")), calls, ("out",), funcs)
    tuning = {k: v for k, v in TUNING.items() if k != "num_measures_per_round"}  # the default, 64
    model_id, tasks, job_id = store.create_model_with_job(graph, "llvm", tuning, 48)
    assert len(tasks) == 3
    enqueue_model_tune(redis_server, model_id, job_id, 48)
    _work(redis_server)
    job = store.get_job(job_id)
    assert job.state == "finished", job.error
    progress = store.task_progress(job_id, [task.task_id for task in tasks])
    assert all(n >= 1 for n in progress.values()) and max(progress.values()) <= 32, progress
