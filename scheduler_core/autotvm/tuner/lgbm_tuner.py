"""LGBMTuner: model-based tuning on LightGBM (the design of TVM's XGBTuner / ModelBasedTuner).

    first plan_size trials: random configs
    every plan_size trials: train a LightGBM cost model on the measured configs,
        rank the unmeasured configs by it (all of them when the space is small enough,
        else simulated annealing over knob indices), plan the top plan_size;
    next_batch: the next planned config, or with probability eps a random unmeasured one

Two feature kinds (``feature_type``):

- ``"knob"``: each config as numbers: log2 of every split length (the outer one included),
  the position of each reordered axis, the code of each annotation, a knob's value (its
  index when not a number).  Cheap, so every config of a space of up to ``exhaustive_limit``
  is ranked.  The model is ``cost_model.lgbm_train``'s pairwise-rank trainer (``loss_type="rank"``)
  or its squared-error pack-sum regression (``"reg"``) on one row per config.
- ``"program"``: the project's cost model (``cost_model.LGBMModel``) on the per-store program
  features of the State each config makes (Ansor's features).  Each candidate is instantiated
  and lowered, so it ranks a pool of ``pool_size`` unmeasured configs (all of them when fewer)
  drawn at random plus one-knob neighbours of the best measured ones.

``benchmarks/autotvm_tuners.py`` compares the two kinds as rankers: on 641 measured configs of a
512^3 matmul template (4-fold cross-validation, pairwise accuracy) program features scored 0.871
and knob features 0.830 (669 configs of a second run: 0.906 and 0.862), so ``"program"`` is
the default.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from cost_model.lgbm_model import LGBMModel
from cost_model.lgbm_train import train_pack_rank, train_pack_sum
from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.measure.data import MeasureErrorNo

from ..space import ANNOTATIONS, AnnotateSpace, OtherOptionSpace, ReorderSpace, SplitSpace
from .tuner import Tuner

FEATURE_TYPES = ("knob", "program")
# LightGBM parameters over lgbm_train's: a template's tuner trains on a few dozen configs, so
# bins and leaves may hold single rows (LightGBM's defaults refuse to split fewer than ~10 rows).
SMALL_DATA_PARAMS = {"min_data_in_bin": 1, "min_data_in_leaf": 2}
LOSS_TYPES = ("rank", "reg")
OPTIMIZERS = ("auto", "exhaustive", "sa")


def knob_table(space: Any) -> np.ndarray:
    """float32 [len(space), F]: the knob features of each entity of one knob's space."""
    rows = []
    for ent in space.entities:
        if isinstance(space, SplitSpace):
            inner = ent.size[1:]
            outer = math.ceil(space.product / max(1, math.prod(inner)))
            rows.append([math.log2(outer)] + [math.log2(max(1, f)) for f in inner])
        elif isinstance(space, ReorderSpace):
            rows.append([float(ent.perm.index(k)) for k in range(len(ent.perm))])
        elif isinstance(space, AnnotateSpace):
            rows.append([float(ANNOTATIONS.index(a)) for a in ent.anns])
        elif isinstance(space, OtherOptionSpace):
            v = ent.val
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
            rows.append([float(v) if numeric else float(space.entities.index(ent))])
        else:
            rows.append([float(len(rows))])
    return np.asarray(rows, np.float32)


class KnobFeatures:
    """Vectorized knob features of config indices: ``features(indices) -> float32 [n, F]``."""

    def __init__(self, config_space: Any):
        self.dims = np.asarray(config_space.dims, np.int64)
        self.strides = np.concatenate([[1], np.cumprod(self.dims)[:-1]]).astype(np.int64)
        self.tables = [knob_table(s) for s in config_space.space_map.values()]

    def digits(self, indices: np.ndarray) -> np.ndarray:
        return (np.asarray(indices, np.int64)[:, None] // self.strides[None, :]) % self.dims[None, :]

    def features(self, indices: Any) -> np.ndarray:
        d = self.digits(np.asarray(indices, np.int64))
        return np.concatenate([t[d[:, j]] for j, t in enumerate(self.tables)], axis=1)


class LGBMTuner(Tuner):
    """Model-based tuner on LightGBM (TVM's XGBTuner with LightGBM; ``XGBTuner`` is an alias).

    plan_size: configs planned per retrain (and random configs before the first); feature_type:
    "program" (default) or "knob" (module docstring); loss_type: "rank" (pairwise) or "reg"; optimizer:
    "exhaustive" (rank every config), "sa" (simulated annealing) or "auto" (exhaustive up to
    ``exhaustive_limit`` configs); eps: probability of a random config instead of the plan;
    pool_size: candidates ranked per retrain with program features; diversity: weight of each
    knob value a planned config adds to the plan (0: plain top ranks; :meth:`diverse_pick`; 0.2
    reached the random tuner's best sooner in ``benchmarks/autotvm_tuners.py``);
    num_threads: LightGBM threads; seed: seeds every draw.  Raises ValueError for an unknown option.

    plan_size defaults to 4 (TVM's XGBTuner plans 64): replayed over every config of two measured
    spaces, 20 seeds each (``benchmarks/autotvm_replay.py``), retraining every 4 trials reached the
    random tuner's final best in at most half the trials more often than every 8 (512^3 matmul,
    2940 configs, 64 trials: 15/20 seeds against 13/20; seed 003, 32 configs: 18/20 against 17/20).
    """

    def __init__(self, task: Any, plan_size: int = 4, feature_type: str = "program", loss_type: str = "rank",
                 optimizer: str = "auto", eps: float = 0.05, num_threads: int = 1, seed: int | None = 0,
                 pool_size: int = 256, exhaustive_limit: int = 200_000, sa_iters: int = 200,
                 sa_parallel: int = 128, diversity: float = 0.2):
        super().__init__(task)
        if feature_type not in FEATURE_TYPES or loss_type not in LOSS_TYPES or optimizer not in OPTIMIZERS:
            raise ValueError(f"LGBMTuner: feature_type in {FEATURE_TYPES}, loss_type in {LOSS_TYPES}, optimizer in "
                             f"{OPTIMIZERS}; got {feature_type!r}, {loss_type!r}, {optimizer!r}")
        if int(plan_size) < 1 or not 0.0 <= float(eps) <= 1.0:
            raise ValueError(f"LGBMTuner: plan_size >= 1 and 0 <= eps <= 1, got {plan_size}, {eps}")
        self.plan_size, self.feature_type, self.loss_type = int(plan_size), feature_type, loss_type
        self.eps, self.num_threads, self.seed = float(eps), int(num_threads), 0 if seed is None else int(seed)
        self.pool_size, self.sa_iters, self.sa_parallel = int(pool_size), int(sa_iters), int(sa_parallel)
        self.diversity = float(diversity)
        self.n = len(self.space)
        self.optimizer = ("exhaustive" if self.n <= exhaustive_limit else "sa") if optimizer == "auto" else optimizer
        self.rng = np.random.default_rng(self.seed)
        self.knobs = KnobFeatures(self.space)
        self.proposed: set = set()
        self.xs: list = []          # measured indices
        self.ys: list = []          # their FLOP/s (0 for errors)
        self.plan: list = []
        self.plan_pt = 0
        self.train_ct = 0
        self.booster: Any = None
        self.model = LGBMModel(seed=self.seed, num_warmup_sample=0, num_threads=self.num_threads, pretrained=None,
                               lgbm_params=SMALL_DATA_PARAMS) if feature_type == "program" else None
        self._states: dict = {}    # index -> State (program features)

    # -- proposing ---------------------------------------------------------------
    def has_next(self) -> bool:
        return len(self.proposed) < self.n

    def _random_unproposed(self) -> int:
        if self.n - len(self.proposed) < 64 and self.n <= 1 << 20:
            left = [k for k in range(self.n) if k not in self.proposed]
            return int(left[int(self.rng.integers(len(left)))])
        while True:
            k = int(self.rng.integers(self.n))
            if k not in self.proposed:
                return k

    def next_batch(self, batch_size: int) -> list:
        out: list = []
        while len(out) < batch_size and self.has_next():
            index = None
            while self.plan_pt < len(self.plan) and index is None:
                cand = self.plan[self.plan_pt]
                self.plan_pt += 1
                if cand not in self.proposed:
                    index = cand
            if index is None or self.rng.random() < self.eps:
                if index is not None:
                    self.plan_pt -= 1  # keep the planned config for later
                index = self._random_unproposed()
            self.proposed.add(index)
            out.append(self.space.get(index))
        return out

    # -- learning ------------------------------------------------------------------
    def update(self, inputs: list, results: list) -> None:
        core_in, core_res = [], []
        for inp, res in zip(inputs, results):
            ok = res.error_no == MeasureErrorNo.NO_ERROR and res.cost
            self.xs.append(inp.config.index)
            self.ys.append(inp.task.flop / res.cost if ok else 0.0)
            if inp.core is not None:
                core_in.append(inp.core)
                core_res.append(res)
        if self.model is not None and core_in:
            self.model.update(core_in, core_res)
        if len(self.xs) >= self.plan_size * (self.train_ct + 1) and max(self.ys) > 0 and self.has_next():
            if self.fit():
                self.plan, self.plan_pt = self.find_maximums(self.plan_size), 0
                self.train_ct += 1

    def fit(self) -> bool:
        """Retrain the knob model on every measured config; False when LightGBM had nothing to learn."""
        if self.model is not None:
            return self.model.booster is not None
        y = np.asarray(self.ys, np.float64)
        y = y / y.max()
        feats = [row[None, :] for row in self.knobs.features(self.xs)]
        if self.loss_type == "rank":
            booster = train_pack_rank(feats, y, np.zeros(len(y), np.int64), num_rounds=100,
                                      num_threads=self.num_threads, seed=self.seed, params=SMALL_DATA_PARAMS)
        else:
            booster = train_pack_sum(feats, y, num_rounds=100, num_threads=self.num_threads, seed=self.seed,
                                     params=SMALL_DATA_PARAMS)
        if booster is None:
            return False
        self.booster = booster
        return True

    def predict(self, indices: Any) -> np.ndarray:
        """Model scores (higher = faster) of config indices; -inf where a config does not instantiate."""
        indices = np.asarray(indices, np.int64)
        if self.model is None:
            # one row per config: the pack-sum score is the row's raw output (lgbm_train.predict_pack_sum)
            return np.asarray(self.booster.predict(self.knobs.features(indices), raw_score=True), np.float64)
        states, ok = [], []
        for k, index in enumerate(indices):
            state = self._state(int(index))
            if state is not None:
                states.append(state)
                ok.append(k)
        scores = np.full(len(indices), -np.inf)
        if states:
            scores[ok] = self.model.predict(self.task.core_task, states)
        return scores

    def _state(self, index: int):
        if index not in self._states:
            try:
                s, _ = self.task.instantiate(self.space.get(index))
                self._states[index] = s.state
            except (SchedulerCoreError, ArithmeticError, ValueError, IndexError, KeyError, TypeError):
                self._states[index] = None  # the template rejects it: ranked last
        return self._states[index]

    def find_maximums(self, num: int) -> list:
        """The ``num`` best-ranked unproposed config indices, best first (with ``diversity`` > 0:
        picked from the ``4 * num`` best by :meth:`diverse_pick`)."""
        want = 4 * num if self.diversity > 0 else num
        if self.model is not None or self.optimizer == "exhaustive":
            if self.model is not None:
                pool = self._program_pool()
            else:
                pool = np.asarray([k for k in range(self.n) if k not in self.proposed], np.int64)
            scores = self.predict(pool)
            best = [int(pool[k]) for k in np.argsort(-scores, kind="stable")[:want]]
        else:
            best = self._anneal(want)
        return self.diverse_pick(best, num) if self.diversity > 0 else best[:num]

    def diverse_pick(self, ranked: list, num: int) -> list:
        """Greedy submodular pick (TVM's ``submodular_pick``): each step takes the candidate with the
        highest rank score (1 for the best of ``ranked`` down to 0) plus ``diversity`` per knob whose
        value no pick has yet."""
        digits = [self.space.point2knob(k) for k in ranked]
        seen: list = [set() for _ in self.space.dims]
        left = list(range(len(ranked)))
        out: list = []
        while left and len(out) < num:
            def gain(x: int) -> float:
                new = sum(1 for j, v in enumerate(digits[x]) if v not in seen[j])
                return 1.0 - x / len(ranked) + self.diversity * new
            pick = max(left, key=gain)
            left.remove(pick)
            out.append(ranked[pick])
            for j, v in enumerate(digits[pick]):
                seen[j].add(v)
        return out

    def _neighbours(self, index: int, count: int) -> list:
        digits = self.space.point2knob(index)
        out: list = []
        for _ in range(count):
            d = list(digits)
            j = int(self.rng.integers(len(d)))
            d[j] = int(self.rng.integers(self.space.dims[j]))
            out.append(self.space.knob2point(d))
        return out

    def _program_pool(self) -> np.ndarray:
        left = self.n - len(self.proposed)
        if left <= self.pool_size:
            return np.asarray([k for k in range(self.n) if k not in self.proposed], np.int64)
        pool: set = set()
        best = [self.xs[k] for k in np.argsort(-np.asarray(self.ys))[:8]]
        for b in best:
            pool.update(k for k in self._neighbours(b, self.pool_size // 16) if k not in self.proposed)
        while len(pool) < self.pool_size:
            pool.add(self._random_unproposed())
        return np.asarray(sorted(pool), np.int64)

    def _anneal(self, num: int) -> list:
        """Simulated annealing over knob indices (TVM's SimulatedAnnealingOptimizer)."""
        points = np.asarray([self._random_unproposed() for _ in range(min(self.sa_parallel, self.n))], np.int64)
        scores = self.predict(points)
        heap: list = []
        seen: set = set()

        def push(ps, ss):
            for p, s in zip(ps, ss):
                p = int(p)
                if p in self.proposed or p in seen:
                    continue
                seen.add(p)
                if len(heap) < num:
                    heapq.heappush(heap, (float(s), p))
                elif s > heap[0][0]:
                    heapq.heapreplace(heap, (float(s), p))

        push(points, scores)
        for it in range(self.sa_iters):
            temp = 1.0 - it / self.sa_iters
            new = np.asarray([self._neighbours(int(p), 1)[0] for p in points], np.int64)
            new_scores = self.predict(new)
            accept = np.exp(np.minimum((new_scores - scores) / (temp + 1e-5), 0.0)) > self.rng.random(len(points))
            points = np.where(accept, new, points)
            scores = np.where(accept, new_scores, scores)
            push(new, new_scores)
        return [p for _, p in sorted(heap, reverse=True)]


XGBTuner = LGBMTuner

__all__ = ["LGBMTuner", "XGBTuner", "KnobFeatures", "knob_table"]
