"""The web dashboard: three HTML pages served from the package, which call the JSON API.

    GET /                       -> 307 to /dashboard
    GET /dashboard              the task list (api/static/dashboard/index.html + list.js: GET /tasks)
    GET /dashboard/tasks/{id}   one task (task.html + task.js): the tuning curve (GET /tasks/{id}/curve,
                                drawn by the vendored uPlot: latency or GFLOP/s, job boundaries,
                                baseline and peak lines, the job history), best schedule and lowered program
                                (GET /tasks/{id}/best), artifact links, resume, and the latest job
                                polled (GET /jobs/{id}) while it runs
    GET /dashboard/models/{id}  one model (model.html + model.js: GET /models/{id}): the latest job's
                                progress and TVM's task scheduler table (ID, task, latency (ms),
                                speed (GFLOP/s), trials, weight, share; the estimated total
                                latency), the artifact links once written

The pages hold no data, so they are served without a token (``OPEN_PATHS``, ``OPEN_PREFIXES``:
the app's token middleware lets them through); their scripts send ``Authorization: Bearer``
with a token taken from ``?token=`` or asked for once, kept in the browser's localStorage.
Every asset is a file under api/static/dashboard/ (served at /static/dashboard/); nothing is
fetched from another host, and the ``Content-Security-Policy`` of the pages says so to the browser.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

DASHBOARD_DIR = Path(__file__).resolve().parents[1] / "static" / "dashboard"
PREFIX = "/dashboard"
OPEN_PATHS = ("/",)
OPEN_PREFIXES = (PREFIX,)
# Same origin only; inline styles are uPlot's (it sizes its elements through their style).
CSP = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")

router = APIRouter(include_in_schema=False)


def _page(name: str) -> FileResponse:
    return FileResponse(DASHBOARD_DIR / name, media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse(PREFIX)


@router.get(PREFIX)
@router.get(PREFIX + "/")
def task_list_page() -> FileResponse:
    """The task list page (no data in it: its script reads GET /tasks)."""
    return _page("index.html")


@router.get(PREFIX + "/tasks/{task_id}")
def task_page(task_id: str) -> FileResponse:
    """The page of one task (its script reads the task id from the address)."""
    return _page("task.html")


@router.get(PREFIX + "/models/{model_id}")
def model_page(model_id: str) -> FileResponse:
    """The page of one model (its script reads the model id from the address)."""
    return _page("model.html")
