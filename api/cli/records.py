"""``autosched records import|export``: move records between files and Redis / the service.

    records import FILE.jsonl [--dag DAG.json | --workload MODULE]   ours or TVM's v0.6 logs
    records export TASK_ID out.jsonl [--format tvm --dag DAG.json]

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

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.record import RECORD_FORMATS, RawRecord, parse_line, tvm_line_of
from workers.redis_conn import get_connection
from workers.store import RedisStore, import_record_file

from ..client import Client
from .errors import SERVICE_EXIT, CliError, one_line
from .options import DEFAULT_SERVER, RedisUrl, Server, Token

records_app = typer.Typer(help="move records between files and Redis")


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
