"""The tuner loop shared by every tuner (TVM's ``autotvm/tuner/tuner.py``).

    while trials < n_trial and the space is not exhausted:
        configs = next_batch(batch)            # the tuner's choice, never a measured index
        results = measure(configs)             # build + run in worker processes
        log "No: k GFLOPS: cur/best result: MeasureResult(...) config"  (logger "autotvm", DEBUG)
        update(configs, results); callbacks(tuner, inputs, results)
        stop early when the best is ``early_stopping`` trials old

GFLOP/s are ``task.flop / median cost`` (TVM divides by the mean of the repeats; the median
is what the rest of this project ranks programs by).  A config index is measured at most
once per tuner: the loop drops any index a tuner proposes again.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from scheduler_core.measure.data import MeasureErrorNo

from ..measure import MeasureBatch, MeasureInput, result_text

logger = logging.getLogger("autotvm")


class Tuner:
    """Base class: subclasses give ``has_next``, ``next_batch(batch_size)`` and ``update``.

    Attributes after :meth:`tune`: best_config (ConfigEntity or None), best_flops (FLOP/s, 0
    when nothing succeeded), best_measure_pair ``(MeasureInput, MeasureResult)``, best_iter
    (0-based trial of the best), visited (measured indices), trials (list of
    ``(index, flops)`` in measurement order).
    """

    def __init__(self, task: Any, **kwargs):
        self.task = task
        self.space = task.config_space
        self.best_config: Any = None
        self.best_flops = 0.0
        self.best_measure_pair: Any = None
        self.best_iter = 0
        self.visited: set = set()
        self.trials: list = []
        self.ttl: int | None = None
        self.n_trial = 0

    # -- what subclasses define ------------------------------------------------------
    def has_next(self) -> bool:
        """Whether an unmeasured config is left to propose."""
        return len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list:
        """Up to ``batch_size`` ConfigEntities not measured yet."""
        raise NotImplementedError

    def update(self, inputs: list, results: list) -> None:
        """Learn from a measured batch (the base class keeps nothing more)."""

    # -- the loop ------------------------------------------------------------------------
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks: Any = (), si_prefix: str = "G") -> None:
        """Measure up to ``n_trial`` configs (fewer when the space runs out or ``early_stopping``
        trials pass without a new best); ``callbacks`` are called as ``cb(tuner, inputs, results)``.

        Raises BuildError for a cuda task where no GPU is attached; ValueError for n_trial < 1.
        """
        if int(n_trial) < 1:
            raise ValueError(f"n_trial must be >= 1, got {n_trial}")
        scale = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[si_prefix]
        self.n_trial = int(n_trial)
        stop_after = int(early_stopping) if early_stopping else 10 ** 9
        with MeasureBatch(self.task, measure_option) as measure:
            batch = max(1, int(measure.n_parallel))
            i = error_ct = 0
            while i < self.n_trial and self.has_next():
                configs: list = []
                for cfg in self.next_batch(min(batch, self.n_trial - i)):
                    if cfg.index not in self.visited and all(c.index != cfg.index for c in configs):
                        configs.append(cfg)
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, cfg) for cfg in configs]
                results = measure(inputs)
                for k, (inp, res) in enumerate(zip(inputs, results)):
                    self.visited.add(inp.config.index)
                    ok = res.error_no == MeasureErrorNo.NO_ERROR and res.cost
                    flops = self.task.flop / res.cost if ok else 0.0
                    error_ct = 0 if ok else error_ct + 1
                    if flops > self.best_flops:
                        self.best_flops, self.best_config = flops, inp.config
                        self.best_measure_pair, self.best_iter = (inp, res), i + k
                    self.trials.append((inp.config.index, flops))
                    logger.debug("No: %d GFLOPS: %.2f/%.2f result: %s %s", i + k + 1, flops / scale,
                                 self.best_flops / scale, result_text(res), inp.config)
                i += len(results)
                self.ttl = min(stop_after + self.best_iter, self.n_trial) - i
                self.update(inputs, results)
                for cb in callbacks:
                    cb(self, inputs, results)
                if i >= self.best_iter + stop_after:
                    logger.debug("Early stopped. Best iter: %d.", self.best_iter)
                    break
                if error_ct > 150:
                    logger.warning("Too many errors happen in the tuning. Switching to debug mode.")
                    logger.setLevel(logging.DEBUG)

    def best_curve(self) -> list:
        """Best FLOP/s after each trial so far."""
        return list(np.maximum.accumulate([f for _, f in self.trials])) if self.trials else []

    def load_history(self, data_set: Any, min_seed_records: int = 500) -> None:
        """Learn from earlier records (model-based tuners only; the base class ignores them)."""


__all__ = ["Tuner"]
