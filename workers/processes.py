"""RQ worker processes on one Redis: how the command line and the tests start them.

    start_worker_process(conn, queues) --> ``python -m rq.cli worker --url <conn's URL>
        --serializer json <queues>`` in its own process group (stop it with os.killpg)

Workers run RQ's own command line with the JSON serializer (job arguments are ids and
JSON, never pickles); any process that can reach the Redis URL, on any machine, can
attach the same way.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import redis

from .queues import TUNE_QUEUE
from .redis_conn import connection_url


def worker_command(url: str, queues: Sequence[str] = (TUNE_QUEUE,), burst: bool = False) -> list[str]:
    """The argv of an RQ worker on ``url`` listening to ``queues`` (JSON serializer)."""
    cmd = [sys.executable, "-m", "rq.cli", "worker", "--url", url, "--serializer", "json"]
    if burst:
        cmd.append("--burst")
    return cmd + list(queues)


def start_worker_process(conn: redis.Redis, queues: Sequence[str] = (TUNE_QUEUE,),
                         burst: bool = True) -> subprocess.Popen:
    """A child RQ worker on ``conn``'s server (embedded or not), in its own process group,
    so that it and its RQ work-horse can be stopped together (``os.killpg``).

    burst : bool, exit when the queues are empty
    """
    return subprocess.Popen(worker_command(connection_url(conn), queues, burst), start_new_session=True)
