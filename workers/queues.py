"""RQ queues of the service: ``tune`` for search jobs, one measurement queue per device kind.

Job arguments are ids and numbers serialized with RQ's JSONSerializer, never
pickles; the job function is named by its import path, so enqueuing imports
nothing heavy.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys

import psutil
import redis
from rq import Queue, Retry, Worker
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from scheduler_core.base.errors import DeviceRuntimeError
from scheduler_core.base.llvm_cpu import host_cpu
from scheduler_core.base.target import Target, nvidia_smi_arch, physical_cuda_device
from scheduler_core.driver.backend import backend_of

from .records import as_text

TUNE_QUEUE = "tune"
TUNE_JOB_FUNC = "workers.jobs.tune_job"
MODEL_JOB_FUNC = "workers.model_jobs.model_tune_job"
DEFAULT_JOB_TIMEOUT_S = 6 * 3600
DEFAULT_RETRIES = 2


def tune_queue(conn: redis.Redis) -> Queue:
    """The ``tune`` queue with the JSON serializer."""
    return Queue(TUNE_QUEUE, connection=conn, serializer=JSONSerializer)


JOB_FUNCS = {"task": TUNE_JOB_FUNC, "model": MODEL_JOB_FUNC}  # job kind -> the RQ function of its pipeline


def enqueue_job(conn: redis.Redis, kind: str, subject_id: str, job_id: str, trials: int,
                job_timeout_s: int | None = None, retries: int = DEFAULT_RETRIES):
    """Enqueue the job ``job_id`` of a task (``kind="task"``: ``tune_job(task_id, job_id, trials)``)
    or of a model (``"model"``: ``model_tune_job(model_id, job_id, trials)``) on ``tune``; the rq.Job.

    The RQ job id is ``job_id`` (the service's job id), so RQ and the job hash
    name the same job.  ``retries``: how many times RQ re-runs a failed job or one
    abandoned by a killed worker (the retry continues from the records already
    in Redis).  job_timeout_s : int, in seconds (default 6 hours).  KeyError for another kind.
    """
    return tune_queue(conn).enqueue(
        JOB_FUNCS[kind], args=(subject_id, job_id, int(trials)), job_id=job_id,
        job_timeout=int(job_timeout_s or DEFAULT_JOB_TIMEOUT_S),
        retry=Retry(max=retries) if retries > 0 else None,
        result_ttl=7 * 24 * 3600, failure_ttl=7 * 24 * 3600)


def enqueue_tune(conn: redis.Redis, task_id: str, job_id: str, trials: int,
                 job_timeout_s: int | None = None, retries: int = DEFAULT_RETRIES):
    """:func:`enqueue_job` of a task job."""
    return enqueue_job(conn, "task", task_id, job_id, trials, job_timeout_s, retries)


def enqueue_model_tune(conn: redis.Redis, model_id: str, job_id: str, trials: int,
                       job_timeout_s: int | None = None, retries: int = DEFAULT_RETRIES):
    """:func:`enqueue_job` of a model job."""
    return enqueue_job(conn, "model", model_id, job_id, trials, job_timeout_s, retries)


def listening_workers(conn: redis.Redis, queue_name: str) -> int:
    """How many RQ workers currently listen on ``queue_name`` (registered and heartbeating)."""
    return Worker.count(queue=Queue(queue_name, connection=conn, serializer=JSONSerializer))


def worker_alive(conn: redis.Redis, worker_name: str | None) -> bool:
    """Whether the RQ worker ``worker_name`` may still be running: registered, and, when it
    runs on this host, its process exists.  (A worker on another host counts as alive while
    registered; RQ's own heartbeat cleanup handles it.)"""
    if not worker_name:
        return False
    info = conn.hgetall(Worker.redis_worker_namespace_prefix + worker_name)
    if not info:
        return False
    if as_text(info.get(b"hostname", b"")) != socket.gethostname():
        return True
    try:
        return psutil.Process(int(info.get(b"pid") or 0)).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False


def requeue_job(conn: redis.Redis, queue: Queue, job: Job) -> None:
    """Put ``job`` back at the front of ``queue`` after the worker that held it died:
    its started-registry entry and its place in RQ's intermediate queue go, its retries stay."""
    registry = StartedJobRegistry(queue.name, connection=conn, serializer=JSONSerializer)
    with conn.pipeline() as pipe:
        registry.remove_executions(job, pipeline=pipe)
        pipe.zrem(registry.key, job.id)
        pipe.lrem(queue.intermediate_queue_key, 0, job.id)
        pipe.execute()
    job.started_at = job.ended_at = None
    queue.enqueue_job(job, at_front=True)


def _host_cpu_model() -> str:
    """LLVM's name for the host CPU (``"znver4"``, ``"skylake-avx512"``): the model the
    search's ``llvm`` target and the JIT see."""
    return host_cpu()


def measure_queue_name(target: str, device_model: str | None = None) -> str:
    """``measure:<kind>:<device model>``, e.g. ``measure:llvm:znver4`` or ``measure:cuda:sm-80``.

    target : str, a target string ("llvm ...", "cuda -arch=sm_90 ..."); its kind, and for cuda
        its arch (``sm_80`` when not given): a GPU worker serves the arch it was compiled for.
    device_model : str, the CPU model name for an llvm target; default LLVM's name for the host CPU.
    """
    parsed = Target.parse(str(target) or "llvm")
    model = backend_of(parsed).queue_device(parsed) or device_model or _host_cpu_model()
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "unknown"
    return f"measure:{parsed.kind}:{slug}"


def _arch_in_child(index: int) -> str:
    """Device ``index``'s arch asked through pycuda in a child process (where nvidia-smi is
    missing), so that CUDA is never initialised in this one; raises DeviceRuntimeError."""
    code = ("import sys; from scheduler_core.runtime.cuda_driver import device_name; "
            f"sys.stdout.write(device_name({int(index)})[1])")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as err:
        raise DeviceRuntimeError(f"could not ask CUDA device {index} for its arch: {err}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise DeviceRuntimeError(lines[-1] if lines else f"asking CUDA device {index} failed (rc {done.returncode})")
    return done.stdout.strip()


def gpu_measure_queue(index: int = 0) -> str:
    """The measurement queue of local CUDA device ``index``: ``measure:cuda:<its arch>``.

    Never initialises CUDA in this process: an RQ worker forks a work-horse per job, and a
    child forked after ``cuInit`` cannot use CUDA.  The arch comes from nvidia-smi, else from
    pycuda in a child process.  ``index`` counts the devices this process sees
    (``CUDA_VISIBLE_DEVICES``).  Raises DeviceRuntimeError saying what is missing (pycuda, the
    optional extra ``.[cuda]``; a driver; the device).
    """
    if importlib.util.find_spec("pycuda") is None:
        raise DeviceRuntimeError("measuring on a GPU needs pycuda: pip install -e '.[cuda]'")
    try:
        device = physical_cuda_device(index)
    except ValueError as err:
        raise DeviceRuntimeError(str(err)) from None
    arch = nvidia_smi_arch(device) or _arch_in_child(index)
    return measure_queue_name(f"cuda -arch={arch}")


def pin_cuda_device(index: int) -> str:
    """Make this process's (and its children's) CUDA device 0 the device it now calls ``index``,
    through ``CUDA_VISIBLE_DEVICES``: the runner measures on device 0, so a worker started with
    ``--gpu 1`` measures on device 1.  Returns the device's physical id; raises
    DeviceRuntimeError when ``index`` is hidden or negative."""
    try:
        device = physical_cuda_device(index)
    except ValueError as err:
        raise DeviceRuntimeError(str(err)) from None
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    return device
