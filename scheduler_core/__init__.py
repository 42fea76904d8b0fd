"""scheduler_core: a template-free auto-scheduler for tensor programs (in the spirit of Ansor).

The public spelling follows TVM's (``import scheduler_core as sc; from scheduler_core import te``)
so that the seed tutorials run with only their import lines changed.  The package is a
stack of floors, each importing only the floors below it (docs/architecture.md):

    search/                           SearchTask, TuningOptions, SketchPolicy, TaskScheduler
      (sketch_rules/, cost_model/)    the wings: rules and the learned model, beside this package
    measure/                          MeasureInput -> BuildResult -> MeasureResult, records
    driver/                           build, lower, one path from a record to a program
    runtime/  codegen/  passes/       Module and arrays; llvmlite code generation; loop passes
    lowering/                         State -> loop program
    schedule/                         State / Stage / Iterator, transform steps, manual schedules
    dag/                              tensors, ComputeDAG, JSON wire format, reference, Task
    ir/                               expressions and the loop program
    base/                             errors, Target, HardwareParams
"""

from scheduler_core import runtime, target, te, testing
from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.errors import (
    BuildError,
    DeviceRuntimeError,
    InvalidWorkloadError,
    LoweringError,
    RecordFormatError,
    RuntimeArgumentError,
    ScheduleError,
    SchedulerCoreError,
)
from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.build_module import build, lower
from scheduler_core.measure.data import (
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
)
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.measure.record_file import RecordReader, RecordToFile, distill, load_best_record, load_records
from scheduler_core.runtime import context, cpu, cuda, device, load_module, nd
from scheduler_core.schedule.dataflow_step import replay_steps, step_from_record
from scheduler_core.schedule.loop_state import Iterator, Stage, State
from scheduler_core.schedule.schedule_api import Schedule

# Names of the search floor and of the cost model, resolved on first use (PEP 562).  This is
# the one deferred import of the package, and it is forced by the layering, not by weight:
# Python runs this file before any submodule of scheduler_core, and the wings (sketch_rules,
# cost_model) import compiler submodules, while the search floor imports the wings.  Importing
# the search floor here eagerly would make ``import sketch_rules`` re-enter a half-initialised
# sketch_rules.  tests/test_layers.py checks that these names point only at the floors above.
LAZY_NAMES = {
    "SearchTask": "scheduler_core.search.search_task",
    "TuningOptions": "scheduler_core.search.tuning_options",
    "register_workload": "scheduler_core.search.search_task",
    "SketchPolicy": "scheduler_core.search.search_policy",
    "SketchPolicyParams": "scheduler_core.search.search_policy",
    "PreloadMeasuredStates": "scheduler_core.search.search_policy",
    "ProgramMeasurer": "scheduler_core.search.program_measurer",
    "TaskScheduler": "scheduler_core.search.task_scheduler",
    "LGBMModel": "cost_model",
    "RandomModel": "cost_model",
    "extract_tasks": "scheduler_core.graph.tasks",
    "ApplyHistoryBest": "scheduler_core.graph.dispatch",
    "build_graph": "scheduler_core.graph.build",
    "register_func": "scheduler_core.graph.ir",
    "IRModule": "scheduler_core.graph.script",
}


# Modules above the search floor, imported on first attribute use (``sc.autotvm``,
# ``sc.auto_scheduler``; TVM's ``tvm.relax`` and ``tvm.meta_schedule`` are the whole-model floor's).
LAZY_MODULES = {
    "autotvm": "scheduler_core.autotvm",
    "frontend": "scheduler_core.frontend",
    "auto_scheduler": "scheduler_core.auto_scheduler",
    "relax": "scheduler_core.graph.relax",
    "meta_schedule": "scheduler_core.graph.meta_schedule",
}


def __getattr__(name: str):
    if name in LAZY_MODULES:
        import importlib  # deferred: see LAZY_NAMES
        return importlib.import_module(LAZY_MODULES[name])
    if name in LAZY_NAMES:
        import importlib  # deferred: see LAZY_NAMES
        return getattr(importlib.import_module(LAZY_NAMES[name]), name)
    raise AttributeError(f"module 'scheduler_core' has no attribute {name!r}")


__all__ = [
    "te", "target", "runtime", "testing", "build", "lower", "ComputeDAG", "Task", "Target", "HardwareParams",
    "BuildConfig", "State", "Stage", "Iterator", "Schedule", "replay_steps", "step_from_record",
    "MeasureInput", "BuildResult", "MeasureResult", "MeasureErrorNo", "LocalBuilder", "LocalRunner",
    "RecordToFile", "RecordReader", "load_records", "load_best_record", "distill",
    "nd", "cpu", "cuda", "device", "context", "load_module",
    "BuildError", "DeviceRuntimeError", "InvalidWorkloadError", "LoweringError",
    "RecordFormatError", "RuntimeArgumentError", "ScheduleError", "SchedulerCoreError",
    *LAZY_NAMES, *LAZY_MODULES,
]
