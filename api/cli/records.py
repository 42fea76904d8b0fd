"""``autosched records ...``: record files on their own, and between files and Redis / the service.

    records show FILE                                   one row per workload and target: records,
                                                        errors, the best median latency
    records best FILE [--workload KEY] [--target T]     the best record: latency, the schedule as
                                                        Python (TVM's ``print_best``), its line
    records distill FILE OUT                            keep the best record per workload and target
                                                        (TVM's ``distill_record_file``)
    records import FILE.jsonl [--dag DAG.json | --workload MODULE]   ours or TVM's v0.6 logs
    records export TASK_ID out.jsonl [--format tvm --dag DAG.json]

``show``, ``best`` and ``distill`` read a local file (what ``RecordToFile`` wrote, or a TVM log with
``--dag``) and need no service.

A file that cannot be read or a record the library rejects ends the command with one
``error: ...`` line and exit 1.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.record import RECORD_FORMATS, DagLine, RawRecord, parse_line, tvm_line_of
from scheduler_core.measure.record_file import distill, iter_lines, load_best_record
from scheduler_core.schedule.schedule_printer import state_to_python
from workers.redis_conn import get_connection
from workers.store import RedisStore, import_record_file

from ..client import Client
from .errors import SERVICE_EXIT, CliError, one_line
from .options import DEFAULT_SERVER, RedisUrl, Server, Token

records_app = typer.Typer(help="record files: show, best, distill; import into Redis, export from the service")


def _fail(message: str) -> CliError:
    """The CliError of a records command: ``error: message``, exit 1."""
    return CliError(message, SERVICE_EXIT)


def import_workloads(spec: str) -> None:
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


def read_dag_option(path: Path) -> ComputeDAG:
    """The ComputeDAG of a ``--dag`` file; exit 1 naming the file when it cannot be read or parsed."""
    try:
        return ComputeDAG.from_json(path.read_text())
    except (OSError, SchedulerCoreError) as err:
        raise _fail(f"--dag {path}: {err}") from None


@records_app.command("import")
def records_import(
        path: Path,
        dag: Annotated[list[Path], typer.Option(
            "--dag", help="a ComputeDAG JSON file for TVM records (a TVM log has no DAG lines): it resolves keys "
                          "[\"<hash>\", shapes...] with its tensor shapes (repeatable)")] = [],  # noqa: B006
        workload: Annotated[list[str], typer.Option(
            "--workload", help="a Python module (dotted name or .py file) whose register_workload functions "
                               "resolve TVM keys [\"name\", args...] (repeatable)")] = [],  # noqa: B006
        url: RedisUrl = None) -> None:
    """Append a record file to Redis: DAGs, records, best index.

    Reads RecordToFile's JSON lines and TVM's auto_scheduler logs ("v": "v0.6", mixed freely);
    TVM records are stored as ours, under the workload_key of their DAG.
    """
    dags = [read_dag_option(p) for p in dag]
    for spec in workload:
        try:
            import_workloads(spec)
        except Exception as err:  # noqa: BLE001 - anything the user's module raises on import
            raise _fail(f"--workload {spec}: cannot import it: {type(err).__name__}: {err}") from None
    try:
        n = import_record_file(RedisStore(get_connection(url)), path, {d.workload_key: d for d in dags}, dags)
    except (OSError, SchedulerCoreError) as err:
        raise _fail(one_line(err)) from None
    typer.echo(f"imported {n} records from {path}")


@records_app.command("export")
def records_export(task_id: str, out: Path,
                   format: Annotated[str, typer.Option(
                       "--format", help="autosched (RecordToFile's lines) or tvm (TVM's auto_scheduler log lines, "
                                        "v0.6; needs --dag)")] = "autosched",
                   dag: Annotated[Path | None, typer.Option(
                       "--dag", help="the task's ComputeDAG JSON: --format tvm writes its tensor shapes into TVM's "
                                     "workload keys")] = None,
                   server: Server = DEFAULT_SERVER, token: Token = None) -> None:
    """Write a task's records as JSON lines (RecordToFile's format, or TVM's with --format tvm)."""
    if format not in RECORD_FORMATS:
        raise _fail(f"--format {format!r}: the formats are {', '.join(RECORD_FORMATS)}")
    if format == "tvm" and dag is None:
        raise _fail("--format tvm needs --dag FILE (the task's ComputeDAG JSON): TVM keys carry its tensor shapes")
    dag_obj = read_dag_option(dag) if dag is not None else None
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
            parts = [tvm_line_of(record_of(ln, k + 1), dag_obj) for k, ln in enumerate(parts)]
        except SchedulerCoreError as err:
            raise _fail(str(err)) from None
    out.write_text("".join(ln + "\n" for ln in parts))
    typer.echo(f"wrote {out}")


def record_of(line: str, lineno: int) -> RawRecord:
    """The RawRecord of a record line; RecordFormatError for a DAG line or an invalid one."""
    raw = parse_line(line, lineno)
    if not isinstance(raw, RawRecord):
        raise RecordFormatError("not a measurement record", lineno)
    return raw


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


@records_app.command("show")
def records_show(path: Path) -> None:
    """One row per workload and target of a record file: records, errors, best median latency."""
    rows: dict = {}
    try:
        for item in iter_lines(path):
            if isinstance(item, DagLine):
                continue
            row = rows.setdefault((item.workload_key, " ".join(item.target.split())), [0, 0, None])
            row[0] += 1
            if item.cost is None:
                row[1] += 1
            elif row[2] is None or item.median_cost < row[2]:
                row[2] = item.median_cost
    except (OSError, SchedulerCoreError) as err:
        raise _fail(one_line(err)) from None
    table = Table(title=f"{path}: {sum(r[0] for r in rows.values())} records")
    for col in ("workload_key", "target", "records", "errors", "best (median)"):
        table.add_column(col)
    for (key, target), (n, errors, best) in rows.items():
        table.add_row(key, target, str(n), str(errors), _ms(best) if best is not None else "-")
    Console(width=160).print(table)


@records_app.command("best")
def records_best(path: Path,
                 workload: Annotated[str | None, typer.Option(
                     "--workload", help="only this workload_key (default: the best of any)")] = None,
                 target: Annotated[str | None, typer.Option("--target", help="only this target")] = None,
                 dag: Annotated[list[Path], typer.Option(
                     "--dag", help="a ComputeDAG JSON file resolving TVM records (repeatable)")] = [],  # noqa: B006
                 ) -> None:
    """The best record of a file: its median latency, the schedule as Python (TVM's
    ``print_best``) and the record line."""
    dags = {d.workload_key: d for d in (read_dag_option(p) for p in dag)}
    try:
        found = load_best_record(path, workload, target, dags=dags)
    except (OSError, SchedulerCoreError) as err:
        raise _fail(one_line(err)) from None
    if found is None:
        what = " and ".join(f"{k} {v}" for k, v in (("workload", workload), ("target", target)) if v)
        raise _fail(f"{path}: no successful record" + (f" of {what}" if what else ""))
    inp, res = found
    costs = sorted(res.costs)
    typer.echo(f"best {_ms(costs[len(costs) // 2])} (median of {len(costs)}) for workload "
               f"{inp.task.workload_key} on {inp.task.target}")
    typer.echo(state_to_python(inp.state).rstrip())


@records_app.command("distill")
def records_distill(path: Path, out: Path) -> None:
    """Keep only the best record per workload and target (TVM's ``distill_record_file``); records
    already in OUT take part too."""
    try:
        kept = distill(path, out)
    except (OSError, SchedulerCoreError) as err:
        raise _fail(one_line(err)) from None
    typer.echo(f"wrote {out}: {kept} record(s), the best per workload and target")
