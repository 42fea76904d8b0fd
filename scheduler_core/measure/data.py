"""Measurement of schedules on real hardware: inputs, results and error codes.

    MeasureInput(task, state) --LocalBuilder--> BuildResult(filename of a .so, args)
                              --LocalRunner---> MeasureResult(costs_s, error_no, ...)

This module holds the data that flows through measurement; the two stages live in
``local_builder`` (:class:`LocalBuilder`) and ``local_runner`` (:class:`LocalRunner`,
:func:`check_against_reference`).  Names, fields
and the error codes follow TVM's ``auto_scheduler/measure.py`` (Ansor, OSDI 2020,
section 6: "measurer").

A failed measurement has ``costs == (FAILED_COST_S,)`` = (1e10,) seconds, Ansor's
convention (its ``MAX_FLOAT``), so that sorting by cost puts failures last and
every record still has a cost; ``error_no`` says what went wrong.

Only plain values cross into the worker processes: the task's DAG as JSON text,
the target as a string and the state as its list of step records
(:func:`input_payload`); a worker rebuilds the state with ``ComputeDAG.from_json``
and ``replay_steps``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core.dag.task import Task
from scheduler_core.schedule.loop_state import State

FAILED_COST_S = 1e10  # the cost, in seconds, of a failed measurement (Ansor's MAX_FLOAT)


class MeasureErrorNo(enum.IntEnum):
    """Why a measurement failed (TVM's ``MeasureErrorNO``); 0 means it did not."""

    NO_ERROR = 0             # measured fine
    INSTANTIATION_ERROR = 1  # the steps do not replay/lower (ScheduleError, LoweringError), or shapes are symbolic
    COMPILE_HOST = 2         # code generation or linking failed (BuildError, or anything else in the builder)
    COMPILE_DEVICE = 3       # device (CUDA) compilation failed
    RUNTIME_DEVICE = 4       # the program crashed, returned nonzero, or could not be loaded
    WRONG_ANSWER = 5         # the program's outputs differ from the reference evaluator's
    BUILD_TIMEOUT = 6        # the build took longer than the builder's timeout_s
    RUN_TIMEOUT = 7          # the run took longer than the runner's timeout_s
    UNKNOWN_ERROR = 8        # anything else (e.g. the reference evaluator itself failed)


@dataclass(frozen=True)
class MeasureInput:
    """One schedule to measure.

    task: the Task (ComputeDAG, workload_key, Target, HardwareParams); a SearchTask is one.
    state: the State to build; only its ``transform_steps`` are sent to the builder.
    """

    task: Task
    state: State


@dataclass(frozen=True)
class BuildResult:
    """The outcome of building one MeasureInput.

    filename: path of the shared library (``""`` when the build failed).
    args: the function's argument tensors in call order (the DAG's ``tensors``).
    error_no: a MeasureErrorNo value; error_msg: what failed (``""`` if nothing).
    time_cost: seconds the build took (wall clock, in the worker).
    """

    filename: str
    args: tuple
    error_no: int
    error_msg: str
    time_cost: float


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of running one built program.

    costs: seconds per run, one entry per repeat (``(FAILED_COST_S,)`` on failure); the
        search ranks programs by their median (:attr:`cost`), and their :attr:`spread` tells
        how far the repeats disagreed.
    error_no: a MeasureErrorNo value; error_msg: what failed (``""`` if nothing).
    all_cost: wall seconds of build plus run.  timestamp: ``time.time()`` when the
    measurement finished (seconds since the epoch).
    """

    costs: tuple
    error_no: int
    error_msg: str
    all_cost: float
    timestamp: float

    @property
    def mean_cost(self) -> float:
        """Mean of ``costs`` in seconds (FAILED_COST_S when there are none)."""
        return sum(self.costs) / len(self.costs) if self.costs else FAILED_COST_S

    @property
    def median_cost(self) -> float:
        """Median of ``costs`` in seconds (FAILED_COST_S when there are none)."""
        return median_of(self.costs)

    @property
    def spread(self) -> float:
        """``(max - min) / median`` of ``costs`` (0.0 for fewer than two); a unitless ratio."""
        return spread_of(self.costs)

    @property
    def cost(self) -> float | None:
        """Median of ``costs`` in seconds for a successful measurement; None for an error.

        The median, not TVM's mean: one repeat disturbed by another process moves the
        mean but not the median of three."""
        if self.error_no != MeasureErrorNo.NO_ERROR or not self.costs:
            return None
        return self.median_cost

    def to_json(self) -> dict[str, Any]:
        """The one wire form of a result (measurement queue replies, runner worker replies):
        ``{"costs": [seconds...], "error_no": int, "error_msg": str, "all_cost": seconds,
        "timestamp": seconds since the epoch}``; plain JSON values, never a pickle.
        (Record lines keep TVM's ``"r"`` list instead: ``scheduler_core.measure.record``.)"""
        return {"costs": [float(c) for c in self.costs], "error_no": int(self.error_no), "error_msg": self.error_msg,
                "all_cost": float(self.all_cost), "timestamp": float(self.timestamp)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MeasureResult:
        """The inverse of :meth:`to_json`; empty ``costs`` become ``(FAILED_COST_S,)``.
        Raises KeyError for a missing field, ValueError / TypeError for a wrong value."""
        costs = tuple(float(c) for c in obj["costs"]) or (FAILED_COST_S,)
        return cls(costs, int(MeasureErrorNo(int(obj["error_no"]))), str(obj["error_msg"]),
                   float(obj["all_cost"]), float(obj["timestamp"]))


def median_of(costs) -> float:
    """Median of a sequence of seconds (FAILED_COST_S when empty)."""
    xs = sorted(float(c) for c in costs)
    if not xs:
        return FAILED_COST_S
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def spread_of(costs) -> float:
    """``(max - min) / median`` of a sequence of seconds; 0.0 for fewer than two or a zero median."""
    xs = [float(c) for c in costs]
    if len(xs) < 2:
        return 0.0
    med = median_of(xs)
    return (max(xs) - min(xs)) / med if med > 0 else 0.0


# ---------------------------------------------------------------------------
# plain-value forms of an input (what crosses process boundaries and records)
# ---------------------------------------------------------------------------

def step_records(state: Any) -> list:
    """The state's transform steps as JSON-ready records (``[["SP", 2, 0, 64, [8], 1], ...]``)."""
    return [list(s.to_record()) for s in state.transform_steps]


def input_payload(inp: MeasureInput) -> tuple:
    """``(workload_key, dag_json_text, target_str, step_records)`` of ``inp``: plain values only."""
    task = inp.task
    return (str(task.workload_key), task.compute_dag.to_json(), str(task.target), step_records(inp.state))


def failed_result(error_no: int, error_msg: str, all_cost: float, timestamp: float) -> MeasureResult:
    """A MeasureResult for a failed measurement: ``costs == (FAILED_COST_S,)``."""
    return MeasureResult((FAILED_COST_S,), int(error_no), error_msg, float(all_cost), float(timestamp))


__all__ = ["MeasureErrorNo", "MeasureInput", "BuildResult", "MeasureResult", "FAILED_COST_S",
           "input_payload", "step_records", "failed_result"]
