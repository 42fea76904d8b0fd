"""scheduler_core: tensor expressions, ComputeDAG, schedules, lowering, CPU codegen."""
from . import te
from .compute_dag import ComputeDAG
from .errors import (BuildError, InvalidWorkloadError, LoweringError, RuntimeArgumentError,
                     ScheduleError, SchedulerCoreError)
