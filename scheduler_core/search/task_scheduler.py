"""TaskScheduler: share one trial budget among the tasks of a model (seed 002).

Strategies (Ansor, section 6): ``"round-robin"`` and ``"gradient"``, which
gives the next round of measurements to the task whose estimated gradient of
the weighted end-to-end latency is the most negative:

    grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
    backward_i = (best_i[now] - best_i[now - window]) / window   (recent improvement per round)
    forward_i  = -best_i / rounds_i                               (the optimistic guess)

with eps-greedy random picks (probability ``eps``).  With ``verbose`` a per-task table
(TVM's: ID, description, latency, speed, trials, weight) and the estimated total weighted
latency are printed after every round.

Every task first gets one warm-up round, in order (TVM's task scheduler does the same).  With
a time budget, the warm-up rounds shrink to fit: once a first round has been timed, each
warm-up round gets at most its share of :data:`WARMUP_SHARE` of the budget, by scaling its
evolutionary population and its trials (:func:`warmup_scale`), so that a model of 32 tasks
does not spend a 20-minute budget on its first 17 tasks and leave the rest on their default
schedules.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from cost_model import LGBMModel
from scheduler_core.measure.data import FAILED_COST_S

from .program_measurer import ProgramMeasurer
from .search_policy import PreloadMeasuredStates, SketchPolicy

WARMUP_SHARE = 0.5           # of a time budget, for the warm-up rounds of all tasks together
MIN_WARMUP_POPULATION = 64   # the smallest evolutionary population a shrunk warm-up round gets
MIN_WARMUP_TRIALS = 2        # the fewest programs a shrunk warm-up round measures


def warmup_scale(budget_s: float | None, elapsed_s: float, unstarted: int, full_round_s: float | None) -> float:
    """The size (0..1] of the next warm-up round relative to a full one, under a time budget.

    budget_s : the tuning budget in seconds (None: no budget, always 1.0)
    elapsed_s : seconds spent so far; unstarted : tasks still without a round (this one included)
    full_round_s : the estimated seconds of a full-size warm-up round (None before the first)
    The warm-up of the ``unstarted`` tasks shares what is left of ``WARMUP_SHARE * budget_s``;
    a round whose full size would take longer than its share is scaled down to it.
    """
    if budget_s is None or full_round_s is None or full_round_s <= 0 or unstarted <= 0:
        return 1.0
    share = max(0.0, WARMUP_SHARE * budget_s - elapsed_s) / unstarted
    return float(min(1.0, max(share / full_round_s, 1e-3)))


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
        self.history: list = [[] for _ in self.tasks]   # best cost (s) of each task after each of its rounds
        self.rounds = np.zeros(len(self.tasks), int)
        self.task_cts = np.zeros(len(self.tasks), int)  # trials measured per task
        self.best_states: list = [None for _ in self.tasks]
        self.search_policies: list = []  # one SketchPolicy per task, set by tune (TVM's name)

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

    def tune(self, tuning_options, search_policy: str = "default", cost_model_factory=None,
             on_phase=None, init_search_callbacks=None) -> list:
        """Spend ``tuning_options.num_measure_trials`` over the tasks; returns the best State per task.

        Each task gets ``SketchPolicy.from_options`` with the options' seed + the task's index.  All
        of them share one cost model, as Ansor's task scheduler shares its XGBModel: an
        ``LGBMModel(seed=options.seed)`` by default, or ``cost_model_factory()`` called once per task
        (return the same object to share it, a new one per call for a model per task), so a task
        that has measured a few programs is ranked by what every task measured (the labels are
        normalized per task, ``LGBMModel``).  One ProgramMeasurer made from
        the options measures every batch, so each of its ``measure_callbacks`` (e.g. RecordToFile)
        receives every record of every task.  ``on_phase``: given to every policy
        (``SketchPolicy.on_phase``), so a caller sees the phases.  ``init_search_callbacks``: run on
        every policy after ``load_log_file``'s PreloadMeasuredStates.  A scheduler of one task is its
        policy: one ``search`` over the whole budget, with the options' early stopping (with a
        ``time_budget_s``, round by round instead).

        A round measures at most ``num_measure_trials // len(tasks)`` programs (TVM's rule), so a
        small budget still reaches every task.  With ``tuning_options.time_budget_s`` no round
        starts once that many seconds have passed, and the warm-up rounds shrink so that every
        task gets one within about half the budget (:func:`warmup_scale`); a task still not
        reached when the budget ends keeps no program.
        """
        callbacks = [PreloadMeasuredStates(self.load_log_file)] if self.load_log_file else []
        callbacks += list(init_search_callbacks or [])
        if cost_model_factory is None:
            shared = LGBMModel(seed=tuning_options.seed)
            cost_model_factory = lambda: shared  # noqa: E731
        policies = [SketchPolicy.from_options(t, tuning_options, cost_model_factory(),
                                              seed_offset=k, init_search_callbacks=callbacks)
                    for k, t in enumerate(self.tasks)]
        for policy in policies:
            policy.on_phase = on_phase
        self.search_policies = policies
        measurer = ProgramMeasurer.from_options(tuning_options)
        left = tuning_options.num_measure_trials
        # TVM's TaskScheduler: a round is at most trials / tasks, so every task gets its warm-up
        # round even when the budget is smaller than one full round per task
        per_round = max(1, min(tuning_options.num_measures_per_round, left // max(len(self.tasks), 1)))
        budget = tuning_options.time_budget_s
        t0 = time.perf_counter()
        if len(self.tasks) == 1 and left > 0 and budget is None:
            policies[0].search(left, tuning_options.early_stopping, per_round, measurer)
            self._account(0, measurer, measurer.ct)
            left = 0
        full_round_s: list = []  # warm-up rounds' seconds divided by their scale
        while left > 0 and (budget is None or time.perf_counter() - t0 < budget):
            i = self._pick()
            n = min(per_round, left)
            policy, params = policies[i], policies[i].params
            scale = 1.0
            if self.rounds[i] == 0:  # warm-up: shrink to fit the budget (see the module docstring)
                scale = warmup_scale(budget, time.perf_counter() - t0, int((self.rounds == 0).sum()),
                                     float(np.mean(full_round_s)) if full_round_s else None)
                if scale < 1.0:
                    n = min(n, max(MIN_WARMUP_TRIALS, round(n * scale)))
                    policy.params = replace(params, population=max(MIN_WARMUP_POPULATION,
                                                                   round(params.population * scale)))
            before, started = measurer.ct, time.perf_counter()
            try:
                policy.search(n, None, n, measurer)
            finally:
                policy.params = params
            if self.rounds[i] == 0:
                full_round_s.append((time.perf_counter() - started) / scale)
            self._account(i, measurer, measurer.ct - before)
            left -= n
            if tuning_options.verbose >= 1:
                print(self.progress_table(time.perf_counter() - t0, next_id=self._pick_preview()), flush=True)
        self.best_states = [measurer.best_state.get(t.workload_key) for t in self.tasks]
        return list(self.best_states)

    def _account(self, i: int, measurer: ProgramMeasurer, n_measured: int) -> None:
        """After a round of task ``i``: its best cost, history, rounds and trials."""
        cost = measurer.best_cost.get(self.tasks[i].workload_key, FAILED_COST_S)
        self.best_costs[i] = min(self.best_costs[i], cost)
        self.history[i].append(self.best_costs[i])
        self.rounds[i] += 1
        self.task_cts[i] += n_measured

    def _pick_preview(self) -> int:
        state = self.rng.bit_generator.state
        try:
            return self._pick()
        finally:
            self.rng.bit_generator.state = state

    def total_latency(self) -> float:
        """The weighted sum of the tasks' best latencies, in seconds (inf while a task has none)."""
        costs = np.where(self.best_costs < FAILED_COST_S, self.best_costs, np.inf)
        return float(np.sum(self.weights * costs))

    def progress_table(self, elapsed_s: float = 0.0, next_id: int | None = None) -> str:
        """TVM's task-scheduler table: ID, description, latency (ms), GFLOP/s, trials, weight;
        then the estimated total weighted latency.  A task with no valid program shows "-"."""
        rule = "-" * 100
        lines = [rule, f"| {'ID':>3} | {'Task description':<40} | {'Latency (ms)':>12} | "
                       f"{'Speed (GFLOP/s)':>15} | {'Trials':>6} | {'Weight':>6} |", rule]
        for i, t in enumerate(self.tasks):
            cost = self.best_costs[i]
            ok = cost < FAILED_COST_S
            lat = f"{cost * 1e3:12.4f}" if ok else f"{'-':>12}"
            speed = f"{t.compute_dag.flop_ct / cost / 1e9:15.2f}" if ok else f"{'-':>15}"
            desc = (getattr(t, "desc", "") or t.workload_key)[:40]
            lines.append(f"| {i:3d} | {desc:<40} | {lat} | {speed} | {int(self.task_cts[i]):6d} | "
                         f"{self.weights[i]:6g} |")
        lines.append(rule)
        total = self.total_latency()
        total_text = f"{total * 1e3:.4f} ms" if np.isfinite(total) else "- (a task has no valid program yet)"
        nxt = "" if next_id is None else f"\tNext ID: {next_id}"
        lines.append(f"Estimated total latency: {total_text}\tTrials: {int(self.task_cts.sum())}"
                     f"\tUsed time: {elapsed_s:.0f} s{nxt}")
        return "\n".join(lines)
