"""The FastAPI application: ``create_app(settings)``; ``uvicorn api.main:app`` serves it.

Routes (OpenAPI at /docs): POST /tasks, GET /tasks (paged list), GET /tasks/{id},
GET /tasks/{id}/curve, GET /tasks/{id}/records,
GET /tasks/{id}/best, GET /tasks/{id}/artifact, POST /tasks/{id}/resume,
GET /jobs/{id}, DELETE /jobs/{id}, GET /jobs/{id}/logs, GET /jobs/{id}/events (server-sent events:
progress, log lines, end; api.routes.jobs), POST /models, GET /models/{id}, GET /models/{id}/best,
GET /models/{id}/artifact (api.routes.models), GET /healthz, GET /metrics (Prometheus text,
api.routes.metrics), and the web dashboard: GET / -> /dashboard, /dashboard/tasks/{id}
(api.routes.dashboard; its pages need no token, the JSON routes they call do).  With
``Settings.api_token`` set (non-empty), every route but /healthz,
/metrics, the docs (/docs, /redoc, /openapi.json) and the static files under /static needs
``Authorization: Bearer <token>``; the check runs in a middleware, before the body is read, so an
unauthenticated request is always a 401.

/docs (Swagger UI) and /redoc (ReDoc) work offline: their scripts, styles and favicon are files
of this package (api/static/docs/, served at /static/docs/), never a CDN.

Every error body is an ``api.schemas.ErrorBody`` (422: ``ValidationErrorBody``); the OpenAPI
document lists each route's error statuses with that schema (``api.errors.error_responses``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from workers.logging_setup import configure_api_logging, redact_access_logs
from workers.processes import make_non_dumpable

from .deps import BodyLimitMiddleware, TokenAuthMiddleware, auth_enabled, require_token
from .errors import error_responses, install_error_handlers
from .routes import dashboard, health, jobs, metrics, models, tasks
from .settings import Settings, get_settings

STATIC_DIR = Path(__file__).resolve().parent / "static"  # package data (pyproject's package-data)
STATIC_URL = "/static"
DOCS_URL, REDOC_URL, OPENAPI_URL = "/docs", "/redoc", "/openapi.json"
OAUTH2_REDIRECT_URL = f"{DOCS_URL}/oauth2-redirect"  # Swagger UI's OAuth2 redirect page (inline script)
SWAGGER_JS = f"{STATIC_URL}/docs/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = f"{STATIC_URL}/docs/swagger-ui/swagger-ui.css"
FAVICON = f"{STATIC_URL}/docs/swagger-ui/favicon-32x32.png"
REDOC_JS = f"{STATIC_URL}/docs/redoc/redoc.standalone.js"
# The docs pages may load nothing from another host (ReDoc's footer would show a logo from its
# CDN): scripts, styles, images, workers and fetches from this server only (inline script and
# styles: FastAPI's page setup and the libraries' styled components; blob: ReDoc's search worker).
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
            "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'")


def _add_docs(app: FastAPI, title: str) -> None:
    """GET /docs and GET /redoc: FastAPI's pages with every asset served from ``STATIC_URL``
    (no CDN, no Google Fonts, no Swagger validator badge), so they work offline; their
    Content-Security-Policy (``DOCS_CSP``) keeps the browser from asking any other host."""

    @app.get(DOCS_URL, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{title} - Swagger UI",
                                   swagger_js_url=SWAGGER_JS, swagger_css_url=SWAGGER_CSS,
                                   swagger_favicon_url=FAVICON, oauth2_redirect_url=OAUTH2_REDIRECT_URL,
                                   swagger_ui_parameters={"validatorUrl": None})
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    def redoc() -> HTMLResponse:
        page = get_redoc_html(openapi_url=OPENAPI_URL, title=f"{title} - ReDoc", redoc_js_url=REDOC_JS,
                              redoc_favicon_url=FAVICON, with_google_fonts=False)
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API app for ``settings`` (default: read from the environment once).

    The Redis connection is opened on the first request that needs it
    (``workers.redis_conn.get_connection(settings.redis_url)``; embedded when None, in
    ``settings.data_dir``).  Redis unreachable -> 503 with ``Retry-After`` (api.errors).
    """
    settings = settings or get_settings()
    redact_access_logs()  # the dashboard takes ?token=: never in uvicorn's access log
    app = FastAPI(title=settings.project_name, summary="Ansor-style auto-scheduler service",
                  openapi_url=OPENAPI_URL, docs_url=None, redoc_url=None)  # docs: _add_docs, offline
    app.state.settings = settings
    app.state.conn = None
    install_error_handlers(app)
    open_paths = frozenset(("/healthz", metrics.METRICS_PATH, DOCS_URL, REDOC_URL, OPENAPI_URL, OAUTH2_REDIRECT_URL,
                            *dashboard.OPEN_PATHS))
    # The last added runs first: the token check, then the body limit (both before routing).
    app.add_middleware(BodyLimitMiddleware, max_body_size=settings.max_body_bytes,
                       upload_sizes={models.UPLOAD_PATH: settings.max_model_upload_bytes},
                       read_timeout_s=settings.body_read_timeout_s, upload_timeout_s=settings.upload_read_timeout_s)
    app.add_middleware(TokenAuthMiddleware, open_paths=open_paths,
                       open_prefixes=(f"{STATIC_URL}/", *dashboard.OPEN_PREFIXES))
    _add_docs(app, settings.project_name)
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    protected = [Depends(require_token)]  # also puts the bearer scheme in the OpenAPI document
    # 401 is every protected route's; each route declares its other statuses (api/routes/*.py).
    app.include_router(tasks.router, dependencies=protected, responses=error_responses(401))
    app.include_router(jobs.router, dependencies=protected, responses=error_responses(401))
    app.include_router(models.router, dependencies=protected, responses=error_responses(401))
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(dashboard.router)  # the web pages (their data: the routes above)
    _document_bodies(app, models.BODY_SCHEMAS, settings)
    return app


def _document_bodies(app: FastAPI, bodies: tuple, settings: Settings) -> None:
    """Put ``bodies`` (pydantic models a route reads itself, e.g. POST /models' two content types)
    in the OpenAPI document's components, where the routes' ``openapi_extra`` refer to them, and
    make the document say what this service's ``settings`` enforce (:func:`_match_settings`)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for body in bodies:
            schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in schema.pop("$defs", {}).items():
                schemas.setdefault(name, sub)
            schemas[body.__name__] = schema
        _match_settings(document, settings)
        app.openapi_schema = document
        return document
    app.openapi = openapi  # type: ignore[method-assign]


def _match_settings(document: dict, settings: Settings) -> None:
    """The OpenAPI document as this service enforces it: ``num_measure_trials`` at most
    ``max_job_trials`` (the library allows more), and no bearer token required when auth is off."""
    for schema in document.get("components", {}).get("schemas", {}).values():
        trials = schema.get("properties", {}).get("num_measure_trials")
        if isinstance(trials, dict) and "maximum" in trials:
            trials["maximum"] = min(trials["maximum"], settings.max_job_trials)
    if not auth_enabled(settings):
        for path in document.get("paths", {}).values():
            for operation in path.values():
                if isinstance(operation, dict):
                    operation.pop("security", None)
                    operation.get("responses", {}).pop("401", None)
        document.get("components", {}).pop("securitySchemes", None)


def __getattr__(name: str):
    """``api.main:app`` for uvicorn, built on first access (importing this module starts nothing)."""
    if name == "app":
        configure_api_logging()  # the server process (uvicorn api.main:app) logs to stderr in one format
        make_non_dumpable()  # its environment holds the API token
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
