"""AutoTVM-style template tuning with TVM's names (seed 003; TVM's ``tvm.autotvm``).

    from scheduler_core import autotvm

    @autotvm.template("multimedia/rgb_yuv_trans")
    def rgb_yuv_trans(w, h):
        s, (rgb, yuv) = ...
        cfg = autotvm.get_config()
        cfg.define_split("tile_y", yuv.op.axis[1], num_outputs=2)
        yo, yi = cfg["tile_y"].apply(s, yuv, yuv.op.axis[1])
        ...
        return s, [rgb, yuv]

    task = autotvm.task.create("multimedia/rgb_yuv_trans", args=(1920, 1080), target="llvm")
    tuner = autotvm.tuner.RandomTuner(task)
    tuner.tune(n_trial=10, measure_option=autotvm.measure_option(builder="local",
               runner=autotvm.LocalRunner(number=5)), callbacks=[autotvm.callback.log_to_file("rgb2yuv.log")])
    with autotvm.apply_history_best("rgb2yuv.log"):
        with scheduler_core.target.create("llvm"):
            s, args = rgb_yuv_trans(1920, 1080)

Templates record into the auto-scheduler's record files (``autotvm.record``); configs are
measured by its process-isolated builder and runner (``autotvm.measure``).  The package
sits above the search floor (it uses the ProgramMeasurer and the LightGBM cost model).
"""

from . import callback, measure, record, space, task, tuner
from .config import ConfigEntity, ConfigSpace, FallbackConfigEntity, InstantiationError
from .measure import LocalBuilder, LocalRunner, MeasureInput, measure_option
from .record import ApplyHistoryBest, apply_history_best
from .task import ApplyConfig, DispatchContext, Task, get_config, template

__all__ = ["callback", "measure", "record", "space", "task", "tuner", "ConfigEntity", "ConfigSpace",
           "FallbackConfigEntity", "InstantiationError", "LocalBuilder", "LocalRunner", "MeasureInput",
           "measure_option", "ApplyHistoryBest", "apply_history_best", "ApplyConfig", "DispatchContext", "Task",
           "get_config", "template"]
