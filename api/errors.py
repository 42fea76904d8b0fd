"""The library's exception hierarchy mapped to HTTP status codes, once.

    InvalidWorkloadError -> 422 {"detail", "error", "path"}   (path names the DAG node)
    ScheduleError, other SchedulerCoreError -> 422             (user input never gives a 500)
    NotFoundError (unknown task/job id, nothing measured yet) -> 404
    ConflictError (a job of the task is still queued/running, job already ended) -> 409
    Redis unreachable (redis ConnectionError / TimeoutError, a server still loading) -> 503
        with ``Retry-After: RETRY_AFTER_S``
    a body nested too deeply for the JSON parser -> 422 (FastAPI says 400 "error parsing the body")
    schema violations -> 422 FastAPI-style {"detail": [{type, loc, msg}]}, without echoing the input
        (FastAPI's default echoes it, and a non-finite float there makes the response itself fail)
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler_core.base.errors import (
    InvalidWorkloadError,
    ScheduleError,
    SchedulerCoreError,
)


class ServiceError(Exception):
    """Base of the errors raised by the API's own routes."""


class NotFoundError(ServiceError, LookupError):
    """An unknown task or job id, or a resource that does not exist yet."""


class ConflictError(ServiceError):
    """The request conflicts with the resource's state (e.g. a job still running)."""


STATUS = {  # most specific first
    InvalidWorkloadError: 422,
    ScheduleError: 422,
    SchedulerCoreError: 422,
    NotFoundError: 404,
    ConflictError: 409,
}


RETRY_AFTER_S = 5  # seconds a client should wait when Redis is unavailable


def error_body(exc: Exception) -> dict:
    """The JSON body of an error response: the message, the error class, the DAG path if any."""
    body = {"detail": str(exc), "error": type(exc).__name__}
    if isinstance(exc, InvalidWorkloadError):
        body["path"] = exc.path
    return body


async def _library_error(request: Request, exc: Exception) -> JSONResponse:
    status = next(code for cls, code in STATUS.items() if isinstance(exc, cls))
    return JSONResponse(error_body(exc), status_code=status)


async def _redis_unavailable(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": "the service's Redis is unavailable; retry later", "error": "ServiceUnavailable"},
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _http_error(request: Request, exc: StarletteHTTPException):
    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
        return JSONResponse({"detail": "request body: JSON nested too deeply to parse",
                             "error": "InvalidWorkloadError", "path": "body"}, status_code=422)
    return await http_exception_handler(request, exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    detail = [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg")),
               **({"ctx": {k: str(v) for k, v in e["ctx"].items()}} if e.get("ctx") else {})}
              for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of :data:`STATUS`, the Redis-unavailable 503 and the deep-JSON
    rewrite on ``app``."""
    for cls in (SchedulerCoreError, ServiceError):
        app.add_exception_handler(cls, _library_error)
    for cls in (RedisConnectionError, RedisTimeoutError):
        app.add_exception_handler(cls, _redis_unavailable)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
