"""One path from a record to a program: replay the steps, rewrite layouts, lower, build.

    (Task, step records) --replay_steps--> State --apply_layout_rewrite--> State
        --lower (passes once)--> PrimFunc --build--> Module (named ENTRY_NAME)

The measurement builder, ``SearchTask.apply_best``, the service's best schedule and its
artifacts, and the command line all go through :func:`program_from_steps` (or
:func:`program_from_state` when they already hold the replayed State), so the lowered
program shown to a user is the program in the compiled artifact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler_core.base.target import Target
from scheduler_core.dag.task import Task
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.runtime.cuda_module import CudaModule
from scheduler_core.runtime.module import Module
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.layout_rewrite import apply_layout_rewrite
from scheduler_core.schedule.loop_state import State

from .bounds import check_bounds
from .build_module import build, lower

ENTRY_NAME = "default_function"  # the C symbol of every measured and exported program


@dataclass(frozen=True)
class Program:
    """A schedule made into a program for one target.

    state : State, the schedule with the tuned layouts applied (what is lowered)
    func : PrimFunc, the lowered program after the passes: exactly what :meth:`build` compiles
        (for cuda: the program of ``lower_state``, which the build turns into the kernel form)
    target : Target
    """

    state: State
    func: T.PrimFunc
    target: Target
    _module: list = field(default_factory=list, repr=False, compare=False)

    @property
    def lowered(self) -> str:
        """The text of the lowered program (as ``print(sc.lower(...))`` shows it; for cuda the
        kernel form the CUDA source is printed from)."""
        module = self.build() if self.target.kind == "cuda" else None
        return module.lowered if isinstance(module, CudaModule) else str(self.func)

    def build(self) -> Module | CudaModule:
        """The compiled Module (a CudaModule for cuda; built on first use, then reused).  Raises BuildError."""
        if not self._module:
            self._module.append(build(self.func, target=self.target, name=self.func.name))
        return self._module[0]


def program_from_state(state: State, target: Any, name: str = ENTRY_NAME) -> Program:
    """The Program of a replayed State: layout rewrite, then lowering with the passes.

    Raises ScheduleError / LoweringError when the state cannot be lowered or the lowered
    program has a load or store that is not provably in bounds (:func:`.bounds.check_bounds`),
    InvalidTargetError for a target the parser rejects.
    """
    parsed = Target.parse(target)
    if parsed.kind == "cuda":  # no layout rewrite on GPUs (as TVM); the kernel form is built from lower_state's program
        func = lower_state(state, list(state.dag.tensors), name)
        check_bounds(func)
        return Program(state, func, parsed)
    rewritten = apply_layout_rewrite(state)
    func = lower(rewritten, list(state.dag.tensors), name=name)
    check_bounds(func)
    return Program(rewritten, func, parsed)


def program_from_steps(task: Task, steps: list, name: str = ENTRY_NAME) -> Program:
    """The Program of ``steps`` (step records, as in a record's ``"i"`` part) on ``task``'s DAG.

    Raises ScheduleError when the steps do not replay, LoweringError when the state
    cannot be lowered.
    """
    return program_from_state(replay_steps(task.compute_dag, steps), task.target, name)
