"""scheduler_core: tensor expressions, ComputeDAG, schedules, lowering and CPU code generation.

The public spelling follows TVM's (``import scheduler_core as sc; from scheduler_core import te``)
so that the seed tutorials run with only their import lines changed.
"""
from . import te, runtime, testing
from .build_module import build
from .compute_dag import ComputeDAG
from .dataflow_step import replay_steps, step_from_record
from .errors import (BuildError, DeviceRuntimeError, InvalidWorkloadError, LoweringError,
                     RuntimeArgumentError, ScheduleError, SchedulerCoreError)
from .loop_state import Iterator, Stage, State
from .lower import lower
from .runtime import context, cpu, cuda, device, load_module, nd
from .schedule import Schedule

__all__ = [
    "te", "runtime", "testing", "build", "lower", "ComputeDAG", "State", "Stage", "Iterator",
    "Schedule", "replay_steps", "step_from_record", "nd", "cpu", "cuda", "device", "context",
    "load_module", "BuildError", "DeviceRuntimeError", "InvalidWorkloadError", "LoweringError",
    "RuntimeArgumentError", "ScheduleError", "SchedulerCoreError",
]
