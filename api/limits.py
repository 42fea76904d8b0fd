"""Bounds on the work one request may start: the checks of POST /tasks and POST /tasks/{id}/resume.

    rate_limited_token (dependency)  a moving window per API token (the ``limits`` library,
                                     its Redis storage on the app's connection) -> 429 + Retry-After
    check_job_trials                 trials of one job <= max_job_trials   -> 422
    check_dag_size                   ops <= max_dag_ops; constant-shape tensor bytes <= max_dag_tensor_bytes
                                     and <= the runner's memory limit      -> 422
    check_measure_mode               a cuda task must use "measure": "queue" (GPU workers) -> 422
    check_measure_listener           "measure": "queue" needs a worker on measure:<kind>:<model> -> 503
    admission -> the store           checked and written in the transaction that creates the job
                                     (workers.store.Admission), answered by ``refusal``:
                                     the task's trials over all its jobs + this job <= max_task_trials -> 409;
                                     queued + running jobs of the token < max_active_jobs_per_token -> 429;
                                     jobs waiting on the tune queue < max_queued_jobs -> 503

The limits and their defaults live in :class:`api.settings.Settings`.  Every refusal is an
``HTTPException`` subclass whose ``detail`` is one line naming the limit and its value, with
``Retry-After`` where waiting helps; ``api.errors`` answers it with the ErrorBody (the 422s: the
ValidationErrorBody) named by the class, so it needs no mapping of its own.

The token of a request is its bearer token (already checked by ``deps.require_token``) or
``"anonymous"`` when the service has no ``api_token``; Redis keys hold a digest of it, never
the token itself.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter
from redis import Redis

from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.ir.expr import dtype_bits
from scheduler_core.ir.simplify import const_value
from scheduler_core.measure.local_runner import default_mem_limit_bytes
from workers import keys
from workers.admission import Admission, AdmissionError
from workers.queues import listening_workers, measure_queue_name

from .deps import ConnDep, SettingsDep
from .settings import Settings

ANONYMOUS = "anonymous"
BUSY_RETRY_AFTER_S = 30  # Retry-After of a refusal that waits on other jobs (token's jobs, full queue, no worker)


class LimitExceeded(HTTPException):
    """A request over one of the service's limits; ``detail`` names the limit and its value."""

    status = 422

    def __init__(self, detail: str, retry_after_s: float | None = None):
        headers = {"Retry-After": str(max(1, math.ceil(retry_after_s)))} if retry_after_s is not None else None
        super().__init__(self.status, detail, headers=headers)


class TooManyTrials(LimitExceeded):
    """A job asks more trials than ``max_job_trials`` (422)."""


class DagTooLarge(LimitExceeded):
    """A DAG over ``max_dag_ops``, ``max_dag_tensor_bytes`` or the runner's memory limit (422)."""


class TaskTrialBudgetExceeded(LimitExceeded):
    """The task's trials over all its jobs would pass ``max_task_trials`` (409)."""

    status = 409


class TooManyActiveJobs(LimitExceeded):
    """The token already has ``max_active_jobs_per_token`` queued or running jobs (429)."""

    status = 429


class RateLimited(LimitExceeded):
    """The token sent POSTs faster than ``rate_limit_per_s`` (burst ``rate_limit_burst``) (429)."""

    status = 429


class QueueFull(LimitExceeded):
    """``max_queued_jobs`` jobs already wait on the tune queue (503)."""

    status = 503


class NoMeasurementWorker(LimitExceeded):
    """``"measure": "queue"`` while no worker listens on the device's measurement queue (503)."""

    status = 503


def token_of(request: Request, settings: Settings) -> str:
    """The request's API token: its bearer token, or ``"anonymous"`` when auth is off."""
    if not settings.api_token:  # unset or "": auth off (as api.deps reads it)
        return ANONYMOUS
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else ANONYMOUS


def token_id(token: str) -> str:
    """The name of a token inside Redis keys: ``anonymous`` or a digest of the token."""
    return ANONYMOUS if token == ANONYMOUS else hashlib.sha256(token.encode()).hexdigest()[:32]


def rate_limit_item(settings: Settings) -> RateLimitItem:
    """The moving window of ``rate_limit_per_s`` (r) and ``rate_limit_burst`` (b): at most
    max(b, r x w) POSTs in any w seconds, w = b / r rounded to whole seconds (at least 1; the
    windows of ``limits`` are whole seconds).  So b POSTs pass at once and r per second over
    time; the defaults (r = 10, b = 20) are exactly 20 POSTs in any 2 s."""
    rate, burst = settings.rate_limit_per_s, settings.rate_limit_burst
    window_s = max(1, round(burst / rate))
    return RateLimitItemPerSecond(max(burst, round(rate * window_s)), window_s, namespace="post")


def rate_limiter(conn: Redis, state) -> MovingWindowRateLimiter:
    """The app's moving-window limiter: ``limits``' RedisStorage on the connection pool of ``conn``
    (the app's Redis, embedded on a unix socket or a ``redis://`` URL alike), keys under
    ``workers.keys.rate_prefix()``; made once per app (``state``: its ``app.state``)."""
    made = getattr(state, "rate_limiter", None)
    if made is None or made[0] is not conn:
        storage = RedisStorage("redis://", connection_pool=conn.connection_pool, key_prefix=keys.rate_prefix())
        made = state.rate_limiter = (conn, MovingWindowRateLimiter(storage))
    return made[1]


def take_hit(limiter: MovingWindowRateLimiter, item: RateLimitItem, tid: str) -> float:
    """One POST of token ``tid`` against ``item``: 0.0 when it passes (and counts), else the seconds
    until the window has room again (its oldest POST leaves it; a refused POST is not counted)."""
    if limiter.hit(item, tid):
        return 0.0
    return max(0.0, limiter.get_window_stats(item, tid).reset_time - time.time())


def rate_limited_token(request: Request, settings: SettingsDep, conn: ConnDep) -> str:
    """Dependency of the POST routes: the request's token id, after its rate limit.

    Raises RateLimited (429, ``Retry-After``: the seconds until the token's window has room, rounded
    up) when the token sent more than ``rate_limit_burst`` POSTs at once or more than
    ``rate_limit_per_s`` per second over time (:func:`rate_limit_item`).
    """
    tid = token_id(token_of(request, settings))
    if settings.rate_limit_per_s > 0:
        wait = take_hit(rate_limiter(conn, request.app.state), rate_limit_item(settings), tid)
        if wait > 0:
            raise RateLimited(f"rate limit: at most rate_limit_per_s={settings.rate_limit_per_s:g} POSTs per "
                              f"second (rate_limit_burst={settings.rate_limit_burst}) per token; retry in "
                              f"{wait:.2f} s", retry_after_s=wait)
    return tid


RateLimitedToken = Annotated[str, Depends(rate_limited_token)]


def check_job_trials(settings: Settings, trials: int) -> None:
    if trials > settings.max_job_trials:
        raise TooManyTrials(f"num_measure_trials={trials} exceeds max_job_trials={settings.max_job_trials}")


def dag_tensor_bytes(dag: ComputeDAG) -> int:
    """Bytes of every tensor of ``dag`` with a constant shape (elements x dtype bytes);
    tensors with symbolic shapes count 0 (they are bounded when bound)."""
    total = 0
    for op in dag.ops:
        for i in range(op.num_outputs):
            extents = [const_value(e) for e in op.output_shape(i)]
            ints = [v for v in extents if isinstance(v, int)]
            if len(ints) == len(extents):
                total += math.prod(ints) * max(1, (dtype_bits(op.output_dtype(i)) + 7) // 8)
    return total


def check_dag_size(settings: Settings, dag: ComputeDAG, runner_mem_bytes: int | None = None) -> None:
    """DagTooLarge (422) for a DAG over max_dag_ops, max_dag_tensor_bytes, or the runner's
    memory limit (``runner_mem_bytes``; default LocalRunner's, half the RAM)."""
    if len(dag.ops) > settings.max_dag_ops:
        raise DagTooLarge(f"the DAG has {len(dag.ops)} ops, over max_dag_ops={settings.max_dag_ops}")
    nbytes = dag_tensor_bytes(dag)
    if nbytes > settings.max_dag_tensor_bytes:
        raise DagTooLarge(f"the DAG's tensors hold {nbytes} bytes, over "
                          f"max_dag_tensor_bytes={settings.max_dag_tensor_bytes}")
    runner_mem = default_mem_limit_bytes() if runner_mem_bytes is None else runner_mem_bytes
    if runner_mem and nbytes > runner_mem:
        raise DagTooLarge(f"the DAG's tensors hold {nbytes} bytes, more than the runner's memory limit "
                          f"mem_limit_bytes={runner_mem}")


class GpuNeedsQueue(LimitExceeded):
    """A ``cuda`` task with ``"measure": "local"`` (422): GPU programs are measured by GPU workers."""


def check_measure_mode(measure: str, target: str) -> None:
    """GpuNeedsQueue (422) for a cuda task measured "local": the search job runs on a tune worker,
    which need not have a GPU; GPU workers (``autosched worker --gpu N``) serve measure:cuda:<arch>."""
    if measure != "queue" and Target.parse(str(target)).is_gpu:
        raise GpuNeedsQueue(f'target {target!r} is measured by GPU workers: use "measure": "queue" and start '
                            f"`autosched worker --gpu 0` on a machine with the GPU (queue "
                            f"{measure_queue_name(target)!r})")


def check_measure_listener(conn: Redis, measure: str, target: str) -> None:
    """NoMeasurementWorker (503) when ``measure`` is "queue" and nobody listens on the target's queue."""
    if measure != "queue":
        return
    queue = measure_queue_name(target)
    if listening_workers(conn, queue) == 0:
        raise NoMeasurementWorker(f'"measure": "queue" but no worker listens on the measurement queue '
                                  f"{queue!r}; start one or use \"measure\": \"local\"",
                                  retry_after_s=BUSY_RETRY_AFTER_S)


def admission(settings: Settings, tid: str) -> Admission:
    """The limits a new job of token ``tid`` must fit, checked by the store in the transaction
    that creates the job (so concurrent requests cannot pass them together)."""
    return Admission(token_id=tid, max_task_trials=settings.max_task_trials,
                     max_active_jobs_per_token=settings.max_active_jobs_per_token,
                     max_queued_jobs=settings.max_queued_jobs)


def refusal(err: AdmissionError, trials: int, kind: str = "task") -> LimitExceeded:
    """The HTTP answer to a job the store refused: 409 (trials of the task, or of the model for
    ``kind="model"``), 429 (token's jobs), 503 (queue)."""
    if err.limit == "max_task_trials":
        return TaskTrialBudgetExceeded(f"{kind} {err.task_id!r} would reach {err.current + trials} trials "
                                       f"({err.current} asked so far + {trials}), over max_task_trials={err.value}")
    if err.limit == "max_active_jobs_per_token":
        return TooManyActiveJobs(f"this token has {err.current} queued or running jobs, the limit "
                                 f"max_active_jobs_per_token={err.value}; wait for one to end or cancel one",
                                 retry_after_s=BUSY_RETRY_AFTER_S)
    return QueueFull(f"{err.current} jobs wait on the tune queue, the limit max_queued_jobs={err.value}; "
                     f"retry later", retry_after_s=BUSY_RETRY_AFTER_S)
