"""The real API app served by uvicorn in a thread on a free port, for tests that drive it over
HTTP (the command line, a browser), and a real RQ worker that runs the queued jobs."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from api.main import create_app
from api.settings import Settings
from workers.processes import start_worker_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(redis_url: str, **settings) -> Iterator[str]:
    """Serve ``create_app(Settings(redis_url, rate_limit_per_s=0, **settings))``; yields its base URL."""
    port = free_port()
    app = create_app(Settings(redis_url=redis_url, **{"rate_limit_per_s": 0, **settings}))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def run_burst_worker(conn, timeout_s: float = 300) -> None:
    """A real RQ worker process in burst mode on ``conn``'s server: it runs the queued jobs and exits
    (killed after ``timeout_s`` seconds)."""
    worker = start_worker_process(conn, burst=True)
    try:
        worker.wait(timeout=timeout_s)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
