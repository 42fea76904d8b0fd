"""Read-path latency of the service under load: p50/p99 of GET /tasks/{id} and /tasks/{id}/curve
beside /healthz, in the same run, at a given concurrency.

``autosched serve`` runs as its own process (embedded Redis in a temporary data directory, one
RQ worker); a real task is tuned first (matmul 128^3, ``--trials`` measurements), so the curve
has that many real records.  Then ``--requests`` GETs per route are sent by ``--concurrency``
concurrent httpx clients (asyncio, HTTP/1.1 keep-alive), the three routes interleaved, and each
request's latency is recorded.  The figure of merit is each route's p99 over /healthz's p99.

Usage:  python benchmarks/api_load.py [--concurrency 100] [--requests 1000] [--trials 64]
                                      [--out benchmarks/results/api_load.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
from bench_util import cpu_isa, cpu_model  # same folder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import scheduler_core as sc  # noqa: E402
from api.client import Client  # noqa: E402
from tests.workloads import matmul  # noqa: E402
from workers.redis_conn import socket_path  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(server: subprocess.Popen, data_dir: Path) -> None:
    """Stop serve (SIGTERM: it stops its workers and its Redis), SIGKILL what is left of its process
    group, then any process still on ``data_dir``'s Redis socket (its command line names it: the
    embedded redis-server, daemonized, and RQ workers, in sessions of their own, outlive a serve
    killed before its cleanup)."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    sock = socket_path(data_dir)
    left = [p for p in psutil.process_iter(["cmdline"]) if any(sock in a for a in (p.info["cmdline"] or []))]
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    for p in psutil.wait_procs(left, timeout=15)[1]:
        with contextlib.suppress(psutil.Error):
            p.kill()


async def _load(base: str, paths: list, requests: int, concurrency: int) -> dict:
    """``requests`` GETs of each path, interleaved, ``concurrency`` at a time: path -> seconds."""
    todo = [p for _ in range(requests) for p in paths]
    lat: dict = {p: [] for p in paths}
    errors: dict = {p: 0 for p in paths}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as client:
        it = iter(todo)

        async def worker() -> None:
            for path in it:
                t0 = time.perf_counter()
                try:
                    r = await client.get(path)
                except httpx.TransportError:  # e.g. a keep-alive connection the server closed
                    errors[path] += 1
                    continue
                dt = time.perf_counter() - t0
                if r.status_code == 200:
                    lat[path].append(dt)
                else:
                    errors[path] += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return {"latency": lat, "errors": errors, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--requests", type=int, default=1000, help="GETs per route")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--out", default="benchmarks/results/api_load.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="autosched_api_load_"))
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp))
    env.pop("REDIS_URL", None)
    env.pop("AUTOSCHED_API_TOKEN", None)
    server = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port), "--workers", "1",
                               "--data-dir", str(tmp / "data")], cwd=tmp, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        with Client(base) as c:
            for _ in range(240):
                try:
                    c.healthz()
                    break
                except Exception:  # noqa: BLE001 - still starting
                    time.sleep(0.25)
            dag = json.loads(sc.ComputeDAG(matmul(128, 128, 128)).to_json())
            created = c.create_task(dag, num_measure_trials=args.trials, num_measures_per_round=16)
            job = c.wait(created["job_id"], timeout_s=1800)
            assert job["state"] == "finished", job
            task_id = created["task_id"]
            n_records = int(c.records(task_id, 0, 1)["total"])
        paths = ["/healthz", f"/tasks/{task_id}", f"/tasks/{task_id}/curve"]
        asyncio.run(_load(base, paths, 50, min(10, args.concurrency)))  # warm-up
        res = asyncio.run(_load(base, paths, args.requests, args.concurrency))
    finally:
        _stop(server, tmp / "data")
    names = {"/healthz": "healthz", f"/tasks/{task_id}": "task", f"/tasks/{task_id}/curve": "curve"}
    routes = {}
    for path, name in names.items():
        lat = np.array(res["latency"][path])
        routes[name] = {"p50_ms": float(np.percentile(lat, 50) * 1e3), "p99_ms": float(np.percentile(lat, 99) * 1e3),
                        "ok": int(lat.size), "errors": res["errors"][path]}
    for name in ("task", "curve"):
        routes[name]["p99_over_healthz_p99"] = routes[name]["p99_ms"] / routes["healthz"]["p99_ms"]
    result = {"benchmark": "api_load", "cpu": cpu_model(), "isa": cpu_isa(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "concurrency": args.concurrency,
              "requests_per_route": args.requests, "records_in_curve": n_records,
              "requests_per_s": 3 * args.requests / res["wall_s"], "routes": routes}
    for name, r in routes.items():
        ratio = f", p99 {r['p99_over_healthz_p99']:.2f}x healthz's" if "p99_over_healthz_p99" in r else ""
        print(f"{name:8s} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  ({r['ok']} ok, {r['errors']} errors)"
              f"{ratio}")
    print(f"{result['requests_per_s']:.0f} requests/s, {n_records} records in the curve")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
