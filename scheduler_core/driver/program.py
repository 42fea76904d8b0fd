"""One path from a record to a program, for every target: replay, rewrite layouts, lower, check, build.

    (Task, step records) --replay_steps--> State --apply_layout_rewrite (CPU only)--> State
        --backend.lower--> PrimFunc --passes (once), check_bounds--> --backend.build--> Module
                                                                       (named ENTRY_NAME)

The measurement builder and runner, ``SearchTask.apply_best``, the service's best schedule
and its artifacts, and the command line all go through :func:`program_from_steps` (or
:func:`program_from_state` when they already hold the replayed State), so the lowered
program shown to a user is the program in the compiled artifact, and a cuda candidate is
measured as it is shown.  What differs between target kinds is the backend table's
(``backend.py``): CPU programs get the tuned layouts and the passes before codegen, cuda
programs are built from ``lower_state``'s program into the kernel form.  The bounds proof
runs on the program after the passes for both (the passes can add accesses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.target import Target
from scheduler_core.dag.task import Task
from scheduler_core.ir import tir as T
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.layout_rewrite import apply_layout_rewrite, layout_transforms, pre_transform
from scheduler_core.schedule.loop_state import State

from .backend import Backend, backend_of
from .bounds import check_bounds
from .pipeline import run_passes

ENTRY_NAME = "default_function"  # the C symbol of every measured and exported program


@dataclass(frozen=True)
class Program:
    """A schedule made into a program for one target.

    state : State, the schedule with the tuned layouts applied (what is lowered)
    func : PrimFunc, the lowered program the backend builds: after the passes on a CPU (exactly
        what codegen compiles), ``lower_state``'s program for cuda (the build makes the kernel form)
    target : Target
    config : BuildConfig, the codegen options of the build (those current when it was made)
    layout_transforms : tuple of ``schedule.layout_rewrite.LayoutTransform``, for a program made
        with ``pre_transformed=True``: the arguments it takes in their tuned layout (each
        ``packed`` tensor stands where its ``source`` stands in the DAG's argument list)
    """

    state: State
    func: T.PrimFunc
    target: Target
    config: BuildConfig = field(default_factory=BuildConfig.current)
    layout_transforms: tuple = ()
    _module: list = field(default_factory=list, repr=False, compare=False)

    @property
    def backend(self) -> Backend:
        """The backend of :attr:`target` (``backend.BACKENDS``)."""
        return backend_of(self.target)

    @property
    def lowered(self) -> str:
        """The text of the lowered program (as ``print(sc.lower(...))`` shows it; for cuda the
        kernel form the CUDA source is printed from)."""
        return self.backend.lowered_text(self.func, self.build)

    def build(self, device_image: bytes | None = None) -> Any:
        """The compiled Module (a CudaModule for cuda; built on first use, then reused).

        device_image : bytes, a device binary compiled before from this program (the cuda
        runner loads the builder's cubin instead of running nvcc); used by the first build only.
        Raises BuildError.
        """
        if not self._module:
            self._module.append(self.backend.build(self.func, self.target, self.func.name, self.config,
                                                   device_image))
        return self._module[0]


def program_from_state(state: State, target: Any, name: str = ENTRY_NAME,
                       config: BuildConfig | None = None, pre_transformed: bool = False) -> Program:
    """The Program of a replayed State: layout rewrite (where the backend rewrites layouts),
    lowering, the passes, the bounds proof.

    pre_transformed : bool, the program takes its layout-free placeholders already in the tuned
        layout instead of copying them on every call (``Program.layout_transforms`` says which
        and how to make them; ``schedule.layout_rewrite``); no effect where the backend does not
        rewrite layouts or the DAG has no layout-free placeholder the rewrite applies to
    Raises ScheduleError / LoweringError when the state cannot be lowered or the lowered
    program has a load or store that is not provably in bounds (:func:`.bounds.check_bounds`),
    InvalidTargetError for a target the parser rejects.
    """
    parsed = Target.parse(target)
    backend = backend_of(parsed)
    args = list(state.dag.tensors)
    transforms: tuple = ()
    if backend.rewrites_layout and pre_transformed:
        rewritten = apply_layout_rewrite(state)
        lowered = pre_transform(rewritten)
        transforms = tuple(layout_transforms(rewritten, lowered))
        swap = {id(lt.source.op): lt.packed for lt in transforms}
        args = [swap.get(id(t.op), t) for t in args]
    else:
        lowered = apply_layout_rewrite(state) if backend.rewrites_layout else state
    func = backend.lower(lowered, args, name)
    check_bounds(run_passes(func))
    return Program(lowered, func, parsed, BuildConfig.resolve(config), transforms)


def program_from_steps(task: Task, steps: list, name: str = ENTRY_NAME,
                       config: BuildConfig | None = None) -> Program:
    """The Program of ``steps`` (step records, as in a record's ``"i"`` part) on ``task``'s DAG.

    Raises ScheduleError when the steps do not replay, LoweringError when the state
    cannot be lowered or is not provably in bounds.
    """
    return program_from_state(replay_steps(task.compute_dag, steps), task.target, name, config)
