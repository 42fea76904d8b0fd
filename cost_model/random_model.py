"""RandomModel: uniform random scores (TVM's ``auto_scheduler.RandomModel``).

Useful as a baseline and for searches that should not depend on measurements.
"""

from __future__ import annotations

import numpy as np

from .cost_model import CostModel


class RandomModel(CostModel):
    """Scores drawn uniformly from [0, 1) by a ``numpy.random.Generator``.

    Parameters
    ----------
    rng : numpy.random.Generator, an int seed, or None (seed 0, so a search stays reproducible)
    """

    def __init__(self, rng: np.random.Generator | int | None = None):
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng or 0)

    def update(self, inputs: list, results: list) -> None:
        """Ignores measurements."""

    def predict(self, task, states: list) -> np.ndarray:
        """float64 [len(states)] uniform in [0, 1)."""
        return self.rng.uniform(0.0, 1.0, len(states))

    def save(self, path) -> None:
        """Nothing to save (the Generator's state is the caller's)."""

    def load(self, path) -> None:
        """Nothing to load."""


__all__ = ["RandomModel"]
