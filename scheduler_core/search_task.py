"""Search tasks: what to tune, for which target, with which budget (seed 000's API).

    @sc.register_workload
    def matmul_add(N, L, M, dtype): ... return [A, B, C, out]
    task = sc.SearchTask(func=matmul_add, args=(1024, 1024, 1024, "float32"), target="llvm")
    task.tune(sc.TuningOptions(num_measure_trials=64, measure_callbacks=[sc.RecordToFile(log)]))
    sch, args = task.apply_best(log)
    print(task.print_best(log))

The search layer: it imports the sketch rules and the cost model (DESIGN.md, "Layers").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .codegen.target import Target
from .compute_dag import ComputeDAG
from .errors import InvalidWorkloadError, SchedulerCoreError

WORKLOAD_FUNC_REGISTRY: dict = {}


def register_workload(func: Callable | str, f: Callable | None = None, override: bool = False):
    """Register a function returning a workload's tensor list, by its name (a decorator).

    ``register_workload(fn)``, ``@register_workload`` or ``register_workload("name", fn)``.
    Raises InvalidWorkloadError when the name is taken (unless ``override``).
    """
    if isinstance(func, str):
        name = func

        def register(fn):
            if name in WORKLOAD_FUNC_REGISTRY and not override and WORKLOAD_FUNC_REGISTRY[name] is not fn:
                raise InvalidWorkloadError(f"workload {name!r} is already registered")
            WORKLOAD_FUNC_REGISTRY[name] = fn
            return fn
        return register(f) if f is not None else register
    WORKLOAD_FUNC_REGISTRY[func.__name__] = func
    return func


@dataclass(frozen=True)
class HardwareParams:
    """What the search knows of the machine.

    num_cores: cores used by parallel loops; vector_unit_bytes: SIMD register
    width in bytes (32 for AVX2); cache_line_bytes: 64 on x86;
    max_innermost_split_factor: upper bound of the innermost tile length.
    """

    num_cores: int = 0
    vector_unit_bytes: int = 32
    cache_line_bytes: int = 64
    max_innermost_split_factor: int = 64

    @staticmethod
    def for_target(target: Target) -> "HardwareParams":
        cores = target.num_cores or os.cpu_count() or 1
        return HardwareParams(cores, target.vector_unit_bytes, 64, 64)


class SearchTask:
    """A ComputeDAG plus target: the unit the search tunes (Ansor's SearchTask).

    Give either ``func`` (registered or not) and ``args``, or ``compute_dag``.
    ``workload_key`` defaults to the DAG's hash, so the same computation maps to
    the same records however it was built.
    """

    def __init__(self, func: Callable | str | None = None, args: Sequence[Any] = (),
                 compute_dag: ComputeDAG | None = None, workload_key: str | None = None,
                 target: Any = "llvm", hardware_params: HardwareParams | None = None,
                 desc: str = ""):
        if compute_dag is None:
            if func is None:
                raise InvalidWorkloadError("SearchTask needs func= and args=, or compute_dag=")
            fn = WORKLOAD_FUNC_REGISTRY.get(func) if isinstance(func, str) else func
            if fn is None:
                raise InvalidWorkloadError(f"no registered workload named {func!r}")
            tensors = fn(*args)
            compute_dag = ComputeDAG(tensors)
            desc = desc or getattr(fn, "__name__", "")
        self.compute_dag = compute_dag
        self.workload_key = workload_key or compute_dag.workload_key
        self.target_obj = target if isinstance(target, Target) else Target.parse(str(target))
        self.target = self.target_obj.str
        self.hardware_params = hardware_params or HardwareParams.for_target(self.target_obj)
        self.desc = desc

    def __repr__(self) -> str:
        return f"SearchTask({self.desc or self.workload_key}, target={self.target!r})"

    # -- the seed-000 workflow ---------------------------------------------------
    def tune(self, tuning_options: "TuningOptions", search_policy=None):
        """Run the search; records go to ``tuning_options.measure_callbacks``."""
        from .search_policy import SketchPolicy
        if search_policy is None:
            from cost_model import LGBMModel
            search_policy = SketchPolicy(self, LGBMModel(), seed=tuning_options.seed)
        return search_policy.tune(tuning_options)

    def best_state(self, log_file: str):
        """The best measured State of this task in ``log_file`` (layout rewrite applied)."""
        from .layout_rewrite import apply_layout_rewrite
        from .measure_record import load_best_record
        rec = load_best_record(log_file, self.workload_key, self.target,
                               dags={self.workload_key: self.compute_dag})
        if rec is None:
            raise SchedulerCoreError(f"no valid record of {self.workload_key} for {self.target} in {log_file}")
        return apply_layout_rewrite(rec[0].state)

    def apply_best(self, log_file: str, include_compatible: bool = False, layout_rewrite_option=None):
        """``(schedule, args)`` of the best record in ``log_file``, ready for ``sc.build``."""
        from .schedule import Schedule
        return Schedule(self.best_state(log_file)), list(self.compute_dag.tensors)

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The best schedule as Python schedule code (seed 000's 'Equivalent python schedule')."""
        from .measure_record import load_best_record
        from .schedule_printer import state_to_python
        rec = load_best_record(log_file, self.workload_key, self.target,
                               dags={self.workload_key: self.compute_dag})
        if rec is None:
            raise SchedulerCoreError(f"no valid record of {self.workload_key} in {log_file}")
        if print_mode != "schedule":
            raise SchedulerCoreError(f"print_mode {print_mode!r}: only 'schedule' on CPU targets")
        return state_to_python(rec[0].state)


@dataclass
class TuningOptions:
    """How long and how to tune (Ansor's TuningOptions).

    num_measure_trials: total programs measured; num_measures_per_round: batch
    size between cost-model updates; early_stopping: stop after this many
    trials without improvement (None: never); builder/runner: "local" or
    objects with ``build``/``run``; seed: the search's random seed.
    """

    num_measure_trials: int = 0
    early_stopping: int | None = None
    num_measures_per_round: int = 64
    verbose: int = 1
    builder: Any = "local"
    runner: Any = "local"
    measure_callbacks: list = field(default_factory=list)
    seed: int = 0

    def __post_init__(self):
        if self.num_measure_trials < 0:
            raise InvalidWorkloadError("num_measure_trials must be >= 0")
        if self.num_measures_per_round < 1:
            raise InvalidWorkloadError("num_measures_per_round must be >= 1")
