"""TaskScheduler: share one trial budget among the tasks of a model (seed 002).

Strategies (Ansor, section 6): ``"round-robin"`` and ``"gradient"``, which
gives the next round of measurements to the task whose estimated gradient of
the weighted end-to-end latency is the most negative:

    grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
    backward_i = (best_i[now] - best_i[now - window]) / window   (recent improvement per round)
    forward_i  = -best_i / rounds_i                               (the optimistic guess)

with eps-greedy random picks (probability ``eps``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cost_model import LGBMModel
from scheduler_core.measure.data import FAILED_COST_S

from .program_measurer import ProgramMeasurer
from .search_policy import PreloadMeasuredStates, SketchPolicy


class TaskScheduler:
    """Tune several SearchTasks under one budget.

    tasks : list of SearchTask; task_weights : how often each task runs in the
    model (latency weight), default 1; strategy : "gradient" or "round-robin".
    """

    def __init__(self, tasks: Sequence, task_weights: Sequence[float] | None = None,
                 strategy: str = "gradient", alpha: float = 0.2, backward_window_size: int = 3,
                 eps: float = 0.05, seed: int = 0, load_log_file: str | None = None):
        if strategy not in ("gradient", "round-robin"):
            raise ValueError(f"unknown strategy {strategy!r}")
        self.tasks = list(tasks)
        self.weights = np.asarray(task_weights if task_weights is not None else [1.0] * len(self.tasks), float)
        self.strategy = strategy
        self.alpha = alpha
        self.window = backward_window_size
        self.eps = eps
        self.rng = np.random.default_rng(seed)
        self.load_log_file = load_log_file
        self.best_costs = np.full(len(self.tasks), FAILED_COST_S)
        self.history: list = [[] for _ in self.tasks]
        self.rounds = np.zeros(len(self.tasks), int)

    def _pick(self) -> int:
        n = len(self.tasks)
        unstarted = [i for i in range(n) if self.rounds[i] == 0]
        if unstarted:
            return unstarted[0]
        if self.strategy == "round-robin":
            return int(np.argmin(self.rounds))
        if self.rng.random() < self.eps:
            return int(self.rng.integers(n))
        grads = []
        for i in range(n):
            h = self.history[i]
            back = (h[-1] - h[-1 - self.window]) / self.window if len(h) > self.window else 0.0
            fwd = -self.best_costs[i] / max(self.rounds[i], 1)
            grads.append(self.weights[i] * (self.alpha * back + (1 - self.alpha) * fwd))
        return int(np.argmin(grads))

    def tune(self, tuning_options, search_policy: str = "default", cost_model_factory=None) -> list:
        """Spend ``tuning_options.num_measure_trials`` over the tasks; returns the best states."""
        if cost_model_factory is None:
            cost_model_factory = LGBMModel
        callbacks = [PreloadMeasuredStates(self.load_log_file)] if self.load_log_file else []
        policies = [SketchPolicy(t, cost_model_factory(), seed=tuning_options.seed + k,
                                 verbose=tuning_options.verbose, init_search_callbacks=callbacks)
                    for k, t in enumerate(self.tasks)]
        measurer = ProgramMeasurer.from_options(tuning_options)
        per_round = tuning_options.num_measures_per_round
        left = tuning_options.num_measure_trials
        while left > 0:
            i = self._pick()
            n = min(per_round, left)
            policies[i].search(n, None, n, measurer)
            cost = measurer.best_cost.get(self.tasks[i].workload_key, FAILED_COST_S)
            self.best_costs[i] = min(self.best_costs[i], cost)
            self.history[i].append(self.best_costs[i])
            self.rounds[i] += 1
            left -= n
        return [measurer.best_state.get(t.workload_key) for t in self.tasks]
