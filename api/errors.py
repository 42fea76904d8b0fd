"""The library's exception hierarchy mapped to HTTP status codes, once, and the one shape of
every error body (``api.schemas.ErrorBody`` / ``ValidationErrorBody``, listed in the OpenAPI
document of every route through :func:`error_responses`).

    InvalidWorkloadError -> 422   (path names the DAG node)
    ScheduleError, other SchedulerCoreError -> 422             (user input never gives a 500)
    NotFoundError (unknown task/job id, nothing measured yet) -> 404
    ConflictError (a job of the task is still queued/running, job already ended) -> 409
    Redis unreachable (redis ConnectionError / TimeoutError, a server still loading) -> 503
        with ``Retry-After: RETRY_AFTER_S``
    missing or wrong bearer token -> 401 (api.deps.TokenAuthMiddleware, before the body is read)
    a body nested too deeply for the JSON parser -> 422 (FastAPI says 400 "error parsing the body")
    other HTTP errors (404 route, 405, 413 body too large, api.limits' 409/429/503, ...) -> their
        status, ErrorBody named by the exception class (RateLimited, QueueFull, ...) or the status;
        a 422 HTTPException (api.limits' TooManyTrials, DagTooLarge) -> ValidationErrorBody

Bodies:

    422        {"error": cls, "detail": [{"type", "loc", "msg", "ctx"?}, ...] | "one line",
                "path": "ops[4].body.b.tensor" | null}                    (ValidationErrorBody)
               detail is the issue list when the request schema rejected the request
               (RequestValidationError; InvalidTargetError from the target validator), else
               the library error's message (InvalidWorkloadError, api.limits' 422s)
    otherwise  {"error": cls, "detail": "one line"}                       (ErrorBody)

Schema violations never echo the input (FastAPI's default does, and a non-finite float
there makes the response itself fail).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from scheduler_core.base.errors import (
    InvalidWorkloadError,
    ScheduleError,
    SchedulerCoreError,
)

from .schemas import ErrorBody, ValidationErrorBody


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
_BODY_PARSE_ERROR = "There was an error parsing the body"  # FastAPI's 400 (its cause: the parser's error)
_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}

_DESCRIPTIONS = {
    401: "Missing or wrong bearer token (only when the service has an API token)",
    404: "Unknown task or job id, or nothing of that kind exists yet",
    409: "Conflicts with the resource's state (a job of the task is still queued or running, the job "
         "has already ended, or the task's trial budget is spent)",
    408: "The request body did not arrive within Settings.body_read_timeout_s (upload_read_timeout_s "
         "for an uploaded model)",
    413: "Request body larger than Settings.max_body_bytes",
    422: "The request (schema, DAG, target or a limit on work) is invalid; ``detail`` says what",
    429: "Too many requests or active jobs for this token; retry after ``Retry-After`` seconds",
    503: "Redis unavailable, the tune queue full, or no worker on the measurement queue; "
         "retry after ``Retry-After`` seconds",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route or router that can answer ``codes``, each with its body schema."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {"model": ValidationErrorBody if code == 422 else ErrorBody,
                     "description": _DESCRIPTIONS.get(code, HTTPStatus(code).phrase)}
        if code in (429, 503):
            out[code]["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
        if code == 401:
            out[code]["headers"] = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
    return out


def error_json(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An ErrorBody response (every status but 422)."""
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def validation_json(error: str, detail: list[dict] | str, path: str | None = None) -> JSONResponse:
    """A ValidationErrorBody response (every 422)."""
    return JSONResponse({"error": error, "detail": detail, "path": path}, status_code=422)


def error_body(exc: Exception) -> dict:
    """The JSON body of the response to a library or service error (its status: :data:`STATUS`)."""
    status = next(code for cls, code in STATUS.items() if isinstance(exc, cls))
    body: dict[str, str | None] = {"error": type(exc).__name__, "detail": str(exc)}
    if status == 422:
        body["path"] = exc.path if isinstance(exc, InvalidWorkloadError) else None
    return body


async def _library_error(request: Request, exc: Exception) -> JSONResponse:
    status = next(code for cls, code in STATUS.items() if isinstance(exc, cls))
    return JSONResponse(error_body(exc), status_code=status)


async def _redis_unavailable(request: Request, exc: Exception) -> JSONResponse:
    logging.getLogger(__name__).warning("%s %s: Redis unavailable (%s: %s); answered 503", request.method,
                                        request.url.path, type(exc).__name__, exc)
    return error_json(503, "ServiceUnavailable", "the service's Redis is unavailable; retry later",
                      headers={"Retry-After": str(RETRY_AFTER_S)})


def _status_name(code: int) -> str:
    try:
        return HTTPStatus(code).phrase.replace(" ", "").replace("-", "")
    except ValueError:
        return "HTTPError"


def _allowed_methods(request: Request) -> list[str]:
    """The methods the OpenAPI document lists for every path template matching the request's path
    (Starlette's 405 names only the first matching route's, so ``OPTIONS /jobs/{id}`` said
    ``Allow: GET`` without DELETE)."""
    methods: set[str] = set()
    for template, item in request.app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(request.url.path):
            methods |= {m.upper() for m in item if m in _HTTP_METHODS}
    return sorted(methods)  # no HEAD: FastAPI's GET routes answer HEAD with 405


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None and exc.detail == _BODY_PARSE_ERROR:
        cause = exc.__cause__
        if isinstance(cause, RecursionError):
            return validation_json("InvalidWorkloadError", "request body: JSON nested too deeply to parse", path="body")
        msg = ("request body: not UTF-8 JSON" if isinstance(cause, UnicodeDecodeError)
               else f"request body: could not be parsed ({type(cause).__name__})")
        return validation_json("RequestValidationError", [{"type": "json_invalid", "loc": ["body"], "msg": msg}])
    headers = dict(exc.headers) if exc.headers else {}
    name = getattr(exc, "error_name", None) or (
        _status_name(exc.status_code) if type(exc).__module__.split(".")[0] in ("fastapi", "starlette")
        else type(exc).__name__)
    if exc.status_code == 422:  # e.g. api.limits' TooManyTrials, DagTooLarge: the one 422 shape
        return validation_json(name, str(exc.detail))
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request)) or headers.get("Allow", "")
    return error_json(exc.status_code, name, str(exc.detail), headers=headers or None)


def _issue(e: dict) -> dict:
    issue: dict[str, Any] = {"type": str(e.get("type")), "loc": [p if isinstance(p, int) else str(p)
                                                                 for p in e.get("loc", ())],
                             "msg": str(e.get("msg"))}
    if e.get("ctx"):
        issue["ctx"] = {str(k): str(v) for k, v in e["ctx"].items()}
    return issue


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    cause = next((e["ctx"]["error"] for e in errors if isinstance((e.get("ctx") or {}).get("error"),
                                                                  SchedulerCoreError)), None)
    return validation_json(type(cause).__name__ if cause is not None else "RequestValidationError",
                           [_issue(e) for e in errors])


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of :data:`STATUS`, the Redis-unavailable 503, the validation 422 and
    the HTTP-error bodies (deep-JSON 400 rewritten to 422) on ``app``."""
    for library_error in (SchedulerCoreError, ServiceError):
        app.add_exception_handler(library_error, _library_error)
    for redis_error in (RedisConnectionError, RedisTimeoutError):
        app.add_exception_handler(redis_error, _redis_unavailable)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
