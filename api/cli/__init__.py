"""``autosched``: the command line (typer), one module per group of commands.

    autosched tune examples/workloads/matmul_add.json --trials 64   # queue path, embedded Redis
    autosched tune ... --resume                                      # reuse autosched_out/records.json
    autosched worker --queues tune                                   # an RQ worker (any machine)
    autosched serve --port 8000 --workers 2                          # API + RQ workers (supervised)
    autosched submit examples/workloads/softmax.json --trials 64     # against a running server
    autosched list [--state running] | status JOB | cancel JOB | logs JOB [--tail 20] [--follow]
    autosched best TASK | artifact TASK --format so | resume TASK --trials 32
    autosched submit-model graph.json --trials 64 --out model.tar.gz     (or model.onnx)
    autosched records import FILE.jsonl [--dag DAG.json | --workload MODULE]   # ours or TVM's v0.6 logs
    autosched records export TASK_ID out.jsonl [--format tvm --dag DAG.json]
    autosched --version

Modules: ``errors`` (the one error boundary: readable lines and an exit code, never a
traceback; the input readers), ``options`` (shared options; the tuning flags generated from
``TUNING_FIELDS``), ``progress`` (the progress bar of tune and submit --wait, logs kept out of
it), ``summary`` (the final line beside numpy), ``local_tune`` (``tune``), ``server_cmds`` (HTTP
commands, serve, worker), ``records`` (record files), ``schedule_script`` (best_schedule.py).
Without a Redis URL, ``tune`` and ``serve`` use the durable embedded Redis of a data directory
(``--data-dir``, ``AUTOSCHED_DATA_DIR``, else the user's data directory; ``workers.redis_conn``).
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from . import server_cmds
from .errors import ErrorBoundaryGroup, error_message
from .local_tune import tune
from .records import records_app

app = typer.Typer(cls=ErrorBoundaryGroup, add_completion=False, no_args_is_help=True,
                  help="autosched: template-free auto-scheduling of tensor programs")


def version_text() -> str:
    """``autosched 0.1.0 (Python 3.12.3)``: the installed package's version and Python's."""
    try:
        ours = version("autosched")
    except PackageNotFoundError:
        ours = "(not installed)"
    return f"autosched {ours} (Python {platform.python_version()})"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def root(version_: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """autosched: template-free auto-scheduling of tensor programs."""


app.command()(tune)
app.command()(server_cmds.submit)
app.command("submit-model")(server_cmds.submit_model)
app.command("list")(server_cmds.list_tasks)
app.command()(server_cmds.status)
app.command()(server_cmds.cancel)
app.command()(server_cmds.logs)
app.command()(server_cmds.best)
app.command()(server_cmds.artifact)
app.command()(server_cmds.resume)
app.command()(server_cmds.serve)
app.command()(server_cmds.worker)
app.add_typer(records_app, name="records")


def main() -> None:
    """The ``autosched`` entry point: the app, with a last boundary for errors raised outside a command."""
    try:
        app()
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - a user's mistake never shows a traceback
        shown = error_message(err)
        if shown is None:
            raise
        for line in shown[0]:
            print(line, file=sys.stderr)
        raise SystemExit(shown[1]) from None
