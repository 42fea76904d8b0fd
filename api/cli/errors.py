"""The command line's one error boundary and its input readers.

    ErrorBoundaryGroup.invoke --any command--> an exception of USER_ERRORS
        --error_message--> (one or a few readable lines, exit code) on stderr; never a traceback

Exit codes: 2 for a usage or input mistake (a missing or unreadable file, malformed JSON, a
DAG or target or tuning option the library rejects), 1 for the server's or the service's
answer (an HTTP 4xx/5xx, a server or Redis that cannot be reached, a job that failed).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import redis
import typer
from typer.core import TyperGroup

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG

from ..client import ApiError

USAGE_EXIT = 2   # the user's input is wrong
SERVICE_EXIT = 1  # the server, Redis or the job said no


class CliError(Exception):
    """A mistake the command found itself: ``message`` (printed after ``error: ``) and the exit ``code``."""

    def __init__(self, message: str, code: int = USAGE_EXIT):
        super().__init__(message)
        self.code = code


def one_line(text: Any) -> str:
    """``text`` with its whitespace runs (newlines included) collapsed to single spaces."""
    return " ".join(str(text).split())


def _loc(loc: list) -> str:
    """``["body", "dag", "ops", 4, "body"]`` -> ``dag.ops[4].body`` (the request part ``body`` /
    ``query`` / ``path`` dropped when something follows it)."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def api_error_lines(err: ApiError) -> list[str]:
    """The lines that show an error response: ``error 422: dag.ops[4].body: ...``, one per issue
    of a validation error's list; never a Python list or dict."""
    detail = err.detail
    head = f"error {err.status}"
    if isinstance(detail, list) and detail:
        lines = []
        for issue in detail:
            if isinstance(issue, dict):
                loc = _loc(issue.get("loc") or [])
                msg = one_line(issue.get("msg", "")).removeprefix("Value error, ")
                lines.append(f"{head}: {loc}: {msg}" if loc else f"{head}: {msg}")
            else:
                lines.append(f"{head}: {one_line(issue)}")
        return lines
    if isinstance(detail, dict):
        detail = detail.get("detail") or detail.get("message") or json.dumps(detail)
    text = one_line(detail) if detail not in (None, "") else "(no detail)"
    return [f"{head}: {text if len(text) <= 300 else text[:297] + '...'}"]


def _reason(err: Exception) -> str:
    """``[Errno 111] Connection refused`` -> ``connection refused``."""
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", one_line(err)) or type(err).__name__
    return text[:1].lower() + text[1:]


def _base_url(err: httpx.RequestError) -> str:
    try:
        url = err.request.url
    except RuntimeError:  # no request attached
        return "the server"
    return f"{url.scheme}://{url.netloc.decode()}"


def error_message(err: BaseException) -> tuple[list[str], int] | None:
    """``(lines, exit code)`` for an exception that is the user's or the service's problem;
    None for anything else (a bug: let it show its traceback)."""
    if isinstance(err, CliError):
        return [f"error: {one_line(err)}"], err.code
    if isinstance(err, ApiError):
        return api_error_lines(err), SERVICE_EXIT
    if isinstance(err, httpx.ConnectError):
        return [f"error: cannot reach {_base_url(err)}: {_reason(err)}; is `autosched serve` running?"], SERVICE_EXIT
    if isinstance(err, httpx.TimeoutException):
        return [f"error: {_base_url(err)} did not answer in time ({_reason(err)})"], SERVICE_EXIT
    if isinstance(err, httpx.RequestError):
        return [f"error: request to {_base_url(err)} failed: {_reason(err)}"], SERVICE_EXIT
    if isinstance(err, redis.exceptions.ConnectionError):
        return [f"error: cannot reach Redis: {_reason(err)}"], SERVICE_EXIT
    if isinstance(err, redis.exceptions.RedisError):
        return [f"error: Redis: {one_line(err)}"], SERVICE_EXIT
    if isinstance(err, SchedulerCoreError):  # a DAG, target or tuning option the library rejects
        return [f"error: {one_line(err)}"], USAGE_EXIT
    if isinstance(err, json.JSONDecodeError):
        return [f"error: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"], USAGE_EXIT
    if isinstance(err, OSError) and err.filename is not None:
        return [f"error: {err.filename}: {(err.strerror or one_line(err)).lower()}"], USAGE_EXIT
    if isinstance(err, TimeoutError):
        return [f"error: {one_line(err)}"], SERVICE_EXIT
    if isinstance(err, KeyboardInterrupt):
        return ["interrupted"], 130
    return None


class ErrorBoundaryGroup(TyperGroup):
    """The command group of ``autosched``: every command runs inside :meth:`invoke`, which turns the
    exceptions of :func:`error_message` into their lines on stderr and their exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """Click's main; a usage mistake (bad option value, missing argument) is shown as
        ``error: <click's message>`` and a ``see: <command> --help`` line, exit 2, not a box."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except typer.TyperException as err:  # click's ClickException family (typer vendors click)
            if not standalone_mode:
                raise
            message = err.format_message() if hasattr(err, "format_message") else str(err)
            if type(err).__name__ == "NoArgsIsHelpError":  # no command: the help (rich printed it already)
                if message.strip():
                    typer.echo(message, err=True)
                sys.exit(getattr(err, "exit_code", USAGE_EXIT))
            typer.echo(f"error: {one_line(message)}", err=True)
            ctx = getattr(err, "ctx", None)
            if ctx is not None:
                typer.echo(f"see: {ctx.command_path} --help", err=True)
            sys.exit(getattr(err, "exit_code", USAGE_EXIT))
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo("aborted", err=True)
            sys.exit(1)
        if standalone_mode:
            sys.exit(rv if isinstance(rv, int) else 0)
        return rv

    def invoke(self, ctx: Any) -> Any:  # click's Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - the boundary; others re-raise
            shown = error_message(err)
            if shown is None:
                raise
            lines, code = shown
            for line in lines:
                typer.echo(line, err=True)
            raise typer.Exit(code) from None


# -- reading the user's files ------------------------------------------------------------------

def read_text(path: Path, what: str = "file") -> str:
    """The text of ``path``; CliError (exit 2) naming it when it is missing, a directory or unreadable."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise CliError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, expected a {what}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a text file (expected a {what})") from None
    except OSError as err:
        raise CliError(f"{path}: cannot read it: {(err.strerror or one_line(err)).lower()}") from None


def read_json(path: Path, what: str = "JSON file") -> Any:
    """The parsed JSON of ``path``; CliError (exit 2) with the line and column of a syntax error."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise CliError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None


def read_dag(path: Path, require_concrete_shapes: bool = True) -> tuple[Any, ComputeDAG]:
    """``(the JSON value, the ComputeDAG)`` of a ComputeDAG JSON file (a DAG to tune: by default
    its shapes must be numbers, as the API requires).

    Raises CliError (exit 2): a missing file, malformed JSON (line and column), or a DAG the
    library rejects (InvalidWorkloadError: its message names the node, e.g. ``ops[4].body``).
    """
    value = read_json(path, "ComputeDAG JSON file")
    try:
        return value, ComputeDAG.from_json(value, require_concrete_shapes=require_concrete_shapes)
    except SchedulerCoreError as err:
        raise CliError(f"{path}: {one_line(err)}") from None
