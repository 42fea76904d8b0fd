"""GET /healthz: liveness and Redis reachability; open even when auth is on."""

from __future__ import annotations

from fastapi import APIRouter
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from ..deps import ConnDep
from ..errors import error_responses
from ..schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses=error_responses(503))
async def healthz(conn: ConnDep) -> Health:
    # async, with the blocking PING in the thread pool: one hop per request (a plain def costs two,
    # the endpoint's and its response's validation)
    try:
        ok = bool(await run_in_threadpool(conn.ping))
    except RedisError:
        ok = False
    return Health(status="ok" if ok else "degraded", redis=ok)
