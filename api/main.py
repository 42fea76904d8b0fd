"""The FastAPI application: ``create_app(settings)``; ``uvicorn api.main:app`` serves it.

Routes (OpenAPI at /docs): POST /tasks, GET /tasks/{id}, GET /tasks/{id}/records,
GET /tasks/{id}/best, GET /tasks/{id}/artifact, POST /tasks/{id}/resume,
GET /jobs/{id}, DELETE /jobs/{id}, POST /models, GET /models/{id}, GET /models/{id}/best,
GET /models/{id}/artifact (api.routes.models), GET /healthz.  With ``Settings.api_token`` set (non-empty),
every route but /healthz and the docs needs ``Authorization: Bearer <token>``; the check runs in
a middleware, before the body is read, so an unauthenticated request is always a 401.

Every error body is an ``api.schemas.ErrorBody`` (422: ``ValidationErrorBody``); the OpenAPI
document lists each route's error statuses with that schema (``api.errors.error_responses``).
"""

from __future__ import annotations

from fastapi import Depends, FastAPI

from .deps import BodyLimitMiddleware, TokenAuthMiddleware, require_token
from .errors import error_responses, install_error_handlers
from .routes import health, jobs, models, tasks
from .settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API app for ``settings`` (default: read from the environment once).

    The Redis connection is opened on the first request that needs it
    (``workers.redis_conn.get_connection(settings.redis_url)``; embedded when None, in
    ``settings.data_dir``).  Redis unreachable -> 503 with ``Retry-After`` (api.errors).
    """
    settings = settings or get_settings()
    app = FastAPI(title=settings.project_name, summary="Ansor-style auto-scheduler service")
    app.state.settings = settings
    app.state.conn = None
    install_error_handlers(app)
    open_paths = frozenset(p for p in ("/healthz", app.docs_url, app.redoc_url, app.openapi_url,
                                       app.swagger_ui_oauth2_redirect_url) if p)
    # The last added runs first: the token check, then the body limit (both before routing).
    app.add_middleware(BodyLimitMiddleware, max_body_size=settings.max_body_bytes)
    app.add_middleware(TokenAuthMiddleware, open_paths=open_paths)
    protected = [Depends(require_token)]  # also puts the bearer scheme in the OpenAPI document
    # 401 is every protected route's; each route declares its other statuses (api/routes/*.py).
    app.include_router(tasks.router, dependencies=protected, responses=error_responses(401))
    app.include_router(jobs.router, dependencies=protected, responses=error_responses(401))
    app.include_router(models.router, dependencies=protected, responses=error_responses(401))
    app.include_router(health.router)
    return app


def __getattr__(name: str):
    """``api.main:app`` for uvicorn, built on first access (importing this module starts nothing)."""
    if name == "app":
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
