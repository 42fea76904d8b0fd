"""A small synchronous client of the HTTP API (used by the CLI and the tests).

    Client(base_url, token) --httpx--> api.main app ; any 4xx/5xx raises ApiError(status, detail)

Pass ``http=`` an existing ``httpx.Client`` (e.g. FastAPI's ``TestClient``) to
talk to an in-process app.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from workers.job_state import ENDED_STATES, JobState


class ApiError(Exception):
    """An error response: ``status`` (HTTP code) and ``detail`` (the server's message)."""

    def __init__(self, status: int, detail: Any, body: Any = None):
        self.status, self.detail, self.body = status, detail, body
        super().__init__(f"HTTP {status}: {detail}")


class Client:
    """The service's endpoints as methods; JSON in, JSON (dicts) out."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None,
                 timeout_s: float = 30.0, http: httpx.Client | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.http.headers.update(headers)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = r.text
            raise ApiError(r.status_code, body.get("detail", body) if isinstance(body, dict) else body, body)
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

    def create_model(self, graph: str | dict, target: str = "llvm", **tuning) -> dict:
        """POST /models; ``graph`` is a Graph's JSON (``Graph.to_json``, text or dict); ``tuning``:
        TuningOptions fields (``num_measure_trials`` is the whole model's budget).
        Returns ``{model_id, job_id, tasks}``."""
        graph = json.loads(graph) if isinstance(graph, str) else graph
        return self._call("POST", "/models", json={"graph": graph, "target": target, "tuning": tuning}).json()

    def upload_model(self, onnx_path: str | os.PathLike, target: str = "llvm",
                     shapes: dict[str, list[int]] | None = None, **tuning) -> dict:
        """POST /models as multipart/form-data: the ONNX file at ``onnx_path`` (imported by the
        service), ``shapes`` for inputs with symbolic dims, ``tuning``: TuningOptions fields.
        Returns ``{model_id, job_id, tasks}``; ApiError 422 names the node the importer refused."""
        with open(onnx_path, "rb") as f:
            files = {"model": (os.path.basename(onnx_path), f, "application/octet-stream")}
            data = {"target": target, "tuning": json.dumps(tuning), "shapes": json.dumps(shapes or {})}
            return self._call("POST", "/models", files=files, data=data).json()

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
