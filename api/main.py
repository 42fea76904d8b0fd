"""The FastAPI application: ``create_app(settings)``; ``uvicorn api.main:app`` serves it.

Routes (OpenAPI at /docs): POST /tasks, GET /tasks/{id}, GET /tasks/{id}/records,
GET /tasks/{id}/best, GET /tasks/{id}/artifact, POST /tasks/{id}/resume,
GET /jobs/{id}, DELETE /jobs/{id}, GET /healthz.  With ``Settings.api_token`` set,
every route but /healthz and the docs needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI

from .deps import require_token
from .errors import install_error_handlers
from .routes import health, jobs, tasks
from .settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API app for ``settings`` (default: read from the environment once).

    The Redis connection is opened on the first request that needs it
    (``workers.redis_conn.get_connection(settings.redis_url)``; embedded when None, in
    ``settings.data_dir``).  Redis unreachable -> 503 with ``Retry-After`` (api.errors).
    """
    settings = settings or get_settings()
    app = FastAPI(title=settings.project_name, summary="Ansor-style auto-scheduler service",
                  max_body_size=settings.max_body_bytes)
    app.state.settings = settings
    app.state.conn = None
    install_error_handlers(app)
    protected = [Depends(require_token)]
    app.include_router(tasks.router, dependencies=protected)
    app.include_router(jobs.router, dependencies=protected)
    app.include_router(health.router)
    return app


def __getattr__(name: str):
    """``api.main:app`` for uvicorn, built on first access (importing this module starts nothing)."""
    if name == "app":
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
