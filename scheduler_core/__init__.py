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

# The search layer imports sketch_rules and cost_model, which import the compiler layer
# above; it is loaded on first use so that importing scheduler_core stays light.
_SEARCH_LAYER = {
    "SearchTask": "search_task", "TuningOptions": "search_task", "HardwareParams": "search_task",
    "register_workload": "search_task", "SketchPolicy": "search_policy",
    "PreloadMeasuredStates": "search_policy", "TaskScheduler": "task_scheduler",
    "ProgramMeasurer": "program_measurer",
    "MeasureInput": "measure", "MeasureResult": "measure", "BuildResult": "measure",
    "MeasureErrorNo": "measure", "LocalBuilder": "measure", "LocalRunner": "measure",
    "RecordToFile": "measure_record", "RecordReader": "measure_record",
    "load_records": "measure_record", "load_best_record": "measure_record", "distill": "measure_record",
    "RecordFormatError": "errors",
}
_MODEL_NAMES = {"LGBMModel", "RandomModel"}


def __getattr__(name):
    import importlib
    if name in _SEARCH_LAYER:
        return getattr(importlib.import_module(f".{_SEARCH_LAYER[name]}", __name__), name)
    if name in _MODEL_NAMES:  # the cost model lives beside scheduler_core (seed 000 uses sc.XGBModel)
        return getattr(importlib.import_module("cost_model"), name)
    raise AttributeError(f"module 'scheduler_core' has no attribute {name!r}")


__all__ = [
    "te", "runtime", "testing", "build", "lower", "ComputeDAG", "State", "Stage", "Iterator",
    "Schedule", "replay_steps", "step_from_record", "nd", "cpu", "cuda", "device", "context",
    "load_module", "BuildError", "DeviceRuntimeError", "InvalidWorkloadError", "LoweringError",
    "RuntimeArgumentError", "ScheduleError", "SchedulerCoreError",
]
