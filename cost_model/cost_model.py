"""The cost-model contract shared by every model (Ansor's ``CostModel``).

    search policy --predict(task, states)--> scores (higher = faster)
    measurer      --update(inputs, results)--> retrained model
    record file   --update_from_file(path)--> retrained model (resume)
"""

from __future__ import annotations

import numpy as np

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.measure.record_file import load_records


class CostModelError(SchedulerCoreError, ValueError):
    """A cost model was misused or given a file it cannot read (wrong format or feature version)."""


class CostModel:
    """Base class: ``update``, ``predict``, ``save``, ``load`` (TVM's auto_scheduler.CostModel)."""

    def update(self, inputs: list, results: list) -> None:
        """Learn from measurements: ``inputs`` (MeasureInput) and ``results`` (MeasureResult), same length."""
        raise NotImplementedError

    def predict(self, task, states: list) -> np.ndarray:
        """One float64 score per state of ``task``; higher means faster."""
        raise NotImplementedError

    def update_from_file(self, path) -> None:
        """Train from a record file written by ``RecordToFile`` (resume, Ansor's pre-training)."""
        pairs = load_records(path)
        self.update([inp for inp, _ in pairs], [res for _, res in pairs])

    def save(self, path) -> None:
        raise NotImplementedError

    def load(self, path) -> None:
        raise NotImplementedError


__all__ = ["CostModel", "CostModelError"]
