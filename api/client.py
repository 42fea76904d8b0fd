"""A small synchronous client of the HTTP API (used by the CLI and the tests).

    Client(base_url, token) --httpx--> api.main app ; any 4xx/5xx raises ApiError(status, detail)

A 429 or 503 with ``Retry-After`` is waited out and the request sent again (``tenacity``), while
the waits fit in ``retry_budget_s`` (60 s) in all, each wait announced by ``on_wait`` (a line on
stderr by default): GETs and DELETEs (idempotent) on every such answer, the job-creating POSTs
(/tasks, /models, /tasks/{id}/resume) on the refusals that created nothing (every 429: the rate
limit or the token's active jobs; the 503s of a full queue or of no measurement worker), never on
the 503 of an unreachable Redis (the job may exist).  A longer Retry-After, or the budget spent:
the ApiError at once.

Pass ``http=`` an existing ``httpx.Client`` (e.g. FastAPI's ``TestClient``) to
talk to an in-process app.
"""

from __future__ import annotations

import base64
import email.utils
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import httpx
from httpx_sse import SSEError, connect_sse
from tenacity import RetryCallState, Retrying, retry_if_result, stop_before_delay

from workers.job_state import ENDED_STATES, JobState


class ApiError(Exception):
    """An error response: ``status`` (HTTP code) and ``detail`` (the server's message)."""

    def __init__(self, status: int, detail: Any, body: Any = None):
        self.status, self.detail, self.body = status, detail, body
        super().__init__(f"HTTP {status}: {detail}")


RETRY_BUDGET_S = 60.0          # seconds of Retry-After waits one call may spend in all
RETRY_STATUSES = (429, 503)
# The 503s of a POST that created nothing (api.limits' QueueFull, NoMeasurementWorker); every 429
# of the service (RateLimited, TooManyActiveJobs) creates nothing too.
NOTHING_CREATED_503 = frozenset({"QueueFull", "NoMeasurementWorker"})


def retry_after_s(r: httpx.Response) -> float | None:
    """The seconds ``r``'s ``Retry-After`` asks to wait (delay-seconds or an HTTP date), or None."""
    value = r.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_name(r: httpx.Response) -> str | None:
    try:
        body = r.json()
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


def should_retry(method: str, r: httpx.Response) -> bool:
    """Whether ``r`` (the answer to ``method``) asks to send the request again after its Retry-After:
    a 429 or 503 with one, for a POST only when nothing was created (see the module docstring)."""
    if r.status_code not in RETRY_STATUSES or retry_after_s(r) is None:
        return False
    if method.upper() != "POST" or r.status_code == 429:
        return True
    return _error_name(r) in NOTHING_CREATED_503


def _answer(state: RetryCallState) -> httpx.Response:
    """The response of ``state``'s latest attempt (a failed send raised and is never retried)."""
    assert state.outcome is not None
    return state.outcome.result()


def _api_error(r: httpx.Response) -> ApiError:
    try:
        body = r.json()
    except ValueError:
        body = r.text
    return ApiError(r.status_code, body.get("detail", body) if isinstance(body, dict) else body, body)


# What a failed event stream raises (Client.events): a caller falls back to polling on these.
STREAM_ERRORS = (ApiError, httpx.HTTPError, SSEError, ValueError)


def _stderr_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Client:
    """The service's endpoints as methods; JSON in, JSON (dicts) out.

    retry_budget_s : seconds of ``Retry-After`` waits one call may spend (0: never wait);
    on_wait : called with a one-line message before each wait (default: printed on stderr).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None,
                 timeout_s: float = 30.0, http: httpx.Client | None = None,
                 retry_budget_s: float = RETRY_BUDGET_S, on_wait: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.http.headers.update(headers)
        self.retry_budget_s, self.on_wait, self.sleep = retry_budget_s, on_wait or _stderr_line, sleep

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _announce(self, method: str, path: str, state: RetryCallState) -> None:
        assert state.next_action is not None
        r = _answer(state)
        name = _error_name(r)
        self.on_wait(f"the server answered {r.status_code}{f' ({name})' if name else ''} to {method} {path}; "
                     f"retrying in {state.next_action.sleep:g} s as its Retry-After asks")

    def _send(self, method: str, path: str, rewind: IO[bytes] | None = None, **kw) -> httpx.Response:
        """``method path``, sent again after each Retry-After :func:`should_retry` honours, while the
        waits fit in ``retry_budget_s``; the last response.  ``rewind``: a file of the body, put
        back at its start before each send."""
        def send() -> httpx.Response:
            if rewind is not None:
                rewind.seek(0)
            return self.http.request(method, path, **kw)

        retrying = Retrying(
            retry=retry_if_result(lambda r: should_retry(method, r)),
            wait=lambda state: retry_after_s(_answer(state)) or 0.0,
            stop=stop_before_delay(self.retry_budget_s),
            before_sleep=lambda state: self._announce(method, path, state),
            retry_error_callback=_answer,  # the budget spent: the last answer, not tenacity's RetryError
            sleep=self.sleep)
        return retrying(send)

    def _call(self, method: str, path: str, rewind: IO[bytes] | None = None, **kw) -> httpx.Response:
        r = self._send(method, path, rewind, **kw)
        if r.status_code >= 400:
            raise _api_error(r)
        return r

    # -- queries -----------------------------------------------------------------
    def healthz(self) -> dict:
        return self._call("GET", "/healthz").json()

    def task(self, task_id: str) -> dict:
        return self._call("GET", f"/tasks/{task_id}").json()

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/jobs/{job_id}").json()

    def list_tasks(self, state: str | None = None, workload: str | None = None, limit: int = 50,
                   offset: int = 0) -> dict:
        """GET /tasks: ``{"items": [...], "total", "offset", "limit"}``, newest first; ``state`` filters
        on the state of each task's latest job, ``workload`` on a substring of its key or DAG name."""
        params: dict = {"limit": limit, "offset": offset}
        if state:
            params["state"] = state
        if workload:
            params["workload"] = workload
        return self._call("GET", "/tasks", params=params).json()

    def job_logs(self, job_id: str, tail: int | None = None) -> str:
        """GET /jobs/{id}/logs: the job's log lines (text, one record a line); the last ``tail`` only."""
        params = {"tail": tail} if tail is not None else {}
        return self._call("GET", f"/jobs/{job_id}/logs", params=params).text

    def events(self, job_id: str, logs: bool = True, tail: int | None = None) -> Iterator[tuple[str, Any]]:
        """GET /jobs/{id}/events (server-sent events, read with httpx-sse): ``("progress", job dict)``
        whenever the job changes, ``("log", line)`` per new log line (``logs``; of the lines before,
        the last ``tail``), ``("end", job dict)`` once it ended, after which the stream closes.  It may
        also close without an ``end`` (the server's ``events_max_s``): open it again.  Raises
        ApiError for an error answer (404: unknown job) and one of :data:`STREAM_ERRORS` when the
        stream breaks."""
        params: dict = {"logs": "true" if logs else "false"}
        if tail is not None:
            params["tail"] = tail
        with connect_sse(self.http, "GET", f"/jobs/{job_id}/events", params=params) as source:
            if source.response.status_code >= 400:
                source.response.read()
                raise _api_error(source.response)
            for sse in source.iter_sse():
                yield sse.event, (json.loads(sse.data) if sse.event in ("progress", "end") else sse.data)

    def job_updates(self, job_id: str) -> Iterator[dict]:
        """The job's dicts from :meth:`events` (progress only), the last one the ended job's."""
        for event, data in self.events(job_id, logs=False):
            if event in ("progress", "end"):
                yield data

    def records(self, task_id: str, offset: int = 0, limit: int = 100) -> dict:
        return self._call("GET", f"/tasks/{task_id}/records", params={"offset": offset, "limit": limit}).json()

    def records_jsonl(self, task_id: str, offset: int = 0, limit: int = 1000) -> str:
        params = {"offset": offset, "limit": limit, "format": "jsonl"}
        return self._call("GET", f"/tasks/{task_id}/records", params=params).text

    def best(self, task_id: str) -> dict:
        return self._call("GET", f"/tasks/{task_id}/best").json()

    def artifact(self, task_id: str, fmt: str = "so") -> bytes:
        return self._call("GET", f"/tasks/{task_id}/artifact", params={"format": fmt}).content

    def wait(self, job_id: str, poll_s: float = 0.5, timeout_s: float = 3600.0, on_progress=None) -> dict:
        """Poll the job until it ends (finished/failed/cancelled); ``on_progress(job)`` per poll.
        Raises TimeoutError after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if on_progress:
                on_progress(job)
            if JobState(job["state"]) in ENDED_STATES:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout_s} s")
            time.sleep(poll_s)

    # -- mutations ---------------------------------------------------------------
    def create_task(self, dag: str | dict, target: str = "llvm", **tuning) -> dict:
        """POST /tasks; ``dag`` is ComputeDAG JSON (text or dict); ``tuning``: TuningOptions fields.
        Returns ``{task_id, job_id, workload_key}``."""
        dag = json.loads(dag) if isinstance(dag, str) else dag
        return self._call("POST", "/tasks", json={"dag": dag, "target": target, "tuning": tuning}).json()

    def create_model(self, graph: str | dict, target: str = "llvm", params: bytes | None = None, **tuning) -> dict:
        """POST /models; ``graph`` is a Graph's JSON (``Graph.to_json``, text or dict); ``params``:
        its weights as ``.npz`` bytes (``workers.model_store.encode_params``), built into the
        model's artifact; ``tuning``: TuningOptions fields (``num_measure_trials`` is the whole
        model's budget).  Returns ``{model_id, job_id, tasks}``."""
        graph = json.loads(graph) if isinstance(graph, str) else graph
        body: dict[str, Any] = {"graph": graph, "target": target, "tuning": tuning}
        if params is not None:
            body["params"] = base64.b64encode(params).decode()
        return self._call("POST", "/models", json=body).json()

    def upload_model(self, onnx_path: str | os.PathLike, target: str = "llvm",
                     shapes: dict[str, list[int]] | None = None, **tuning) -> dict:
        """POST /models as multipart/form-data: the ONNX file at ``onnx_path`` (imported by the
        service), ``shapes`` for inputs with symbolic dims, ``tuning``: TuningOptions fields.
        Returns ``{model_id, job_id, tasks}``; ApiError 422 names the node the importer refused."""
        with open(onnx_path, "rb") as f:
            files = {"model": (os.path.basename(onnx_path), f, "application/octet-stream")}
            data = {"target": target, "tuning": json.dumps(tuning), "shapes": json.dumps(shapes or {})}
            return self._call("POST", "/models", rewind=f, files=files, data=data).json()

    def model(self, model_id: str) -> dict:
        return self._call("GET", f"/models/{model_id}").json()

    def model_best(self, model_id: str) -> dict:
        return self._call("GET", f"/models/{model_id}/best").json()

    def model_artifact(self, model_id: str) -> bytes:
        """The whole-model .tar.gz (model.so, model.h, graph.json)."""
        return self._call("GET", f"/models/{model_id}/artifact").content

    def resume(self, task_id: str, num_measure_trials: int) -> dict:
        return self._call("POST", f"/tasks/{task_id}/resume",
                          json={"num_measure_trials": num_measure_trials}).json()

    def cancel(self, job_id: str) -> dict:
        return self._call("DELETE", f"/jobs/{job_id}").json()
