"""GET /metrics: the service's state in the Prometheus text format (open even when auth is on).

Read from Redis at scrape time (``workers.metrics.service_counts``) by a custom collector, so
every API process reports the same numbers (no process-local counters):

    autosched_jobs{state}                     gauge    jobs in each JobState (task and model jobs)
    autosched_tasks                           gauge    tasks stored
    autosched_models                          gauge    whole models stored (POST /models)
    autosched_trials_measured_total           counter  measurement records stored, every task
    autosched_measure_errors_total{kind}      counter  stored records with each MeasureErrorNo error
    autosched_queue_length{queue}             gauge    jobs waiting in each RQ queue (``tune``,
                                                       ``measure:<kind>:<device>``)

Redis unreachable -> 503 ``ErrorBody`` (api.errors), as every route.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from workers.metrics import service_counts

from ..deps import ConnDep
from ..errors import error_responses

METRICS_PATH = "/metrics"
router = APIRouter(tags=["metrics"])


class RedisCollector(Collector):
    """A prometheus_client collector that reads :func:`workers.metrics.service_counts` on each
    ``collect()`` (one Redis round of reads per scrape).  Raises redis.RedisError from
    ``collect()`` when Redis is unreachable."""

    def __init__(self, conn: redis.Redis):
        self.conn = conn

    def collect(self) -> Iterator[Metric]:
        c = service_counts(self.conn)
        jobs = GaugeMetricFamily("autosched_jobs", "Jobs by state (task and model jobs).", labels=["state"])
        for state, n in c.jobs_by_state.items():
            jobs.add_metric([state], n)
        yield jobs
        yield GaugeMetricFamily("autosched_tasks", "Tasks stored (one per workload and target).", value=c.tasks)
        yield GaugeMetricFamily("autosched_models", "Whole models stored (POST /models).", value=c.models)
        yield CounterMetricFamily("autosched_trials_measured", "Measurement records stored, over every task.",
                                  value=c.records)
        errors = CounterMetricFamily("autosched_measure_errors", "Stored measurement records by error kind "
                                     "(MeasureErrorNo name).", labels=["kind"])
        for kind, n in c.errors_by_kind.items():
            errors.add_metric([kind], n)
        yield errors
        queues = GaugeMetricFamily("autosched_queue_length", "Jobs waiting in each RQ queue.", labels=["queue"])
        for name, n in c.queues.items():
            queues.add_metric([name], n)
        yield queues


@router.get(METRICS_PATH, response_class=Response, operation_id="read_metrics",
            responses={200: {"description": "Prometheus text exposition format (version 0.0.4)",
                             "content": {"text/plain": {}}}, **error_responses(503)})
def read_metrics(conn: ConnDep) -> Response:
    """Jobs by state, tasks, models, trials measured, errors by kind and queue lengths, read
    from Redis now, in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(conn))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
