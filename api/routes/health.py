"""GET /healthz: liveness and Redis reachability; open even when auth is on."""

from __future__ import annotations

from fastapi import APIRouter
from redis.exceptions import RedisError

from ..deps import ConnDep
from ..errors import error_responses
from ..schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses=error_responses(503))
def healthz(conn: ConnDep) -> Health:
    try:
        ok = bool(conn.ping())
    except RedisError:
        ok = False
    return Health(status="ok" if ok else "degraded", redis=ok)
