"""AutoTVM tuners (TVM's ``autotvm.tuner``): grid, random, genetic and model-based (LightGBM)."""

from .ga_tuner import GATuner
from .index_based import GridSearchTuner, IndexBaseTuner, RandomTuner
from .lgbm_tuner import LGBMTuner, XGBTuner
from .tuner import Tuner

__all__ = ["Tuner", "IndexBaseTuner", "GridSearchTuner", "RandomTuner", "GATuner", "LGBMTuner", "XGBTuner"]
