"""cost_model: program features and learned cost models for the search (Ansor section 5.2).

    State --feature.get_per_store_features--> float32 [n_stores, 177]
    (MeasureInput, MeasureResult) --LGBMModel.update--> LightGBM booster
    (task, states) --LGBMModel.predict / RandomModel.predict--> scores, higher = faster

Imports only the compiler layer of ``scheduler_core`` (and lightgbm, lazily).
"""

from .cost_model import CostModel, CostModelError
from .feature import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    get_per_store_features,
    get_per_store_features_from_states,
)
from .lgbm_model import LGBMModel
from .metric import pairwise_accuracy
from .random_model import RandomModel

__all__ = ["CostModel", "CostModelError", "LGBMModel", "RandomModel", "FEATURE_NAMES",
           "FEATURE_VERSION", "N_FEATURES", "get_per_store_features",
           "get_per_store_features_from_states", "pairwise_accuracy"]
