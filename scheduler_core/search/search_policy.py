"""SketchPolicy: sketches + random annotation + evolutionary search (Ansor, section 4-5).

One round of ``search``:

    sketches (sketch_rules) --sample_init_population--> population
      --evolution: cost_model.predict, roulette selection, mutation rules--> best states
      --eps-greedy pick (never a state measured before)--> measure (ProgramMeasurer)
      --> cost_model.update(inputs, results)

Every stochastic choice draws from one ``numpy.random.Generator`` seeded at
construction, so a search with the same seed and the same measurements is the
same search.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from cost_model import LGBMModel
from cost_model.feature import lowering_flags
from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.measure.data import MeasureInput
from scheduler_core.measure.record_file import load_records
from sketch_rules import (
    SketchPolicyParams,
    default_mutation_rules,
    generate_sketches,
    sample_init_population,
)

from .program_measurer import ProgramMeasurer
from .tuning_options import TuningOptions


def state_key(state) -> str:
    """A state's identity: its step records as compact JSON."""
    return json.dumps([s.to_record() for s in state.transform_steps], separators=(",", ":"))


class PreloadMeasuredStates:
    """Init-search callback: mark the states measured in ``filename`` as measured.

    The policy then never measures them again, and seeds its population with the
    best of them (Ansor's PreloadMeasuredStates).
    """

    def __init__(self, filename: str):
        self.filename = filename

    def __call__(self, policy) -> None:
        # task=: TVM records of this task are read as its own; other TVM records whose DAG is unknown are skipped
        for inp, res in load_records(self.filename, task=policy.task):
            if inp.task.workload_key != policy.task.workload_key:
                continue
            policy.add_measured(inp.state, res.cost)


class SketchPolicy:
    """The search policy of Ansor: sketches, random annotations, evolution, eps-greedy.

    Parameters
    ----------
    task : SearchTask
    program_cost_model : CostModel (``update``, ``predict``)
    params : SketchPolicyParams, Ansor's defaults (population 2048, 4 generations,
        mutation probability 0.85, eps-greedy 0.05)
    seed : int, seeds the policy's numpy Generator
    init_search_callbacks : e.g. ``[PreloadMeasuredStates(log_file)]``

    ``on_phase`` (attribute, default None): called with the phase the search enters: "sketches"
    (once), "initial population", "evolution" (at every generation), then the measurer's
    "building" and "measuring".  An exception it raises stops the search there (the service's
    cancel: workers.jobs).
    """

    def __init__(self, task, program_cost_model, params: SketchPolicyParams | None = None,
                 seed: int | None = 0, verbose: int = 1, init_search_callbacks=None,
                 mutation_rules=None, sketch_rules=None):
        self.task = task
        self.cost_model = program_cost_model
        self.params = params or SketchPolicyParams()
        self.rng = np.random.default_rng(seed)
        self.verbose = verbose
        self.mutation_rules = list(mutation_rules or default_mutation_rules(self))  # GPU weights on cuda
        self.sketch_rules = sketch_rules
        self.measured: dict = {}       # state_key -> cost in seconds (None for errors)
        self.measured_states: dict = {}  # state_key -> State
        self.sketches: list | None = None
        self.time_search_s = 0.0
        self.on_phase: Callable[[str], None] | None = None
        for cb in init_search_callbacks or []:
            cb(self)

    @classmethod
    def from_options(cls, task, options: TuningOptions, cost_model: Any = None, seed_offset: int = 0,
                     init_search_callbacks=None) -> SketchPolicy:
        """The policy of a search run with ``options``: the one place "policy + model + params from
        the options" is assembled (a task's tune, the task scheduler, the service's jobs, meta_schedule).

        cost_model : default ``LGBMModel(seed=options.seed)``; params: SketchPolicyParams with the
        options' ``population`` and ``num_iters`` (Ansor's other defaults); seed ``options.seed +
        seed_offset`` (a task's index in a scheduler, or how many states a resumed job has measured);
        verbose ``options.verbose``.
        """
        params = SketchPolicyParams(population=options.population, num_iters=options.num_iters)
        model = cost_model if cost_model is not None else LGBMModel(seed=options.seed)
        return cls(task, model, params=params, seed=options.seed + int(seed_offset), verbose=options.verbose,
                   init_search_callbacks=init_search_callbacks)

    # -- bookkeeping ---------------------------------------------------------
    def add_measured(self, state, cost: float | None) -> None:
        key = state_key(state)
        self.measured[key] = cost
        self.measured_states[key] = state

    def best_measured(self, n: int) -> list:
        good = [(c, k) for k, c in self.measured.items() if c is not None]
        good.sort()
        return [self.measured_states[k] for _, k in good[:n]]

    def enter_phase(self, phase: str) -> None:
        """Report ``phase`` to ``on_phase`` (when set)."""
        if self.on_phase is not None:
            self.on_phase(phase)

    # -- one round -------------------------------------------------------------
    def _predict(self, states: list) -> np.ndarray:
        if not states:
            return np.zeros(0)
        return np.asarray(self.cost_model.predict(self.task, states), dtype=float)

    def _mutate(self, state):
        weights = np.array([r.weight for r in self.mutation_rules], dtype=float)
        rule = self.mutation_rules[int(self.rng.choice(len(weights), p=weights / weights.sum()))]
        try:
            return rule.apply(self, state, self.rng)
        except (ScheduleError, LoweringError):
            return None

    def evolutionary_search(self, init_population: list, out_size: int) -> list:
        """The ``out_size`` best unmeasured states found by evolution (Ansor's EvolutionarySearch)."""
        p = self.params
        population = list(init_population)
        best: dict = {}
        for gen in range(p.num_iters + 1):
            self.enter_phase("evolution")  # each generation: a caller may stop the search here (a cancel)
            scores = self._predict(population)
            for st, sc in zip(population, scores):
                key = state_key(st)
                if key not in self.measured and np.isfinite(sc):
                    if key not in best or best[key][0] < sc:
                        best[key] = (float(sc), st)
            if gen == p.num_iters or not population:
                break
            w = np.maximum(np.nan_to_num(scores, nan=0.0, neginf=0.0), 0.0) + 1e-9
            probs = w / w.sum()
            nxt = []
            tries = 0
            while len(nxt) < p.population and tries < 4 * p.population:
                tries += 1
                st = population[int(self.rng.choice(len(population), p=probs))]
                if self.rng.random() < p.mutation_prob:
                    new = self._mutate(st)
                    if new is not None:
                        nxt.append(new)
                else:
                    nxt.append(st)
            population = nxt
        ranked = sorted(best.values(), key=lambda x: -x[0])
        return [st for _, st in ranked[:out_size]]

    def sample_initial_population(self, n: int) -> list:
        """Up to ``n`` sampled States of :attr:`sketches` (``sample_init_population``), whose
        lowering check runs on the feature workers and leaves their features in the cache."""
        return sample_init_population(self, self.sketches, n, self.rng,
                                      lowering_check=lambda states: lowering_flags(self.task, states))

    def search_one_round(self, num_random: int) -> tuple[list, list]:
        """Best states by evolution and random states, both unmeasured."""
        p = self.params
        if self.sketches is None:
            self.enter_phase("sketches")
            self.sketches = generate_sketches(self, self.sketch_rules)
            if not self.sketches:
                raise ScheduleError(f"no sketch for {self.task}")
        self.enter_phase("initial population")
        init = self.sample_initial_population(p.population)
        ratio = getattr(p, "sample_init_use_measured_ratio", 0.2)
        n_measured = min(len(self.measured_states), int(ratio * p.population))
        init = init + self.best_measured(n_measured)
        self.enter_phase("evolution")
        best = self.evolutionary_search(init, 2 * num_random + 64)
        fresh = [s for s in init if state_key(s) not in self.measured]
        order = self.rng.permutation(len(fresh))[: 3 * num_random]
        return best, [fresh[i] for i in order]

    def pick_states(self, best: list, random: list, n: int) -> list:
        """Eps-greedy: most from ``best``, ``eps_greedy`` of them random; no repeats."""
        n_good = max(n - int(round(n * self.params.eps_greedy)), 0)
        picked, seen = [], set()
        for pool, limit in ((best, n_good), (random, n), (best, n)):
            for st in pool:
                if len(picked) >= min(limit, n):
                    break
                key = state_key(st)
                if key in seen or key in self.measured:
                    continue
                seen.add(key)
                picked.append(st)
        return picked

    # -- the search loop -------------------------------------------------------
    def search(self, num_measure_trials: int, early_stopping: int | None, num_measures_per_round: int,
               measurer) -> Any:
        """Measure up to ``num_measure_trials`` new states; returns the best State found."""
        ct, best_ct, best_cost = 0, 0, float("inf")
        empty_rounds = 0
        while ct < num_measure_trials:
            n = min(num_measures_per_round, num_measure_trials - ct)
            t0 = time.perf_counter()
            best, random = self.search_one_round(n)
            picked = self.pick_states(best, random, n)
            self.time_search_s += time.perf_counter() - t0
            if not picked:
                empty_rounds += 1
                if empty_rounds > getattr(self.params, "retry_search_one_round_on_empty", 1):
                    break
                continue
            inputs = [MeasureInput(self.task, st) for st in picked]
            results = measurer.measure(self.task, self, inputs)
            for inp, res in zip(inputs, results):
                cost = res.cost
                self.add_measured(inp.state, cost)
                if cost is not None and cost < best_cost:
                    best_cost, best_ct = cost, ct
                ct += 1
            t0 = time.perf_counter()
            self.cost_model.update(inputs, results)
            self.time_search_s += time.perf_counter() - t0
            self._progress(measurer, ct, num_measure_trials, best_cost)
            if early_stopping is not None and ct - best_ct > early_stopping:
                break
        return measurer.best_state.get(self.task.workload_key)

    def _progress(self, measurer, ct: int, total: int, best_cost: float) -> None:
        if self.verbose < 1:
            return
        flop = self.task.compute_dag.flop_ct
        gflops = flop / best_cost / 1e9 if np.isfinite(best_cost) else 0.0
        errs = sum(measurer.error_counts.values())
        best_ms = best_cost * 1e3 if np.isfinite(best_cost) else float("nan")
        print(f"| trials {ct:5d}/{total} | best {gflops:9.2f} GFLOP/s | best {best_ms:9.3f} ms | errors {errs} "
              f"| search {self.time_search_s:.1f}s build {measurer.time_build_s:.1f}s run {measurer.time_run_s:.1f}s |",
              flush=True)

    def tune(self, options: TuningOptions) -> Any:
        """Run ``search`` with a ProgramMeasurer made from TuningOptions."""
        measurer = ProgramMeasurer.from_options(options)
        self.verbose = options.verbose
        self.measurer = measurer
        if options.num_measure_trials == 0:
            return None
        return self.search(options.num_measure_trials, options.early_stopping,
                           options.num_measures_per_round, measurer)
