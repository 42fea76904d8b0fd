"""The options commands share, and the tuning flags generated from the library's one table.

    @tuning_flags  def cmd(..., tuning: dict)  -->  cmd --trials N --per-round N --seed N ...
        one typer option per TUNING_FIELDS entry (FLAG_NAMES gives the spelling), help from its
        doc; the command receives ``tuning``: the fields the user set, validated by
        TuningOptions.from_json (the dict the API's TuningOptions takes)

A flag left out is absent from ``tuning``, so the library's (and the API's) default applies.
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.search.tuning_options import FIELDS_BY_NAME, TUNING_FIELDS, TuningField, TuningOptions
from workers.redis_conn import DATA_DIR_ENV

from .errors import CliError

# option name on the command line of the fields whose name is not their flag ("_" -> "-" otherwise)
FLAG_NAMES = {"num_measure_trials": "--trials", "num_measures_per_round": "--per-round", "timeout_s": "--timeout",
              "time_budget_s": "--time"}
DURATION_FIELDS = ("time_budget_s",)  # flags that take a duration: 1200, 90s, 20m, 1h30m
_DURATION = re.compile(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*")


def parse_duration(text: str, flag: str = "--time") -> float:
    """Seconds of a duration written as ``1200``, ``90s``, ``20m``, ``1.5h`` or ``1h30m``.

    Raises CliError (exit 2) naming ``flag`` for anything else or a duration of 0.
    """
    m = _DURATION.fullmatch(str(text))
    if not m or not any(m.groups()):
        raise CliError(f"{flag} {text}: expected seconds or a duration such as 90s, 20m, 1h30m")
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + sec
    if total <= 0:
        raise CliError(f"{flag} {text}: must be more than 0 seconds")
    return total

Server = Annotated[str, typer.Option("--server", envvar="AUTOSCHED_SERVER", help="API base URL")]
Token = Annotated[str | None, typer.Option("--token", envvar="AUTOSCHED_API_TOKEN", help="bearer token")]
RedisUrl = Annotated[str | None, typer.Option("--url", help="Redis URL (default: REDIS_URL, else an embedded Redis)")]
DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", envvar=DATA_DIR_ENV,
    help="data directory of the embedded Redis and of the worker log (logs/worker.log); default: the "
         "user's data directory, e.g. ~/.local/share/autosched")]
DEFAULT_SERVER = "http://127.0.0.1:8000"


def flag_name(f: TuningField) -> str:
    """The command-line flag of a tuning field (``--per-round`` for ``num_measures_per_round``)."""
    return FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _bounds(f: TuningField) -> str:
    lo = f"{_num(f.ge)} <= " if f.ge is not None else (f"{_num(f.gt)} < " if f.gt is not None else "")
    hi = f" <= {_num(f.le)}" if f.le is not None else ""
    if isinstance(f.type, tuple):
        return "one of " + ", ".join(f.type)
    return f"{lo}x{hi}" if lo or hi else ""


def _option(f: TuningField) -> Any:
    """The ``Annotated[type | None, typer.Option(...)]`` of one tuning field."""
    py_type: Any = str if isinstance(f.type, tuple) or f.name in DURATION_FIELDS else \
        {"int|None": int, "float|None": float}.get(f.type, f.type)
    default = "never" if f.default is None else str(f.default)
    bounds = _bounds(f)
    doc = f.doc + (f" ({bounds})" if bounds else "")
    if f.name in DURATION_FIELDS:
        doc += "; seconds, or a duration such as 90s, 20m, 1h30m"
    return Annotated[py_type | None, typer.Option(flag_name(f), help=doc, show_default=default,
                                                  rich_help_panel="Tuning options")]


def tuning_from_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The set flags as the tuning dict of the API (field name -> value), checked by the library.

    Raises CliError (exit 2) naming the flag, e.g. ``--seed -1: must be >= 0``.
    """
    given = {name: v for name, v in values.items() if v is not None}
    for name in DURATION_FIELDS:
        if name in given:
            given[name] = parse_duration(given[name], flag_name(FIELDS_BY_NAME[name]))
    for name, value in given.items():  # the library's bounds and types: one source for CLI and API
        f = FIELDS_BY_NAME[name]
        if isinstance(f.type, tuple) and value not in f.type:
            raise CliError(f"{flag_name(f)} {value}: expected one of {', '.join(f.type)}")
        try:
            TuningOptions.from_json({name: value})
        except InvalidWorkloadError as err:
            why = str(err).rsplit(f"{name}={value!r}: ", 1)[-1]
            raise CliError(f"{flag_name(f)} {value}: {why}") from None
    return given


def tuning_flags(fn):
    """Give the command ``fn(..., tuning: dict)`` one option per tuning field.

    ``fn`` must take a keyword ``tuning``; the wrapper's signature replaces it with the options,
    and passes the set ones (validated, see :func:`tuning_from_flags`) as ``tuning``.
    """
    sig = inspect.signature(fn, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != "tuning"]
    extra = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_option(f))
             for f in TUNING_FIELDS]
    names = [f.name for f in TUNING_FIELDS]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = {n: kwargs.pop(n, None) for n in names}
        return fn(*args, tuning=tuning_from_flags(values), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[*params, *extra])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in [*params, *extra]}
    if sig.return_annotation is not inspect.Signature.empty:
        wrapper.__annotations__["return"] = sig.return_annotation
    del wrapper.__wrapped__  # typer must read the new signature, not fn's
    return wrapper

# ``tune`` and ``submit``: time the best beside numpy and torch at the end (the last line)
Compare = Annotated[bool, typer.Option(
    help="time the best here beside numpy and torch at the end (loads torch: a few seconds)")]
