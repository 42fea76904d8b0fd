"""TuningOptions: how long and how to tune, one typed object from the API to the search.

    API body ``tuning`` (pydantic model built from TUNING_FIELDS) --TuningOptions.from_json-->
    TuningOptions --to_json--> Redis task hash --from_json--> tune job --> SketchPolicy.tune

The serializable fields, their defaults, bounds and descriptions are declared once, in
:data:`TUNING_FIELDS`; the library dataclass validates against it, the service builds its
request schema from it, so every entry point has the same defaults.  ``builder``,
``runner`` and ``measure_callbacks`` are library objects and never cross a process.
Ansor's TuningOptions (TVM ``auto_scheduler.TuningOptions``) plus the two evolution
parameters that the service exposes (``population``, ``num_iters``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from scheduler_core.base.errors import InvalidWorkloadError


@dataclass(frozen=True)
class TuningField:
    """One serializable tuning option: its type, default, bounds and meaning."""

    name: str
    type: Any                 # int, float, "int|None", "float|None" or a tuple of allowed strings
    default: Any
    ge: float | None = None   # inclusive lower bound
    gt: float | None = None   # exclusive lower bound
    le: float | None = None   # inclusive upper bound
    doc: str = ""


TUNING_FIELDS: tuple[TuningField, ...] = (
    TuningField("num_measure_trials", int, 64, ge=1, le=100_000, doc="programs measured in all"),
    TuningField("num_measures_per_round", int, 64, ge=1, le=1024,
                doc="programs measured between two cost-model updates (Ansor: 64)"),
    TuningField("early_stopping", "int|None", None, ge=1, le=100_000,
                doc="stop after this many trials without a better program (None: never)"),
    TuningField("seed", int, 0, ge=0, le=2**63 - 1, doc="seed of the search's random generator"),
    TuningField("timeout_s", float, 10.0, gt=0, le=3600, doc="limit of one build and of one run, in seconds"),
    TuningField("min_repeat_ms", float, 40.0, ge=0, le=60_000,
                doc="each timing repeat runs the program for at least this long, in milliseconds"),
    TuningField("repeat", int, 3, ge=1, le=100,
                doc="timing repeats per program; its cost is their median, their spread is kept in the record"),
    TuningField("population", int, 2048, ge=8, le=16384, doc="states per evolution generation (Ansor: 2048)"),
    TuningField("num_iters", int, 4, ge=0, le=64, doc="evolution generations per round (Ansor: 4)"),
    TuningField("measure", ("local", "queue"), "local",
                doc="'local': the search process builds and times; 'queue': measurement workers "
                    "listening on the device's queue (measure:<kind>:<model>) do"),
    TuningField("verbose", int, 1, ge=0, le=2, doc="0 silent, 1 a line per round"),
    TuningField("time_budget_s", "float|None", None, gt=0, le=30 * 86400,
                doc="stop starting new rounds after this many seconds of tuning (None: the trial budget "
                    "alone); the round under way when it runs out is finished"),
)
FIELDS_BY_NAME = {f.name: f for f in TUNING_FIELDS}


def _check(f: TuningField, value: Any) -> Any:
    """``value`` converted to the field's type; InvalidWorkloadError naming the field if it is not one."""
    def fail(why: str) -> InvalidWorkloadError:
        return InvalidWorkloadError(f"tuning option {f.name}={value!r}: {why}", path=f"tuning.{f.name}")

    if isinstance(f.type, tuple):
        if value not in f.type:
            raise fail(f"expected one of {list(f.type)}")
        return value
    if value is None:
        if f.type in ("int|None", "float|None"):
            return None
        raise fail("must not be null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail("expected a number")
    if f.type in (int, "int|None"):
        if not isinstance(value, int):
            raise fail("expected an integer")
    else:
        value = float(value)
        if not math.isfinite(value):
            raise fail("expected a finite number")
    if f.ge is not None and value < f.ge:
        raise fail(f"must be >= {f.ge:g}")
    if f.gt is not None and value <= f.gt:
        raise fail(f"must be > {f.gt:g}")
    if f.le is not None and value > f.le:
        raise fail(f"must be <= {f.le:g}")
    return value


@dataclass(frozen=True)
class TuningOptions:
    """How long and how to tune (Ansor's TuningOptions); fields as in :data:`TUNING_FIELDS`.

    num_measure_trials : int, programs measured in all
    num_measures_per_round : int, batch size between cost-model updates
    early_stopping : int or None, stop after this many trials without improvement
    seed : int, the search's random seed
    timeout_s : float, seconds one build and one run may take
    min_repeat_ms : float, milliseconds each timing repeat lasts at least
    repeat : int, timing repeats per program (the cost is their median; a noisy set is re-measured)
    population, num_iters : the evolutionary search's size (SketchPolicyParams)
    measure : "local" or "queue" (the service's measurement workers)
    verbose : int, 0 silent, 1 a progress line per round
    time_budget_s : float or None, seconds of tuning after which no new round starts (a model's
        TaskScheduler shares it among the tasks; None: only num_measure_trials bounds the search)
    builder, runner : "local" (LocalBuilder/LocalRunner with timeout_s and min_repeat_ms)
        or objects with ``build(inputs)`` / ``run(inputs, build_results)``; not serialized
    measure_callbacks : callables ``cb(policy, inputs, results)`` after every batch,
        e.g. ``[RecordToFile(log)]``; not serialized

    Raises InvalidWorkloadError (a ValueError) naming the field for a value out of range
    or of the wrong type.
    """

    num_measure_trials: int = 64
    num_measures_per_round: int = 64
    early_stopping: int | None = None
    seed: int = 0
    timeout_s: float = 10.0
    min_repeat_ms: float = 40.0
    repeat: int = 3
    population: int = 2048
    num_iters: int = 4
    measure: Literal["local", "queue"] = "local"
    verbose: int = 1
    time_budget_s: float | None = None
    builder: Any = field(default="local", compare=False)
    runner: Any = field(default="local", compare=False)
    measure_callbacks: tuple = field(default=(), compare=False)

    def __post_init__(self):
        for f in TUNING_FIELDS:
            object.__setattr__(self, f.name, _check(f, getattr(self, f.name)))
        object.__setattr__(self, "measure_callbacks", tuple(self.measure_callbacks or ()))

    def to_json(self) -> dict:
        """The serializable fields as a JSON-ready dict (every field, defaults included)."""
        return {f.name: getattr(self, f.name) for f in TUNING_FIELDS}

    @classmethod
    def from_json(cls, obj: dict | None, **library_fields: Any) -> TuningOptions:
        """Options from a dict of serializable fields (missing ones take their defaults).

        ``library_fields``: builder, runner, measure_callbacks.  Raises InvalidWorkloadError
        for an unknown key or a bad value.
        """
        obj = dict(obj or {})
        unknown = sorted(set(obj) - set(FIELDS_BY_NAME))
        if unknown:
            raise InvalidWorkloadError(f"unknown tuning option(s) {unknown}; known: {sorted(FIELDS_BY_NAME)}",
                                       path="tuning")
        return cls(**obj, **library_fields)

