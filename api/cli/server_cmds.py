"""The commands that talk to a running service (``autosched serve``) over HTTP, and ``serve``/``worker``.

    submit DAG.json [--wait]   POST /tasks, then the progress bar (GET /jobs/{id}) and the final line
    list [--state] [--workload] [--limit] [--offset]   GET /tasks as a table
    status JOB | cancel JOB | logs JOB [--tail N] [--follow]
    best TASK | artifact TASK --format so | resume TASK --trials N | submit-model GRAPH.json|MODEL.onnx
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from rich.console import Console
from rich.table import Table
from rq import Worker
from rq.serializers import JSONSerializer

from scheduler_core import frontend
from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.popen_pool import ISOLATE_ENV
from workers.job_logs import lines_after
from workers.job_state import ENDED_STATES, JobState
from workers.logging_setup import configure_api_logging, configure_worker_logging
from workers.model_store import encode_params
from workers.processes import (
    LOG_LEVEL_ENV,
    Orphans,
    WorkerSupervisor,
    hold_serve_lock,
    make_non_dumpable,
    service_paths,
)
from workers.queues import TUNE_QUEUE, gpu_measure_queue, pin_cuda_device
from workers.redis_conn import (
    connection_url,
    embedded_data_dir,
    get_connection,
    resolve_data_dir,
    started_embedded,
    stop_embedded,
)

from ..client import STREAM_ERRORS, ApiError, Client
from ..settings import Settings
from .errors import SERVICE_EXIT, CliError, one_line, read_json
from .options import DEFAULT_SERVER, Compare, DataDir, RedisUrl, Server, Token, parse_duration, tuning_flags
from .progress import follow, log_to_console, stderr_console
from .summary import compare_here, early_end_reason, final_line

Trials = Annotated[int, typer.Option(min=1, help="programs to measure")]
Wait = Annotated[bool, typer.Option(help="follow the job until it ends")]


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def worker(queues: Annotated[list[str], typer.Option("--queues", "-q", help="queues to listen to")] = [TUNE_QUEUE],  # noqa: B006
           url: RedisUrl = None,
           burst: Annotated[bool, typer.Option(help="exit when the queues are empty")] = False,
           gpu: Annotated[int | None, typer.Option(help="also measure on local CUDA device N: listen on "
                                                        "measure:cuda:<its arch> (needs pycuda, extra .[cuda])")]
           = None) -> None:
    """Run an RQ worker on ``queues`` (JSON serializer; job arguments are ids and JSON)."""
    names = list(queues)
    if gpu is not None:
        try:
            queue = gpu_measure_queue(gpu)
            names += [queue] if queue not in names else []
            pin_cuda_device(gpu)  # the runner measures on its device 0
        except Exception as err:  # noqa: BLE001 - DeviceRuntimeError: no driver / device / pycuda
            raise CliError(f"--gpu {gpu}: {one_line(err)}") from None
        typer.echo(f"listening on {', '.join(names)}", err=True)
    conn = get_connection(url)
    # the programs it measures run cut off from this Redis and the data directory
    os.environ[ISOLATE_ENV] = os.pathsep.join(service_paths(embedded_data_dir() or resolve_data_dir(None),
                                                            url or os.environ.get("REDIS_URL")))
    log_path = configure_worker_logging(resolve_data_dir(None), os.environ.get(LOG_LEVEL_ENV) or "INFO")
    typer.echo(f"worker log: {log_path}", err=True)
    Worker(names, connection=conn, serializer=JSONSerializer).work(burst=burst)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def serve(host: Annotated[str, typer.Option()] = "127.0.0.1", port: Annotated[int, typer.Option()] = 8000,
          workers: Annotated[int, typer.Option(min=0, help="RQ worker processes to start beside the API")] = 1,
          data_dir: DataDir = None) -> None:
    """Run the HTTP API and ``workers`` RQ workers on one Redis (embedded when no REDIS_URL).

    The embedded Redis keeps its data in ``--data-dir`` (AOF, fsync every second); when a
    server already runs on that directory, serve uses it.  The workers are supervised (a
    dead one is restarted with backoff; a job it left is put back on its queue), and so is
    an embedded Redis that serve started.  Ctrl-C / SIGTERM stops the workers (warm, then
    cold shutdown: a job still running is requeued on the next start and continues from
    its records), then the embedded Redis.
    """
    make_non_dumpable()  # the API token in this environment: unreadable by the programs it measures
    url = os.environ.get("REDIS_URL")
    # the only serve of its data directory adopts what a killed one left there, and stops it
    lock = None if url else hold_serve_lock(resolve_data_dir(data_dir))
    conn = get_connection(url, data_dir=data_dir)
    orphans = Orphans()
    if not url:
        owner = "started" if started_embedded() else "connected to an already running"
        typer.echo(f"{owner} embedded Redis, data in {resolve_data_dir(data_dir)}", err=True)
        if lock is not None:
            orphans = Orphans.find(conn, resolve_data_dir(data_dir))
            if started_embedded():
                orphans.redis_server = None  # its own
        if orphans:
            typer.echo(f"adopted {orphans.describe()} left by a serve that was killed; "
                       f"they stop with this one", err=True)
    supervisor = WorkerSupervisor(connection_url(conn), workers, supervise_redis=started_embedded(),
                                  data_dir=resolve_data_dir(data_dir))
    configure_api_logging()
    # uvicorn re-raises a SIGTERM after its graceful shutdown; as SystemExit it reaches
    # the finally below, which stops the workers and the embedded Redis.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from ..main import create_app  # the app (FastAPI, every route and schema: ~1.3 s) loads only to serve

    try:
        supervisor.start()
        uvicorn.run(create_app(Settings(redis_url=connection_url(conn))), host=host, port=port)
    finally:
        supervisor.stop()
        orphans.stop()
        stop_embedded()
        if lock is not None:
            lock.close()


def follow_remote(c: Client, job_id: str, poll_s: float = 0.5) -> dict:
    """The progress bar of ``tune``, on stderr, fed by the job's event stream (GET /jobs/{id}/events),
    or by polling GET /jobs/{id} when the stream fails; the job when it ends."""
    console = stderr_console()
    with log_to_console(console):  # a warning of this process prints above the bar, never through it
        return follow(lambda: c.job(job_id), console, poll_s, stream=lambda: c.job_updates(job_id),
                      stream_errors=STREAM_ERRORS)


def report_remote_result(c: Client, job: dict, dag_value: Any, tuning: dict, compare: bool = True) -> None:
    """The end of ``submit --wait``: why it stopped early (if it did) and the best, rebuilt here from
    its record, timed beside the numpy and torch baselines of the DAG file (``compare_here``).
    CliError (exit 1) for a job that did not finish."""
    if job["state"] != JobState.finished.value:
        raise CliError(f"job {job['job_id']} {job['state']}: {one_line(job.get('error') or '')}".rstrip(": "),
                       SERVICE_EXIT)
    if job.get("best_cost_s") is None:
        raise CliError(f"job {job['job_id']} finished without a successful measurement "
                       f"(errors: {job.get('errors') or {}})", SERVICE_EXIT)
    distinct = int(c.records(job["task_id"], 0, 1).get("total") or 0)
    reason = early_end_reason(job, distinct, tuning.get("early_stopping"))
    if reason:
        typer.echo(reason)
    if not compare:
        typer.echo(final_line(float(job["best_cost_s"]), job.get("best_gflops"), int(job["trials_done"]),
                              "not compared (--no-compare)"))
        return
    try:
        steps = c.best(job["task_id"]).get("steps")
        comparison = compare_here(ComputeDAG.from_json(dag_value), str(c.task(job["task_id"])["target"]), steps)
    except (SchedulerCoreError, ApiError) as err:
        comparison = f"not timed here: {one_line(err)}"
    typer.echo(final_line(float(job["best_cost_s"]), job.get("best_gflops"), int(job["trials_done"]), comparison))


@tuning_flags
def submit(workload: Annotated[Path, typer.Argument(help="a ComputeDAG JSON file")],
           target: Annotated[str, typer.Option(help='"llvm", "llvm -mcpu=..." or "cuda"')] = "llvm",
           wait: Wait = True, compare: Compare = True, server: Server = DEFAULT_SERVER, token: Token = None, *,
           tuning: dict) -> None:
    """POST a ComputeDAG JSON file as a search task; with --wait (default) show its progress and the
    best beside numpy's time."""
    dag_value = read_json(workload, "ComputeDAG JSON file")
    with Client(server, token=token) as c:
        created = c.create_task(dag_value, target=target, **tuning)
        if not wait:
            print_json(created)
            return
        typer.echo(f"task {created['task_id']} job {created['job_id']}", err=True)
        job = follow_remote(c, created["job_id"])
        report_remote_result(c, job, dag_value, tuning, compare)


def read_model_graph(path: Path) -> tuple[Any, bytes | None]:
    """``(graph JSON value, weights)`` to POST for ``path``: a graph JSON file (``Graph.to_json``)
    as it is (no weights), or an ``.onnx`` model imported here (``frontend.from_onnx``: torch and
    onnx, the extra ``.[onnx]``) and sent as its graph with its initializers as ``.npz`` bytes.

    Raises CliError (exit 2): a missing file, malformed JSON, an ONNX model that cannot be
    imported (the message names the node and op type), or torch/onnx missing here.
    """
    if path.suffix.lower() != ".onnx":
        return read_json(path, "graph JSON file"), None
    if not path.is_file():
        raise CliError(f"{path}: no such ONNX file")
    try:
        graph = frontend.from_onnx(path)  # loads torch and onnx now (the package defers them)
    except ImportError as err:
        raise CliError(f"{path}: reading an ONNX model needs torch and onnx on this machine "
                       f"(pip install 'autosched[onnx]'): {err}") from None
    except SchedulerCoreError as err:
        raise CliError(f"{path}: {err}") from None
    return graph.to_json(), encode_params(graph.bound)


def submit_model(graph: Annotated[Path, typer.Argument(help="a graph JSON file (Graph.to_json: graph + every DAG), "
                                                            "or an .onnx model (uploaded; the service imports it)")],
                 target: Annotated[str, typer.Option()] = "llvm", trials: Trials = 64, wait: Wait = True,
                 import_here: Annotated[bool, typer.Option(
                     "--import-here", help="import an .onnx model on this machine (from_onnx: needs torch and "
                                           "onnx here) and send only its graph, not the file")] = False,
                 out: Annotated[Path | None, typer.Option(help="write the model .tar.gz here when the job ends")]
                 = None,
                 time: Annotated[str | None, typer.Option(
                     "--time", help="tuning time budget of the whole model: seconds or 90s, 20m, 1h30m "
                                    "(no round starts after it; --trials still caps the trials)")] = None,
                 params: Annotated[Path | None, typer.Option(
                     "--params", help="the weights of a graph JSON file: an .npz (numpy.savez) with one array per "
                                      "graph param, built into the model's artifact (model_run)")] = None,
                 per_round: Annotated[int | None, typer.Option(
                     "--per-round", min=1, help="programs measured per search round (default: the tuning "
                                                "default, at most trials / tasks so every task gets a round)")]
                 = None,
                 server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """POST a whole model (one job over all its tasks); with --out, download its artifact.

    An .onnx file is uploaded as it is (multipart) and imported by the service; with
    --import-here it is imported on this machine and only its graph is sent."""
    upload = graph.suffix.lower() == ".onnx" and not import_here
    if upload and not graph.is_file():
        raise CliError(f"{graph}: no such ONNX file")
    if params is not None and graph.suffix.lower() == ".onnx":
        raise CliError(f"--params is for a graph JSON file; {graph} carries its own weights")
    if params is not None and not params.is_file():
        raise CliError(f"{params}: no such .npz file")
    tuning: dict[str, Any] = {"num_measure_trials": trials}
    if time is not None:
        tuning["time_budget_s"] = parse_duration(time)
    if per_round is not None:
        tuning["num_measures_per_round"] = per_round
    with Client(server, token=token) as c:
        if upload:
            created = c.upload_model(graph, target=target, **tuning)
        else:
            graph_json, weights = read_model_graph(graph)
            if params is not None:
                weights = params.read_bytes()
            created = c.create_model(graph_json, target=target, params=weights, **tuning)
        print_json(created)
        typer.echo(f"dashboard: {server.rstrip('/')}/dashboard/models/{created['model_id']}", err=True)
        if wait or out:
            job = follow_remote(c, created["job_id"])  # the bar of submit and tune
            print_json(c.model(created["model_id"]))
            if job["state"] != JobState.finished.value:
                raise CliError(f"job {job['job_id']} {job['state']}: "
                               f"{one_line(job.get('error') or '')}".rstrip(": "), SERVICE_EXIT)
        if out:
            data = c.model_artifact(created["model_id"])
            out.write_bytes(data)
            typer.echo(f"wrote {out} ({len(data)} bytes)")


def status(job_id: str, server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """A job's state, phase, trials done/total, best latency and error counts (JSON)."""
    with Client(server, token=token) as c:
        print_json(c.job(job_id))


def best(task_id: str, server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """The best schedule of a task: latency, steps, Python schedule code."""
    with Client(server, token=token) as c:
        b = c.best(task_id)
    typer.echo(b.get("script") or "")
    print_json({k: v for k, v in b.items() if k not in ("script", "lowered")})


def artifact(task_id: str, format: Annotated[str, typer.Option("--format")] = "so",
             out: Annotated[Path | None, typer.Option()] = None,
             server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """Download the compiled best program (so | h | o | ll | asm)."""
    with Client(server, token=token) as c:
        data = c.artifact(task_id, format)
    path = out or Path(f"{task_id}.{format}")
    path.write_bytes(data)
    typer.echo(f"wrote {path} ({len(data)} bytes)")


def resume(task_id: str, trials: Trials = 32, wait: Wait = True,
           dag: Annotated[Path | None, typer.Option(
               "--dag", help="the task's ComputeDAG JSON file: the last line then times the best here beside "
                             "numpy and torch, as submit does")] = None,
           server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """Continue a task's search with more trials (measured states are never re-measured); with
    --wait (default) show the same progress bar as submit and the best at the end."""
    dag_value = read_json(dag, "ComputeDAG JSON file") if dag is not None else None
    with Client(server, token=token) as c:
        created = c.resume(task_id, trials)
        if not wait:
            print_json(created)
            return
        typer.echo(f"task {created['task_id']} job {created['job_id']}", err=True)
        job = follow_remote(c, created["job_id"])
        if dag_value is not None:
            report_remote_result(c, job, dag_value, {})
            return
        if job["state"] != JobState.finished.value or job.get("best_cost_s") is None:
            raise CliError(f"job {job['job_id']} {job['state']}: {one_line(job.get('error') or '')}".rstrip(": "),
                           SERVICE_EXIT)
        typer.echo(final_line(float(job["best_cost_s"]), job.get("best_gflops"), int(job["trials_done"]),
                              "pass --dag FILE to time it here beside numpy and torch"))


def _gflops(v: Any) -> str:
    return "-" if v is None else (f"{float(v):.1f}" if float(v) >= 10 else f"{float(v):.3g}")


def list_tasks(state: Annotated[str | None, typer.Option(help="only tasks whose latest job is in this state "
                                                               "(queued, running, finished, failed, cancelled)")]
               = None,
               workload: Annotated[str | None, typer.Option(help="substring of the workload key or DAG name")] = None,
               limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
               offset: Annotated[int, typer.Option(min=0)] = 0,
               server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """The service's tasks, newest first: id, workload, target, trials, best GFLOP/s, state."""
    if state is not None and state not in {s.value for s in JobState}:
        raise CliError(f"--state {state!r}: the states are {', '.join(s.value for s in JobState)}")
    with Client(server, token=token) as c:
        page = c.list_tasks(state=state, workload=workload, limit=limit, offset=offset)
    items = page.get("items") or []
    table = Table(show_edge=False, header_style="bold")
    for name, kw in (("task id", {"no_wrap": True}), ("workload", {}), ("target", {}),
                     ("trials", {"justify": "right"}), ("best GFLOP/s", {"justify": "right"}), ("state", {})):
        table.add_column(name, **kw)
    for it in items:
        wl = it.get("name") or (it.get("workload_key") or "")[:12]
        table.add_row(it.get("task_id", ""), wl, it.get("target", ""), str(it.get("trials", 0)),
                      _gflops(it.get("best_gflops")), it.get("state") or "-")
    console = Console(width=max(Console().width, 140), soft_wrap=False)
    if items:
        console.print(table)
    total = int(page.get("total") or 0)
    if items:
        typer.echo(f"tasks {offset + 1}-{offset + len(items)} of {total}")
    else:
        typer.echo(f"no tasks at offset {offset} (of {total})" if total else "no tasks")


def cancel(job_id: str, server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """Cancel a job: a queued one at once, a running one after the batch it is measuring."""
    with Client(server, token=token) as c:
        job = c.cancel(job_id)
    note = " (cancel requested: it stops after the batch it is measuring)" if job["state"] == "running" else ""
    typer.echo(f"job {job_id}: {job['state']}{note}")


def logs(job_id: str, tail: Annotated[int | None, typer.Option(min=0, help="only the last N lines")] = None,
         follow_: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines until the job ends")]
         = False,
         poll_s: Annotated[float, typer.Option("--poll", min=0.1, help="seconds between polls with --follow")] = 1.0,
         server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """A job's log lines (GET /jobs/{id}/logs); with --follow, new lines as they come until it ends
    (the job's event stream, GET /jobs/{id}/events; polling every --poll seconds when it fails or
    closes before the end)."""
    with Client(server, token=token) as c:
        last, opened = None, False
        if follow_:
            try:
                for event, data in c.events(job_id, tail=tail):
                    opened = True
                    if event == "log":
                        typer.echo(data)
                        last = data
                    elif event == "end":
                        return
            except STREAM_ERRORS:
                pass
        if not opened:
            lines = c.job_logs(job_id, tail).splitlines()
            for line in lines:
                typer.echo(line)
            last = lines[-1] if lines else None
        if follow_ and last is None and (tail == 0 or opened):  # only lines from now on
            everything = c.job_logs(job_id).splitlines()
            last = everything[-1] if everything else None
        while follow_:
            ended = JobState(c.job(job_id)["state"]) in ENDED_STATES
            fresh = lines_after(last, c.job_logs(job_id).splitlines())
            for line in fresh:
                typer.echo(line)
            if fresh:
                last = fresh[-1]
            if ended:
                break
            time.sleep(poll_s)
