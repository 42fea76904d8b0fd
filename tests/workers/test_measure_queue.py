"""Measurement on a device queue: a measurement worker killed mid-batch does not lose the
batch; RQ re-runs it on another measurement worker and the search completes."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

import scheduler_core as sc
from tests.workloads import matmul_add
from workers.processes import start_worker_process
from workers.queues import enqueue_tune, measure_queue_name
from workers.store import RedisStore

pytestmark = pytest.mark.integration  # real Redis / RQ worker processes


def _kill_tree(pid: int) -> None:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_measurement_worker_killed_mid_batch_is_rerun_elsewhere(conn):
    store = RedisStore(conn)
    dag = sc.ComputeDAG(matmul_add(48, 48, 48))
    tuning = {"num_measures_per_round": 4, "population": 32, "num_iters": 1, "measure": "queue"}
    task_id, wk = store.create_task(dag.to_json(), "llvm", tuning)
    job_id = store.create_job(task_id, 8)
    enqueue_tune(conn, task_id, job_id, 8)
    mq = measure_queue_name("llvm")
    tuner = start_worker_process(conn, ("tune",), burst=True)
    measurer = start_worker_process(conn, (mq,), burst=False)
    started = StartedJobRegistry(mq, connection=conn, serializer=JSONSerializer)
    try:
        t0 = time.time()
        while not started.get_job_ids() and time.time() - t0 < 120:
            time.sleep(0.05)
        assert started.get_job_ids(), "no measurement job started"
        _kill_tree(measurer.pid)  # dies mid-batch, as a lost machine would
        measurer.wait(timeout=30)
        started.cleanup(timestamp=time.time() + 10**7)  # RQ's maintenance: the orphan is retried
        measurer = start_worker_process(conn, (mq,), burst=False)
        tuner.wait(timeout=600)
    finally:
        _kill_tree(measurer.pid)
        if tuner.poll() is None:  # the test failed before the search ended
            _kill_tree(tuner.pid)
    job = store.get_job(job_id)
    assert job.state == "finished", job
    steps = [json.dumps(json.loads(line)["i"][1]) for line in store.iter_records(wk, store.get_task(task_id).target)]
    assert len(steps) == 8 and len(set(steps)) == 8
    ok = [json.loads(line) for line in store.iter_records(wk, store.get_task(task_id).target)]
    assert sum(1 for r in ok if r["r"][1] == 0) >= 4  # the re-run batch measured for real
