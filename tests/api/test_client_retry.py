"""The client honours Retry-After: a 429 or 503 that asks to wait is waited out and the request sent
again, within a budget, each wait announced; a POST only when the refusal created nothing.

Runs the real app (``create_app``) through FastAPI's TestClient (an ``httpx.Client``, passed to
``api.client.Client``) against a real embedded Redis, with no RQ worker: jobs stay queued.  The
429s come from the real rate limiter (api.limits, a moving window in that Redis) with a limit of
one POST a second, and from the token's active-jobs limit (Retry-After 30 s).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from api.client import ApiError, Client, retry_after_s, should_retry
from api.main import create_app
from api.settings import Settings
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import matmul_add
from workers.redis_conn import get_connection

TUNING = {"num_measure_trials": 8, "num_measures_per_round": 4}


@pytest.fixture
def conn(redis_url):
    c = get_connection(redis_url)
    c.flushall()
    return c


def _client(redis_url, waits: list, **kw) -> Client:
    settings = Settings(redis_url=redis_url, **{"rate_limit_per_s": 1.0, "rate_limit_burst": 1, **kw})
    return Client(http=TestClient(create_app(settings)), on_wait=waits.append)


def _dag(n: int) -> str:
    return ComputeDAG(matmul_add(n, n, n)).to_json()


@pytest.mark.integration
def test_a_post_refused_by_the_rate_limit_waits_its_retry_after_and_creates_the_job(redis_url, conn):
    waits: list[str] = []
    with _client(redis_url, waits) as c:
        c.create_task(_dag(16), **TUNING)
        start = time.monotonic()
        second = c.create_task(_dag(17), **TUNING)               # 429, Retry-After 1, then 201
        elapsed = time.monotonic() - start
        assert c.job(second["job_id"])["state"] == "queued"
    assert len(waits) == 1 and "429 (RateLimited) to POST /tasks" in waits[0] and "retrying in 1 s" in waits[0]
    assert 0.9 <= elapsed < 5, elapsed
    assert len(conn.keys("autosched:job:*")) == 2                # each job created once


@pytest.mark.integration
def test_a_retry_after_over_the_budget_is_the_error_at_once(redis_url, conn):
    waits: list[str] = []
    with _client(redis_url, waits, rate_limit_per_s=0.0, max_active_jobs_per_token=1) as c:
        c.create_task(_dag(16), **TUNING)
        start = time.monotonic()
        with pytest.raises(ApiError) as info:                    # TooManyActiveJobs asks 30 s: over 5
            Client(http=c.http, on_wait=waits.append, retry_budget_s=5).create_task(_dag(17), **TUNING)
        assert time.monotonic() - start < 3
    assert info.value.status == 429 and "max_active_jobs_per_token=1" in str(info.value.detail)
    assert waits == [] and len(conn.keys("autosched:job:*")) == 1


def _answer(status: int, retry_after: str | None, error: str) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers, content=json.dumps({"error": error, "detail": "x"}).encode())


def test_which_answers_are_retried():
    assert should_retry("GET", _answer(503, "5", "ServiceUnavailable"))
    assert should_retry("DELETE", _answer(429, "1", "RateLimited"))
    assert should_retry("POST", _answer(429, "30", "TooManyActiveJobs"))
    assert should_retry("POST", _answer(503, "30", "QueueFull"))
    assert not should_retry("POST", _answer(503, "5", "ServiceUnavailable"))   # the job may exist
    assert not should_retry("GET", _answer(503, None, "ServiceUnavailable"))   # no Retry-After
    assert not should_retry("GET", _answer(500, "5", "InternalServerError"))
    assert retry_after_s(_answer(429, "7", "")) == 7.0
    assert retry_after_s(_answer(429, "Wed, 21 Oct 2015 07:28:00 GMT", "")) == 0.0   # a date in the past
    assert retry_after_s(_answer(429, "soon", "")) is None
