"""The API tests other than ``test_limits.py`` are about validation, atomicity and the service's
flow, not about its bounds on work: they POST in bursts (50 concurrent requests of one
workload) and leave more than ``max_active_jobs_per_token`` jobs queued under one token
("anonymous").  For them the per-token rate limit is off and the per-token and queue limits are
high (``AUTOSCHED_*`` environment variables, which ``Settings`` reads and which servers started
as subprocesses inherit).  ``test_limits.py`` passes every limit it tests to ``Settings``
explicitly, so these variables do not reach it.
"""

from __future__ import annotations

import pytest

LOOSE_LIMITS = {
    "AUTOSCHED_RATE_LIMIT_PER_S": "0",
    "AUTOSCHED_MAX_ACTIVE_JOBS_PER_TOKEN": "100000",
    "AUTOSCHED_MAX_QUEUED_JOBS": "100000",
}


@pytest.fixture(scope="session", autouse=True)
def loose_work_limits():
    with pytest.MonkeyPatch.context() as mp:
        for name, value in LOOSE_LIMITS.items():
            mp.setenv(name, value)
        yield
