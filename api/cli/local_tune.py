"""``autosched tune``: one workload through the queue path on this machine, its outputs in ``--out``.

    DAG file --RedisStore.create_task_with_job--> task + job (embedded Redis of --data-dir)
      --supervised RQ worker processes (their output: <data dir>/logs/worker.log)--> records
      --> progress bar (stderr) --> --out/records.json, best_schedule.py, best.so/.h/.ll,
          best_record.json --> "best ... after N trials; timed here at T threads: tuned ..., numpy ...,
          torch ..." (the best rebuilt and timed in this process beside numpy and torch)

``--resume`` imports ``--out/records.json`` first (records of states already stored are skipped),
so the search measures only new states; the final line says how many trials were reused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.record import encode_dag_line
from scheduler_core.search.tuning_options import FIELDS_BY_NAME
from workers.admission import ActiveJobError
from workers.best import describe_best
from workers.job_state import JobState
from workers.logging_setup import configure_worker_logging
from workers.processes import LOG_LEVEL_ENV, WorkerSupervisor, recover_interrupted_jobs
from workers.queues import enqueue_tune, measure_queue_name
from workers.records import TaskRecord
from workers.redis_conn import connection_url, get_connection, resolve_data_dir, started_embedded, stop_embedded
from workers.store import RedisStore, import_record_file

from ..schemas import JobPublic
from .errors import SERVICE_EXIT, CliError, one_line, read_dag
from .options import Compare, DataDir, RedisUrl, tuning_flags
from .progress import follow, log_to_console, worker_output_to
from .schedule_script import schedule_script
from .summary import compare_here, early_end_reason, final_line

RECORDS_FILE = "records.json"


def write_records(store: RedisStore, dag: ComputeDAG, target: str, path: Path) -> int:
    """Write every record of ``dag`` on ``target`` (canonical) to ``path`` in the record file format
    (a DAG line, then one record line each: ``sc.load_records`` and ``records import`` read it);
    returns the number of records."""
    wk = dag.workload_key
    lines = [encode_dag_line(wk, dag)] + list(store.iter_records(wk, target))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(ln + "\n" for ln in lines))
    os.replace(tmp, path)
    return len(lines) - 1


def write_outputs(store: RedisStore, task: TaskRecord, dag: ComputeDAG, out: Path) -> dict | None:
    """records.json, best_schedule.py, best_record.json and the artifacts of ``task`` under ``out``;
    the best (``describe_best``) or None when nothing was measured successfully."""
    out.mkdir(parents=True, exist_ok=True)
    write_records(store, dag, task.target, out / RECORDS_FILE)
    best = describe_best(store, task)
    if best is None:
        return None
    line = json.dumps(best["record"], separators=(",", ":"))
    (out / "best_schedule.py").write_text(schedule_script(dag, line, task.target, best["cost_s"], best["script"]))
    (out / "best_record.json").write_text(line + "\n")
    for fmt in ("so", "h", "ll"):
        data = store.load_artifact(task.task_id, fmt)
        if data is not None:
            (out / f"best.{fmt}").write_bytes(data)
    return best


@tuning_flags
def tune(workload: Annotated[Path, typer.Argument(help="a ComputeDAG JSON file (see examples/workloads)")],
         target: Annotated[str, typer.Option(help='"llvm", "llvm -mcpu=..." or "cuda"')] = "llvm",
         out: Annotated[Path, typer.Option(help="where records.json, best_schedule.py and the artifact go")]
         = Path("autosched_out"),
         resume: Annotated[bool, typer.Option("--resume", help="first import OUT/records.json (a previous "
                                                               "tune's records): only new states are measured")]
         = False,
         log_level: Annotated[str, typer.Option(help="level of the worker log file (DEBUG, INFO, WARNING)")]
         = "INFO",
         compare: Compare = True, url: RedisUrl = None, data_dir: DataDir = None, *, tuning: dict) -> None:
    """Tune one workload through the queue: task -> RQ job -> worker process -> records in Redis.

    The progress bar shows the phase, trials, an ETA and the best so far; worker logs go to
    <data dir>/logs/worker.log.  The last line compares the best with numpy and torch, timed in this process.
    """
    _, dag = read_dag(workload)
    target = str(Target.parse(target))  # InvalidTargetError names the allowed values (exit 2)
    records_path = out / RECORDS_FILE
    if resume and not records_path.is_file():
        raise CliError(f"--resume: no {records_path} to resume from (run tune without --resume first, "
                       f"or pass the --out of that run)")
    conn = get_connection(url, data_dir=data_dir)
    try:
        store = RedisStore(conn)
        if resume:
            import_record_file(store, records_path, {dag.workload_key: dag}, dag)
        reused = store.count_records(dag.workload_key, target)
        if resume and not reused:
            typer.echo(f"note: {records_path} holds no record of this workload on {target}; nothing to reuse",
                       err=True)
        recover_interrupted_jobs(conn)  # a tune stopped earlier on this data dir goes back on the queue
        trials = int(tuning.get("num_measure_trials") or FIELDS_BY_NAME["num_measure_trials"].default)
        try:
            task_id, _, job_id = store.create_task_with_job(dag, target, tuning, trials)
            enqueue_tune(conn, task_id, job_id, trials)
        except ActiveJobError as err:  # at most one active job per task: follow the one there is
            typer.echo(f"task {err.task_id} already has an active job {err.job_id} ({err.state}); following it",
                       err=True)
            task_id, job_id = err.task_id, err.job_id
        job = _run_workers(store, task_id, job_id, data_dir, log_level)
        if job["state"] != JobState.finished:
            raise CliError(f"job {job_id} {job['state']}: {one_line(job.get('error') or '')}".rstrip(": "),
                           SERVICE_EXIT)
        task = store.get_task(task_id)
        if task is None:
            raise CliError(f"task {task_id} is no longer in Redis", SERVICE_EXIT)
        best = write_outputs(store, task, dag, out)
        distinct = store.count_records(dag.workload_key, target)
    finally:
        stop_embedded()
    if best is None:
        raise CliError(f"task {task_id}: no successful measurement (see {records_path})", SERVICE_EXIT)
    typer.echo(f"task {task_id} job {job_id}: wrote {records_path}, {out / 'best_schedule.py'} "
               f"(run it to rebuild {out / 'best.so'}), C header {out / 'best.h'}")
    reason = early_end_reason(job, distinct, task.tuning.get("early_stopping"))
    if reason:
        typer.echo(reason)
    comparison = compare_here(dag, target, best["steps"]) if compare else "not compared (--no-compare)"
    typer.echo(final_line(best["cost_s"], best["gflops"], int(job["trials_done"]) + reused, comparison, reused))


def _run_workers(store: RedisStore, task_id: str, job_id: str, data_dir, log_level: str) -> dict:
    """Start supervised workers (tune queue; the device's measure queue for ``measure=queue``), show
    the bar until the job ends, stop them; the last job dict.  Worker output goes to the log file."""
    try:
        log_path = configure_worker_logging(resolve_data_dir(data_dir), log_level)
    except ValueError as err:  # an unknown level name
        raise CliError(f"--log-level: {err}") from None
    os.environ[LOG_LEVEL_ENV] = log_level  # the worker processes log at this level too
    task = store.get_task(task_id)
    if task is None:
        raise CliError(f"task {task_id} is no longer in Redis", SERVICE_EXIT)
    url = connection_url(store.conn)
    # Supervised as under serve: a worker that dies is restarted and the job it left goes back on
    # the queue (it continues from its records); an embedded Redis this command started is too.
    where = resolve_data_dir(data_dir)
    supervisors = [WorkerSupervisor(url, 1, supervise_redis=started_embedded(), data_dir=where)]
    if task.tuning.get("measure") == "queue":
        supervisors.append(WorkerSupervisor(url, 1, (measure_queue_name(task.target),), data_dir=where))
    with worker_output_to(log_path) as terminal:
        console = Console(file=terminal)
        with log_to_console(console):
            try:
                for sup in supervisors:
                    sup.start()
                return follow(lambda: _job(store, job_id), console)
            finally:
                for sup in supervisors:
                    sup.stop()


def _job(store: RedisStore, job_id: str) -> dict:
    """The job as GET /jobs/{id} answers it (the progress display reads that form)."""
    job = store.get_job(job_id)
    if job is None:  # the Redis lost it (flushed, or another data directory)
        raise CliError(f"job {job_id} is no longer in Redis", SERVICE_EXIT)
    return JobPublic.model_validate(job).model_dump(mode="json")
