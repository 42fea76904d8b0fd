"""Command line of the worker side: ``worker`` (an RQ worker) and ``tune`` (one workload
through the queue path, on the embedded Redis when no REDIS_URL is set).

    python -m workers.cli tune examples/workloads/matmul_add.json --trials 64
    python -m workers.cli worker --queues tune --url redis://localhost:6379/0

``api/cli.py`` adds the server-side commands and installs all of them as ``autosched``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .queues import TUNE_QUEUE, enqueue_tune
from .redis_conn import connection_url, get_connection
from .store import RedisStore

app = typer.Typer(add_completion=False, help="autosched: template-free auto-scheduling")


@app.command()
def worker(queues: List[str] = typer.Option([TUNE_QUEUE], "--queues", "-q", help="queues to listen to"),
           url: Optional[str] = typer.Option(None, help="Redis URL (default: REDIS_URL or embedded)"),
           burst: bool = typer.Option(False, help="exit when the queues are empty")) -> None:
    """Run an RQ worker on ``queues`` (JSON serializer; job arguments are ids and JSON)."""
    from rq import Worker
    from rq.serializers import JSONSerializer
    conn = get_connection(url)
    Worker(list(queues), connection=conn, serializer=JSONSerializer).work(burst=burst)


def start_worker_process(conn, queues=(TUNE_QUEUE,), burst: bool = True) -> subprocess.Popen:
    """A child ``worker`` process on the same Redis (embedded or not), in its own process
    group so that it and its RQ work-horse can be stopped together (``os.killpg``)."""
    cmd = [sys.executable, "-m", "workers.cli", "worker", "--url", connection_url(conn)]
    for q in queues:
        cmd += ["--queues", q]
    if burst:
        cmd.append("--burst")
    return subprocess.Popen(cmd, start_new_session=True)


def follow_job(store: RedisStore, job_id: str, poll_s: float = 0.5) -> dict:
    """Show a progress bar (trials, best GFLOP/s, errors) until the job ends; returns it."""
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
            if job["state"] in ("finished", "failed", "cancelled"):
                return job
            time.sleep(poll_s)


@app.command()
def tune(workload: Path = typer.Argument(..., help="a ComputeDAG JSON file (see examples/workloads)"),
         target: str = typer.Option("llvm", help='"llvm" or "llvm -mcpu=..."'),
         trials: int = typer.Option(64, min=1, help="measurement trials"),
         per_round: int = typer.Option(16, min=1, help="measurements per round"),
         population: int = typer.Option(2048, min=8, help="evolutionary population"),
         measure: str = typer.Option("local", help="'local' (in the search job) or 'queue' (measurement "
                                                  "workers on the device queue)"),
         out: Path = typer.Option(Path("autosched_out"), help="where the best schedule and artifact go"),
         url: Optional[str] = typer.Option(None, help="Redis URL (default: REDIS_URL or embedded)")) -> None:
    """Tune one workload through the queue: task -> RQ job -> worker process -> records in Redis."""
    from scheduler_core.measure.record import decode_record
    from scheduler_core.schedule.schedule_printer import state_to_python
    conn = get_connection(url)
    store = RedisStore(conn)
    if measure not in ("local", "queue"):
        raise typer.BadParameter("--measure must be 'local' or 'queue'")
    tuning = {"num_measures_per_round": per_round, "population": population, "measure": measure}
    task_id, workload_key = store.create_task(workload.read_text(), target, tuning)
    job_id = store.create_job(task_id, trials)
    enqueue_tune(conn, task_id, job_id, trials)
    procs = [start_worker_process(conn)]
    if measure == "queue":
        from .queues import measure_queue_name
        procs.append(start_worker_process(conn, (measure_queue_name(store.get_task(task_id)["target"]),),
                                          burst=False))
    job = follow_job(store, job_id)
    procs[0].wait(timeout=60)
    for p in procs[1:]:
        p.terminate()
    if job["state"] != "finished":
        typer.echo(f"job {job_id} {job['state']}: {job.get('error', '')}", err=True)
        raise typer.Exit(1)
    task = store.get_task(task_id)
    best = store.best_record(workload_key, task["target"])
    out.mkdir(parents=True, exist_ok=True)
    dag = store.load_dag(workload_key)
    inp, _ = decode_record(best[1], {workload_key: dag})
    (out / "best_schedule.py").write_text(state_to_python(inp.state))
    (out / "best_record.json").write_text(best[1] + "\n")
    for fmt in ("so", "h", "ll"):
        data = store.load_artifact(task_id, fmt)
        if data is not None:
            (out / f"best.{fmt}").write_bytes(data)
    gflops = dag.flop_ct / best[0] / 1e9
    typer.echo(f"task {task_id} job {job_id}: best {best[0] * 1e3:.3f} ms ({gflops:.1f} GFLOP/s) "
               f"after {job['trials_done']} trials")
    typer.echo(f"wrote {out / 'best_schedule.py'}, {out / 'best.so'} (C header {out / 'best.h'})")


records_app = typer.Typer(help="move records between files and Redis")
app.add_typer(records_app, name="records")


@records_app.command("import")
def records_import(path: Path, url: Optional[str] = typer.Option(None, help="Redis URL (default: REDIS_URL)")) -> None:
    """Append a record file (RecordToFile's JSON lines) to Redis: DAGs, records, best index."""
    import json as _json

    from scheduler_core.measure.data import MeasureErrorNo
    from scheduler_core.measure.record import DagLine, iter_lines

    from . import keys
    store = RedisStore(get_connection(url))
    n = 0
    for item in iter_lines(str(path)):
        if isinstance(item, DagLine):
            store.conn.setnx(keys.dag(item.workload_key), _json.dumps(item.dag))
            continue
        store.append_records(item.workload_key, item.target, [item.text])
        if item.error_no == MeasureErrorNo.NO_ERROR:
            store.update_best(item.workload_key, item.target, item.mean_cost, item.text)
        n += 1
    typer.echo(f"imported {n} records from {path}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
