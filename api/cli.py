"""``autosched``: the whole command line, in this one module.

    autosched tune examples/workloads/matmul_add.json --trials 64   # queue path, embedded Redis
    autosched worker --queues tune                                   # an RQ worker (any machine)
    autosched serve --port 8000 --workers 2                          # API + RQ workers (supervised)
    autosched submit examples/workloads/softmax.json --trials 64     # against a running server
    autosched submit-model graph.json --trials 64 --out model.tar.gz  # a whole model (POST /models)
    autosched status JOB_ID | best TASK_ID | artifact TASK_ID --format so | resume TASK_ID --trials 32
    autosched records import FILE.jsonl [--dag DAG.json | --workload MODULE]   # ours or TVM's v0.6 logs
    autosched records export TASK_ID out.jsonl [--format tvm --dag DAG.json]

The commands call ``workers`` (Redis store, queues, worker processes) and the HTTP
client; tuning options are the library's TuningOptions (same defaults as the API).
Without a Redis URL, ``tune`` and ``serve`` use the durable embedded Redis of a data
directory (``--data-dir``, ``AUTOSCHED_DATA_DIR``, else the user's data directory; see
``workers.redis_conn``): a restarted ``serve`` finds every task, job and record.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import typer
import uvicorn
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rq import Worker
from rq.serializers import JSONSerializer

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.record import RECORD_FORMATS, RawRecord, parse_line, tvm_line_of
from scheduler_core.search.tuning_options import FIELDS_BY_NAME
from workers.best import describe_best
from workers.job_state import ENDED_STATES, JobState
from workers.processes import WorkerSupervisor, recover_interrupted_jobs
from workers.queues import TUNE_QUEUE, enqueue_tune, gpu_measure_queue, measure_queue_name
from workers.redis_conn import (
    DATA_DIR_ENV,
    connection_url,
    get_connection,
    resolve_data_dir,
    started_embedded,
    stop_embedded,
)
from workers.store import ActiveJobError, RedisStore, import_record_file

from .client import ApiError, Client
from .main import create_app
from .settings import Settings

app = typer.Typer(add_completion=False, help="autosched: template-free auto-scheduling of tensor programs")
records_app = typer.Typer(help="move records between files and Redis")
app.add_typer(records_app, name="records")

_SERVER = typer.Option("http://127.0.0.1:8000", "--server", envvar="AUTOSCHED_SERVER", help="API base URL")
_TOKEN = typer.Option(None, "--token", envvar="AUTOSCHED_API_TOKEN", help="bearer token")
_URL = typer.Option(None, "--url", help="Redis URL (default: REDIS_URL, else an embedded Redis)")
_DATA_DIR = typer.Option(None, "--data-dir", envvar=DATA_DIR_ENV,
                         help="data directory of the embedded Redis (used when no Redis URL is set; "
                              "default: the user's data directory, e.g. ~/.local/share/autosched)")
_TRIALS = FIELDS_BY_NAME["num_measure_trials"]
_PER_ROUND = FIELDS_BY_NAME["num_measures_per_round"]
_POPULATION = FIELDS_BY_NAME["population"]


def _print(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def follow_job(store: RedisStore, job_id: str, poll_s: float = 0.5) -> dict:
    """Show a progress bar (trials, best GFLOP/s, errors) until the job ends; returns the job hash."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn())
    with Progress(*columns) as bar:
        job = store.get_job(job_id)
        t = bar.add_task("tuning", total=int(job["trials_total"]), info="")
        while True:
            job = store.get_job(job_id)
            errors = sum((job.get("errors") or {}).values())
            info = f"best {float(job.get('best_gflops') or 0):.1f} GFLOP/s | errors {errors} | {job['state']}"
            bar.update(t, completed=int(job.get("trials_done") or 0), info=info)
            if JobState(job["state"]) in ENDED_STATES:
                return job
            time.sleep(poll_s)


@app.command()
def worker(queues: list[str] = typer.Option([TUNE_QUEUE], "--queues", "-q", help="queues to listen to"),
           url: str | None = _URL,
           burst: bool = typer.Option(False, help="exit when the queues are empty"),
           gpu: int | None = typer.Option(None, help="also measure on local CUDA device N: listen on "
                                                      "measure:cuda:<its arch> (needs pycuda, extra .[cuda])")) -> None:
    """Run an RQ worker on ``queues`` (JSON serializer; job arguments are ids and JSON)."""
    names = list(queues)
    if gpu is not None:
        try:
            names.append(gpu_measure_queue(gpu))
        except Exception as err:  # DeviceRuntimeError: no driver / device / pycuda
            typer.echo(f"--gpu {gpu}: {err}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"listening on {', '.join(names)}", err=True)
    Worker(names, connection=get_connection(url), serializer=JSONSerializer).work(burst=burst)


@app.command()
def tune(workload: Path = typer.Argument(..., help="a ComputeDAG JSON file (see examples/workloads)"),
         target: str = typer.Option("llvm", help='"llvm" or "llvm -mcpu=..."'),
         trials: int = typer.Option(_TRIALS.default, min=1, help=_TRIALS.doc),
         per_round: int = typer.Option(_PER_ROUND.default, min=1, help=_PER_ROUND.doc),
         population: int = typer.Option(_POPULATION.default, min=8, help=_POPULATION.doc),
         measure: str = typer.Option("local", help="'local' (in the search job) or 'queue' (measurement "
                                                  "workers on the device queue)"),
         out: Path = typer.Option(Path("autosched_out"), help="where the best schedule and artifact go"),
         url: str | None = _URL, data_dir: Path | None = _DATA_DIR) -> None:
    """Tune one workload through the queue: task -> RQ job -> worker process -> records in Redis."""
    if measure not in ("local", "queue"):
        raise typer.BadParameter("--measure must be 'local' or 'queue'")
    conn = get_connection(url, data_dir=data_dir)
    store = RedisStore(conn)
    tuning = {"num_measure_trials": trials, "num_measures_per_round": per_round, "population": population,
              "measure": measure}
    recover_interrupted_jobs(conn)  # a tune stopped earlier on this data dir goes back on the queue
    try:
        task_id, _, job_id = store.create_task_with_job(workload.read_text(), target, tuning, trials)
        enqueue_tune(conn, task_id, job_id, trials)
    except ActiveJobError as err:  # at most one active job per task: follow the one there is
        typer.echo(f"task {err.task_id} already has an active job {err.job_id} ({err.state}); following it",
                   err=True)
        task_id, job_id = err.task_id, err.job_id
    # Supervised as under serve: a worker that dies is restarted and the job it left goes back on
    # the queue (it continues from its records); an embedded Redis this command started is too.
    supervisors = [WorkerSupervisor(connection_url(conn), 1, supervise_redis=started_embedded())]
    if measure == "queue":
        supervisors.append(WorkerSupervisor(connection_url(conn), 1,
                                            (measure_queue_name(store.get_task(task_id)["target"]),)))
    try:
        for sup in supervisors:
            sup.start()
        job = follow_job(store, job_id)
        if job["state"] != JobState.finished:
            typer.echo(f"job {job_id} {job['state']}: {job.get('error', '')}", err=True)
            raise typer.Exit(1)
        _write_best(store, task_id, job, out)
    finally:
        for sup in supervisors:
            sup.stop()
        stop_embedded()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _write_best(store: RedisStore, task_id: str, job: dict, out: Path) -> None:
    """Write the best schedule (Python), record and artifacts of a finished task under ``out``."""
    task = store.get_task(task_id)
    best = describe_best(store, task)
    if best is None:
        typer.echo(f"task {task_id}: no successful measurement", err=True)
        raise typer.Exit(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "best_schedule.py").write_text(best["script"])
    (out / "best_record.json").write_text(json.dumps(best["record"], separators=(",", ":")) + "\n")
    for fmt in ("so", "h", "ll"):
        data = store.load_artifact(task_id, fmt)
        if data is not None:
            (out / f"best.{fmt}").write_bytes(data)
    typer.echo(f"task {task_id} job {job['job_id']}: best {best['cost_s'] * 1e3:.3f} ms ({best['gflops']:.1f} "
               f"GFLOP/s) after {job['trials_done']} trials")
    typer.echo(f"wrote {out / 'best_schedule.py'}, {out / 'best.so'} (C header {out / 'best.h'})")


@app.command()
def serve(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
          workers: int = typer.Option(1, min=0, help="RQ worker processes to start beside the API"),
          data_dir: Path | None = _DATA_DIR) -> None:
    """Run the HTTP API and ``workers`` RQ workers on one Redis (embedded when no REDIS_URL).

    The embedded Redis keeps its data in ``--data-dir`` (AOF, fsync every second); when a
    server already runs on that directory, serve uses it.  The workers are supervised (a
    dead one is restarted with backoff; a job it left is put back on its queue), and so is
    an embedded Redis that serve started.  Ctrl-C / SIGTERM stops the workers (warm, then
    cold shutdown: a job still running is requeued on the next start and continues from
    its records), then the embedded Redis.
    """
    url = os.environ.get("REDIS_URL")
    conn = get_connection(url, data_dir=data_dir)
    if not url:
        owner = "started" if started_embedded() else "connected to an already running"
        typer.echo(f"{owner} embedded Redis, data in {resolve_data_dir(data_dir)}", err=True)
    supervisor = WorkerSupervisor(connection_url(conn), workers, supervise_redis=started_embedded())
    # uvicorn re-raises a SIGTERM after its graceful shutdown; as SystemExit it reaches
    # the finally below, which stops the workers and the embedded Redis.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        supervisor.start()
        uvicorn.run(create_app(Settings(redis_url=connection_url(conn))), host=host, port=port)
    finally:
        supervisor.stop()
        stop_embedded()


@app.command()
def submit(workload: Path, target: str = typer.Option("llvm"), trials: int = typer.Option(64, min=1),
           wait: bool = typer.Option(True, help="follow the job until it ends"),
           server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """POST a ComputeDAG JSON file as a search task."""
    with Client(server, token=token) as c:
        created = c.create_task(workload.read_text(), target=target, num_measure_trials=trials)
        _print(created)
        if wait:
            _print(c.wait(created["job_id"]))


@app.command("submit-model")
def submit_model(graph: Path = typer.Argument(..., help="a graph JSON file (Graph.to_json: graph + every DAG)"),
                 target: str = typer.Option("llvm"), trials: int = typer.Option(64, min=1),
                 wait: bool = typer.Option(True, help="follow the job until it ends"),
                 out: Path | None = typer.Option(None, help="write the model .tar.gz here when the job ends"),
                 server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """POST a whole model (one job over all its tasks); with --out, download its artifact."""
    with Client(server, token=token) as c:
        created = c.create_model(graph.read_text(), target=target, num_measure_trials=trials)
        _print(created)
        if wait or out:
            _print(c.wait(created["job_id"]))
            _print(c.model(created["model_id"]))
        if out:
            data = c.model_artifact(created["model_id"])
            out.write_bytes(data)
            typer.echo(f"wrote {out} ({len(data)} bytes)")


@app.command()
def status(job_id: str, server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """A job's state, trials done/total, best latency and error counts."""
    with Client(server, token=token) as c:
        _print(c.job(job_id))


@app.command()
def best(task_id: str, server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """The best schedule of a task: latency, steps, Python schedule code."""
    with Client(server, token=token) as c:
        b = c.best(task_id)
    typer.echo(b.get("script") or "")
    _print({k: v for k, v in b.items() if k not in ("script", "lowered")})


@app.command()
def artifact(task_id: str, format: str = typer.Option("so", "--format"), out: Path | None = None,
             server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """Download the compiled best program (so | o | ll | asm)."""
    with Client(server, token=token) as c:
        data = c.artifact(task_id, format)
    path = out or Path(f"{task_id}.{format}")
    path.write_bytes(data)
    typer.echo(f"wrote {path} ({len(data)} bytes)")


@app.command()
def resume(task_id: str, trials: int = typer.Option(32, min=1), server: str = _SERVER,
           token: str | None = _TOKEN) -> None:
    """Continue a task's search with more trials (measured states are never re-measured)."""
    with Client(server, token=token) as c:
        _print(c.resume(task_id, trials))


def _fail(message: str) -> typer.Exit:
    """Print ``error: message`` as one line on stderr; the Exit(1) to raise."""
    typer.echo("error: " + " ".join(str(message).split()), err=True)
    return typer.Exit(1)


def _import_workloads(spec: str) -> None:
    """Import a module (dotted name, or a ``.py`` file) so its ``register_workload`` calls run."""
    if spec.endswith(".py") or os.path.sep in spec:
        path = Path(spec)
        loader_spec = importlib.util.spec_from_file_location(f"autosched_workloads_{path.stem}", path)
        if loader_spec is None or loader_spec.loader is None or not path.is_file():
            raise ImportError(f"no Python file {spec}")
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
    else:
        importlib.import_module(spec)


def _read_dag(path: Path) -> ComputeDAG:
    try:
        return ComputeDAG.from_json(path.read_text())
    except (OSError, SchedulerCoreError) as err:
        raise _fail(f"--dag {path}: {err}") from None


@records_app.command("import")
def records_import(
        path: Path,
        dag: list[Path] = typer.Option([], "--dag", help="a ComputeDAG JSON file for TVM records (a TVM log has "
                                       "no DAG lines): it resolves keys [\"<hash>\", shapes...] with its tensor "
                                       "shapes (repeatable)"),
        workload: list[str] = typer.Option([], "--workload", help="a Python module (dotted name or .py file) whose "
                                           "register_workload functions resolve TVM keys [\"name\", args...] "
                                           "(repeatable)"),
        url: str | None = _URL) -> None:
    """Append a record file to Redis: DAGs, records, best index.

    Reads RecordToFile's JSON lines and TVM's auto_scheduler logs ("v": "v0.6", mixed freely);
    TVM records are stored as ours, under the workload_key of their DAG.
    """
    dags = [_read_dag(p) for p in dag]
    for spec in workload:
        try:
            _import_workloads(spec)
        except Exception as err:  # anything the user's module raises on import
            raise _fail(f"--workload {spec}: cannot import it: {type(err).__name__}: {err}") from None
    try:
        n = import_record_file(RedisStore(get_connection(url)), path, {d.workload_key: d for d in dags}, dags)
    except (OSError, SchedulerCoreError) as err:
        raise _fail(str(err)) from None
    typer.echo(f"imported {n} records from {path}")


@records_app.command("export")
def records_export(task_id: str, out: Path,
                   format: str = typer.Option("autosched", "--format", help="autosched (RecordToFile's lines) or "
                                              "tvm (TVM's auto_scheduler log lines, v0.6; needs --dag)"),
                   dag: Path | None = typer.Option(None, "--dag", help="the task's ComputeDAG JSON: --format tvm "
                                                   "writes its tensor shapes into TVM's workload keys"),
                   server: str = _SERVER, token: str | None = _TOKEN) -> None:
    """Write a task's records as JSON lines (RecordToFile's format, or TVM's with --format tvm)."""
    if format not in RECORD_FORMATS:
        raise _fail(f"--format {format!r}: the formats are {', '.join(RECORD_FORMATS)}")
    if format == "tvm" and dag is None:
        raise _fail("--format tvm needs --dag FILE (the task's ComputeDAG JSON): TVM keys carry its tensor shapes")
    dag_obj = _read_dag(dag) if dag is not None else None
    parts, offset, page = [], 0, 1000
    with Client(server, token=token) as c:
        if dag_obj is not None and c.task(task_id)["workload_key"] != dag_obj.workload_key:
            raise _fail(f"--dag {dag}: its workload_key {dag_obj.workload_key} is not task {task_id}'s")
        while True:
            text = c.records_jsonl(task_id, offset, page)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            parts.extend(lines)
            if len(lines) < page:
                break
            offset += page
    if format == "tvm":
        try:
            parts = [tvm_line_of(_record_of(ln, k + 1), dag_obj) for k, ln in enumerate(parts)]
        except SchedulerCoreError as err:
            raise _fail(str(err)) from None
    out.write_text("".join(ln + "\n" for ln in parts))
    typer.echo(f"wrote {out}")


def _record_of(line: str, lineno: int) -> RawRecord:
    raw = parse_line(line, lineno)
    if not isinstance(raw, RawRecord):
        raise RecordFormatError("not a measurement record", lineno)
    return raw


def main() -> None:
    try:
        app()
    except ApiError as err:
        typer.echo(f"error {err.status}: {err.detail}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
