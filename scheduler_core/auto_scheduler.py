"""``tvm.auto_scheduler``: the auto-scheduler's names where a TVM user looks for them.

    import scheduler_core as tvm
    from scheduler_core import te, auto_scheduler

    @auto_scheduler.register_workload
    def matmul_add(N, L, M, dtype): ...
    task = tvm.auto_scheduler.SearchTask(func=matmul_add, args=(N, L, M, "float32"), target="llvm")
    task.tune(auto_scheduler.TuningOptions(num_measure_trials=10,
                                           measure_callbacks=[auto_scheduler.RecordToFile(log)]))
    cost_model = auto_scheduler.XGBModel()          # LightGBM here (LGBMModel), same role
    cost_model.update_from_file(log)

Every name is the object defined in its own floor (the search, the cost model, the records, the
whole-model tasks); this module only gathers them, as TVM's ``python/tvm/auto_scheduler/__init__.py``
does.  ``XGBModel`` is :class:`cost_model.LGBMModel`: the learned cost model of Ansor (Zheng et
al., OSDI 2020) with LightGBM in place of XGBoost.  ``measure_record`` is the record-file module
(``load_records``, ``load_best_record``, ``RecordReader``, ``RecordToFile``, ``distill``).
"""

from __future__ import annotations

from cost_model import LGBMModel, RandomModel
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.graph.dispatch import ApplyHistoryBest
from scheduler_core.graph.tasks import extract_tasks
from scheduler_core.measure import record_file as measure_record
from scheduler_core.measure.data import BuildResult, MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.measure.record_file import RecordReader, RecordToFile, load_best_record, load_records
from scheduler_core.schedule.loop_state import State
from scheduler_core.search.program_measurer import ProgramMeasurer
from scheduler_core.search.search_policy import PreloadMeasuredStates, SketchPolicy
from scheduler_core.search.search_task import SearchTask, register_workload
from scheduler_core.search.task_scheduler import TaskScheduler
from scheduler_core.search.tuning_options import TuningOptions

XGBModel = LGBMModel  # TVM's name for the learned cost model (XGBoost there, LightGBM here)

__all__ = [
    "ComputeDAG", "SearchTask", "register_workload", "TuningOptions", "SketchPolicy", "PreloadMeasuredStates",
    "ProgramMeasurer", "TaskScheduler", "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureResult",
    "BuildResult", "MeasureErrorNo", "RecordToFile", "RecordReader", "load_records", "load_best_record",
    "measure_record", "XGBModel", "LGBMModel", "RandomModel", "State", "extract_tasks", "ApplyHistoryBest",
]
