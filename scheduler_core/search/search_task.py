"""Search tasks: what to tune, for which target, with which budget (seed 000's API).

    @sc.register_workload
    def matmul_add(N, L, M, dtype): ... return [A, B, C, out]
    task = sc.SearchTask(func=matmul_add, args=(1024, 1024, 1024, "float32"), target="llvm")
    task.tune(sc.TuningOptions(num_measure_trials=64, measure_callbacks=[sc.RecordToFile(log)]))
    sch, args = task.apply_best(log)
    print(task.print_best(log))

The search layer: it imports the sketch rules and the cost model (docs/architecture.md, "The layer stack").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, SchedulerCoreError
from scheduler_core.base.target import HardwareParams
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.dag.workload_registry import (  # sc.register_workload is this floor's name for it
    WORKLOAD_FUNC_REGISTRY,
    register_workload,  # noqa: F401
)
from scheduler_core.driver.program import Program, program_from_state
from scheduler_core.measure.record_file import load_best_record
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.schedule.schedule_printer import state_to_python

from .search_policy import SketchPolicy
from .tuning_options import TuningOptions


class SearchTask(Task):
    """A Task the search can tune (Ansor's SearchTask): Task's fields plus ``desc``.

    Give either ``func`` (registered or not) and ``args``, or ``compute_dag``.
    ``workload_key`` defaults to the DAG's hash, so the same computation maps to
    the same records however it was built.  ``target`` is parsed once (``task.target``
    is a Target; ``str(task.target)`` its canonical text).
    Raises InvalidWorkloadError for a missing or unknown workload, InvalidTargetError
    for a target the parser rejects.
    """

    desc: str

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
            compute_dag = ComputeDAG(fn(*args))
            desc = desc or getattr(fn, "__name__", "")
        base = Task.create(compute_dag, target, hardware_params, workload_key)
        super().__init__(base.compute_dag, base.workload_key, base.target, base.hardware_params)
        object.__setattr__(self, "desc", desc)

    def __repr__(self) -> str:
        return f"SearchTask({self.desc or self.workload_key}, target={str(self.target)!r})"

    # -- the seed-000 workflow ---------------------------------------------------
    def tune(self, tuning_options: TuningOptions, search_policy: SketchPolicy | None = None):
        """Run the search; records go to ``tuning_options.measure_callbacks``.

        Without a ``search_policy``, a SketchPolicy with an LGBMModel and the options'
        population, generations and seed.  Returns the best State found (None if none).
        """
        if search_policy is None:
            search_policy = SketchPolicy.from_options(self, tuning_options)
        return search_policy.tune(tuning_options)

    def _best_record(self, log_file: str):
        # task=self: TVM records of this computation (registered function, or key shapes) count too
        rec = load_best_record(log_file, self.workload_key, self.target,
                               dags={self.workload_key: self.compute_dag}, task=self)
        if rec is None:
            raise SchedulerCoreError(f"no valid record of {self.workload_key} for {self.target} in {log_file}")
        return rec

    def best_program(self, log_file: str) -> Program:
        """The Program of the best record in ``log_file`` (driver.program: layout rewrite, lowering).

        Raises SchedulerCoreError when the file holds no successful record of this task.
        """
        return program_from_state(self._best_record(log_file)[0].state, self.target)

    def best_state(self, log_file: str):
        """The best measured State of this task in ``log_file`` (layout rewrite applied)."""
        return self.best_program(log_file).state

    def apply_best(self, log_file: str, include_compatible: bool = False, layout_rewrite_option=None):
        """``(schedule, args)`` of the best record in ``log_file``, ready for ``sc.build``."""
        return Schedule(self.best_state(log_file)), list(self.compute_dag.tensors)

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The best schedule as Python schedule code (seed 000's 'Equivalent python schedule')."""
        if print_mode != "schedule":
            raise SchedulerCoreError(f"print_mode {print_mode!r}: only 'schedule' on CPU targets")
        return state_to_python(self._best_record(log_file)[0].state)
