"""Tuners that walk config indices (TVM's ``autotvm/tuner/index_based_tuner.py``).

GridSearchTuner measures indices 0, 1, 2, ... in order; RandomTuner draws indices uniformly
without replacement.  Both accept ``range_idx=(lo, hi)`` (inclusive) to tune part of a space.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tuner import Tuner


class IndexBaseTuner(Tuner):
    """A tuner over the indices ``range_idx[0] .. range_idx[1]`` (inclusive; default the whole space).

    Raises ValueError for a range outside the space.
    """

    def __init__(self, task: Any, range_idx: tuple | None = None):
        super().__init__(task)
        n = len(self.space)
        lo, hi = (0, n - 1) if range_idx is None else (int(range_idx[0]), int(range_idx[1]))
        if not 0 <= lo <= hi < n:
            raise ValueError(f"range_idx must satisfy 0 <= lo <= hi < {n} (the space's length), got {range_idx!r}")
        self.range_idx = (lo, hi)
        self.range_length = hi - lo + 1
        self.counter = 0

    def has_next(self) -> bool:
        return self.counter < self.range_length


class GridSearchTuner(IndexBaseTuner):
    """Measure the configs in index order (TVM's GridSearchTuner)."""

    def next_batch(self, batch_size: int) -> list:
        out: list = []
        while len(out) < batch_size and self.has_next():
            index = self.range_idx[0] + self.counter
            self.counter += 1
            if index not in self.visited:
                out.append(self.space.get(index))
        return out


class RandomTuner(IndexBaseTuner):
    """Measure configs in a uniformly random order, each at most once (TVM's RandomTuner).

    seed: seeds the order (None: a fresh one each run).  Spaces up to 2^22 configs are
    permuted up front; larger ones are sampled with rejection of drawn indices.
    """

    PERMUTE_LIMIT = 1 << 22

    def __init__(self, task: Any, range_idx: tuple | None = None, seed: int | None = None):
        super().__init__(task, range_idx)
        self.rng = np.random.default_rng(seed)
        self.order = (self.rng.permutation(self.range_length) if self.range_length <= self.PERMUTE_LIMIT else None)
        self.drawn: set = set()

    def _draw(self) -> int:
        if self.order is not None:
            return int(self.order[self.counter])
        while True:
            k = int(self.rng.integers(self.range_length))
            if k not in self.drawn:
                self.drawn.add(k)
                return k

    def next_batch(self, batch_size: int) -> list:
        out: list = []
        while len(out) < batch_size and self.has_next():
            index = self.range_idx[0] + self._draw()
            self.counter += 1
            if index not in self.visited:
                out.append(self.space.get(index))
        return out


__all__ = ["IndexBaseTuner", "GridSearchTuner", "RandomTuner"]
