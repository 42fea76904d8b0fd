"""Logging of the workers: the search's phases, the per-job Redis log, the worker's log file.

    SketchPolicy.on_phase (library)  --> sketches, initial population, evolution, building, measuring
    configure_worker_logging(dir)    --> one RotatingFileHandler at dir/logs/worker.log (idempotent)
    job_logging(conn, job_id)        --> the job's records as one-line entries of a capped Redis list
    a real tune job in a real RQ worker process (FileLoggingWorker: file logging)
      --> its Redis log (start, phases, batches, artifacts, end), worker.log with [job=<id>],
          GET /jobs/{id}/logs (text, ?tail=N, 404), GET /jobs/{id} phase "" once ended,
          and nothing on the worker's stdout/stderr
"""

from __future__ import annotations

import logging
import re
import subprocess
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from rq import SimpleWorker
from rq.serializers import JSONSerializer

import scheduler_core as sc
from api.main import create_app
from api.schemas import JobPublic
from api.settings import Settings
from cost_model import RandomModel
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.data import MeasureErrorNo, MeasureResult
from sketch_rules import SketchPolicyParams
from tests.workloads import matmul_add
from workers import keys
from workers.job_logs import job_logging, read_job_log
from workers.jobs import BatchLog
from workers.logging_setup import (
    API_HANDLER_NAME,
    WORKER_HANDLER_NAME,
    configure_api_logging,
    configure_worker_logging,
)
from workers.processes import stop_worker_processes, worker_command, worker_env
from workers.queues import TUNE_QUEUE, enqueue_tune, tune_queue
from workers.redis_conn import connection_url
from workers.store import RedisStore

PHASES = ["sketches", "initial population", "evolution", "building", "measuring"]
ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
TUNING = {"num_measures_per_round": 4, "population": 32, "num_iters": 1, "seed": 0, "min_repeat_ms": 5}


@pytest.fixture
def clean_logging():
    """Restore the root logger's handlers and the levels the tests change."""
    root = logging.getLogger()
    names = ("workers", "api", "scheduler_core", "sketch_rules", "cost_model", "rq", "rq.worker", "rq.job")
    saved = (list(root.handlers), root.level, {n: (logging.getLogger(n).level, logging.getLogger(n).propagate)
                                               for n in names})
    yield
    for h in list(root.handlers):
        if h not in saved[0]:
            root.removeHandler(h)
            h.close()
    for h in saved[0]:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(saved[1])
    for n, (level, propagate) in saved[2].items():
        logging.getLogger(n).setLevel(level)
        logging.getLogger(n).propagate = propagate
    logging.captureWarnings(False)


def test_sketch_policy_reports_its_phases_in_order():
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(16, 16, 16)), target="llvm")
    policy = sc.SketchPolicy(task, RandomModel(rng=np.random.default_rng(0)),
                             params=SketchPolicyParams(population=16, num_iters=1), seed=0, verbose=0)
    seen: list[str] = []
    policy.on_phase = seen.append
    policy.tune(sc.TuningOptions(num_measure_trials=4, num_measures_per_round=2, verbose=0, min_repeat_ms=5))
    assert seen.count("evolution") > seen.count("building")  # entered, then again at every generation
    seen = [p for k, p in enumerate(seen) if k == 0 or p != seen[k - 1]]  # a phase as it is entered
    assert seen[:5] == PHASES
    assert seen.count("sketches") == 1  # the sketches are made once, the rest once per round
    rounds = seen[1:]
    assert len(rounds) % 4 == 0 and rounds == PHASES[1:] * (len(rounds) // 4), seen
    assert len(rounds) // 4 >= 2  # 4 trials, 2 per round


def test_worker_logging_is_idempotent_and_writes_iso_utc_lines_with_the_job_id(tmp_path, clean_logging):
    path = configure_worker_logging(tmp_path, "INFO")
    assert configure_worker_logging(tmp_path, "INFO") == path == tmp_path / "logs" / "worker.log"
    root = logging.getLogger()
    assert [h.get_name() for h in root.handlers].count(WORKER_HANDLER_NAME) == 1
    log = logging.getLogger("workers.test_job_logging")
    log.info("outside any job")
    with job_logging(_FakeConn(), "job-1"):
        log.info("inside the job")
    for h in root.handlers:
        h.flush()
    lines = path.read_text().splitlines()
    assert re.fullmatch(ISO_UTC + r" INFO workers\.test_job_logging \[job=-\] outside any job", lines[-2]), lines
    assert re.fullmatch(ISO_UTC + r" INFO workers\.test_job_logging \[job=job-1\] inside the job", lines[-1]), lines
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure_worker_logging(tmp_path, "LOUD")


def test_api_logging_is_idempotent(clean_logging):
    configure_api_logging("INFO")
    configure_api_logging("DEBUG")
    names = [h.get_name() for h in logging.getLogger().handlers]
    assert names.count(API_HANDLER_NAME) == 1
    assert logging.getLogger("api").level == logging.DEBUG


class _FakeConn:
    """Stands in for Redis where only the file matters: a pipeline that drops what it is given."""

    def pipeline(self, transaction=False):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def rpush(self, *a):
        pass

    def ltrim(self, *a):
        pass

    def execute(self):
        return []


def test_job_log_is_capped_one_line_per_record_and_only_the_jobs_own(conn):
    log = logging.getLogger("workers.test_job_logging")
    with job_logging(conn, "job-a", cap=5):
        for k in range(12):
            log.info("line %d", k)
        try:
            raise ValueError("bad\nthing")
        except ValueError:
            log.exception("it failed")
    log.warning("after the job")  # not in the job's context: not in its list
    lines = read_job_log(conn, "job-a")
    assert len(lines) == 5 and conn.llen(keys.job_log("job-a")) == 5
    assert lines[-1].endswith("ERROR workers.test_job_logging: it failed | ValueError: bad thing")
    assert re.fullmatch(ISO_UTC + r" INFO workers\.test_job_logging: line 11", lines[-2])
    assert read_job_log(conn, "job-a", tail=2) == lines[-2:]
    assert read_job_log(conn, "job-a", tail=0) == []
    assert read_job_log(conn, "nobody") == []
    with pytest.raises(ValueError, match="tail must be >= 0"):
        read_job_log(conn, "job-a", tail=-1)


@pytest.mark.integration
def test_a_tune_job_in_a_worker_process_logs_to_redis_and_its_file_only(conn, tmp_path):
    store = RedisStore(conn)
    dag = ComputeDAG(matmul_add(16, 16, 16))
    task_id, _, job_id = store.create_task_with_job(dag.to_json(), "llvm", TUNING, 8)
    enqueue_tune(conn, task_id, job_id, 8)
    data_dir = tmp_path / "data"
    url = connection_url(conn)
    worker = subprocess.Popen(worker_command(url, (TUNE_QUEUE,), burst=True), env=worker_env(data_dir),
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    phases: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while worker.poll() is None and time.monotonic() < deadline:
            running = store.get_job(job_id)
            phase = running.phase if running else None
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
                since = JobPublic.model_validate(running).model_dump(mode="json")["phase_since"]
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", since), since
            time.sleep(0.02)
        out, err = worker.communicate(timeout=30)
    finally:
        stop_worker_processes([worker])
    job = store.get_job(job_id)
    assert job.state == "finished", job.error
    # nothing reached the terminal: RQ's own lines and the job's go to the file
    assert out.decode().strip() == "" and err.decode().strip() == "", (out, err)
    # the phases polled from the job hash follow the search's order (polling may miss short ones)
    order = {p: k for k, p in enumerate(PHASES + ["saving"])}
    assert phases and all(p in order for p in phases), phases
    assert job.phase == "" and job.phase_since is None  # cleared: "" in the hash

    lines = read_job_log(conn, job_id)
    text = "\n".join(lines)
    assert f"job {job_id} started: task {task_id}, 8 trials" in lines[0]
    assert all(re.match(ISO_UTC + r" (INFO|WARNING|ERROR) [\w.]+: ", line) for line in lines), lines
    logged_phases = [line.split("phase: ")[1] for line in lines if "phase: " in line]
    assert logged_phases[:5] == PHASES and logged_phases[-1] == "saving", logged_phases
    batches = [line for line in lines if " measured: 4 programs" in line]
    assert len(batches) == 2, text
    assert "best " in batches[-1] and "GFLOP/s" in batches[-1]
    assert any("artifacts of task " + task_id + " written: so, h, o, ll, asm" in line for line in lines), text
    assert f"job {job_id} ended finished: 8 trials" in lines[-1]

    log_file = data_dir / "logs" / "worker.log"
    file_text = log_file.read_text()
    assert f"[job={job_id}] job {job_id} started" in file_text
    assert f"[job={job_id}] job {job_id} ended finished" in file_text
    assert re.search(ISO_UTC + r" INFO rq\.worker \[job=-\] ", file_text), file_text[:2000]  # RQ's own lines

    url_http = f"unix://{conn.connection_pool.connection_kwargs['path']}"
    client = TestClient(create_app(Settings(redis_url=url_http)))
    r = client.get(f"/jobs/{job_id}/logs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.splitlines() == lines
    r = client.get(f"/jobs/{job_id}/logs", params={"tail": 2})
    assert r.text.splitlines() == lines[-2:]
    assert client.get("/jobs/nope/logs").status_code == 404
    assert client.get(f"/jobs/{job_id}/logs", params={"tail": -1}).status_code == 422
    body = client.get(f"/jobs/{job_id}").json()
    assert body["phase"] == "" and body["phase_since"] is None and body["state"] == "finished"


def test_batch_log_warns_with_the_errors_by_kind_and_the_first_message(conn):
    ok = MeasureResult((2e-3, 2e-3, 2e-3), MeasureErrorNo.NO_ERROR, "", 0.1, 0.0)
    timeout = MeasureResult((1e10,), MeasureErrorNo.RUN_TIMEOUT, "ran over\n 3 s", 3.0, 0.0)
    crash = MeasureResult((1e10,), MeasureErrorNo.RUNTIME_DEVICE, "signal 11", 0.1, 0.0)
    with job_logging(conn, "job-b"):
        batch = BatchLog(flop_ct=2e6, best_cost_s=3e-3)
        batch(None, [None] * 4, [ok, timeout, timeout, crash])
    lines = read_job_log(conn, "job-b")
    assert lines[0].endswith("INFO workers.jobs: batch measured: 4 programs, 3 errors, best 2 ms "
                             "(1.00 GFLOP/s) (4 this run)"), lines
    assert lines[1].endswith("WARNING workers.jobs: 3 of 4 measurements failed: RUNTIME_DEVICE x1, "
                             "RUN_TIMEOUT x2; first: ran over 3 s"), lines


@pytest.mark.integration
def test_a_failed_job_logs_the_one_line_error_and_its_end(conn):
    store = RedisStore(conn)
    task_id, _, job_id = store.create_task_with_job(ComputeDAG(matmul_add(8, 8, 8)).to_json(), "llvm", TUNING, 2)
    conn.delete(keys.task(task_id))  # the job now names an unknown task: a deterministic failure
    enqueue_tune(conn, task_id, job_id, 2)
    SimpleWorker([tune_queue(conn)], connection=conn, serializer=JSONSerializer).work(burst=True)
    job = store.get_job(job_id)
    assert job.state == "failed" and job.phase == ""
    lines = read_job_log(conn, job_id)
    assert lines[-2].endswith(f"ERROR workers.jobs: job {job_id} failed: UnknownTaskError: "
                              f"unknown task '{task_id}'"), lines
    assert lines[-1].endswith(f"INFO workers.jobs: job {job_id} ended failed: 0 trials, best none"), lines
