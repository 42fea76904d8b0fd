"""LGBMModel: a LightGBM cost model trained on measured programs (Ansor section 5.2).

    update(inputs, results) --features (feature.py, cached)--> per-state rows
        --normalized throughput y = best cost of the task / cost (errors: 0)-->
        --objective "pack_rank" (default): pairwise logistic loss on pack-sum scores;
          "pack_sum": Ansor's weighted squared error; "rank": lambdarank on state vectors;
          "auto": cross-validate pack-sum and rank, keep the better, retrain it on all-->
        Booster
    predict(task, states) --features--> Booster --> scores (higher = faster)

This is TVM's ``XGBModel`` (python/tvm/auto_scheduler/cost_model/xgb_model.py)
with LightGBM in place of XGBoost: the same normalized-throughput labels, the
same pack-sum form (a program's score is the sum of its stores' scores), the
same warm-up (random scores until ``num_warmup_sample`` measurements) and the
same retraining throttle (retrain once the data grew by a fifth).  Any batch
may be added, even one or two measurements or only failures: training waits
until LightGBM has something to split on, and the previous model (or the
random warm-up scores) stays meanwhile (see ``update``).

The default objective is a rank loss, as in TenSet and TLP: the search only needs
the order of programs, and regressing on ``best / cost`` spends the model on the
scale of the throughput, which is dominated by the best few programs and by
measurement noise.  It trains LightGBM's extremely randomized trees on the 177
feature columns (TVM's 164 and 13 more, ``feature.py``), a choice made by
cross-validation on the training parts of the record files only.

Held-out pairwise accuracy (``benchmarks/model_accuracy.py``: train on the first two
thirds of a file's successful measurements in order, score the last third), previous
default (pack-rank, TVM's 164 columns, no extra trees) -> this default, on 160-trial
searches of seed 1 run back to back on the busy 2-core development machine:

    W1 matmul+bias 1024^3, random-search records        0.725 -> 0.732
    W1 matmul+bias 1024^3, model-guided records         0.690 -> 0.723
    W2 conv2d 1x64x56x56 3x3 + bias + ReLU, random      0.824 -> 0.855
    W2 conv2d, model-guided records                     0.518 -> 0.538

Over all eleven W1/W2 files at hand (older runs included): 0.680 -> 0.681 in order,
0.750 -> 0.762 over five random 2/3 splits, 0.744 -> 0.764 in 4-fold cross-validation
of the training parts; pack-sum (Ansor's loss) scored 0.638 in order and lambdarank
over state vectors 0.629.  The timings are the limit: held-out programs measured again
minutes later ordered themselves like their recorded costs in only 0.73 (W2
model-guided), 0.86 (W1 model-guided), 0.93 and 0.95 (random) of the pairs, and a
parallel program's time can double while another process holds the second core.  On
held-out pairs more than 1.5x apart the default scores 0.77, 0.87, 0.92 and 0.81.

Failed measurements (``error_no != 0``) stay in the training set with throughput 0:
pack-sum regresses them to 0 with a small weight, pack-rank ranks them below every
successful program of their task (two failures make no pair).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .cost_model import CostModel, CostModelError
from .feature import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    get_per_store_features_from_states,
    is_invalid,
)
from .lgbm_train import predict_pack_rank, predict_pack_sum, predict_rank, train_pack_rank, train_pack_sum, train_rank
from .metric import pairwise_accuracy

MODEL_FORMAT = "autosched-lgbm-v1"
OBJECTIVES = ("auto", "pack_sum", "rank", "pack_rank")
# what "auto" compares, the first one preferred on ties.  Pack-rank is not among them: it is
# the default objective on its own, and "auto" keeps its earlier meaning (pack-sum or rank).
CANDIDATES = ("pack_sum", "rank")
MIN_SELECTION_STATES = 32  # "auto" compares the objectives only with at least this many states
RANK_MARGIN = 0.02         # another objective replaces the first candidate only when it wins by this much
CV_FOLDS = 4               # the selection's cross-validation folds
CV_MAX_STATES = 400        # above this many states the selection uses one held-out fold


PRETRAINED_FILE = Path(__file__).resolve().parent / "pretrained" / "llvm.json"  # CPU tasks


def preload_lightgbm() -> None:
    """Import LightGBM now (about 0.6 s): a process that forks one child per job (an RQ worker
    and its work-horses) pays it once instead of in every child.  Importing starts no thread."""
    import lightgbm  # noqa: F401


def _is_cpu_task(task) -> bool:
    target = getattr(task, "target", None)
    return not bool(getattr(target, "is_gpu", False))


def _cost_s(res) -> float:
    """Mean seconds of a successful result, inf for a failed one (or a zero timing)."""
    c = res.cost
    return c if c is not None and c > 0 else math.inf


def _task_key(task) -> tuple:
    return (task.workload_key, str(task.target))


def normalized_throughput(costs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
    """Per task, ``best cost / cost`` in [0, 1]: the best program has 1, failures (inf) 0."""
    costs = np.asarray(costs, np.float64)
    y = np.zeros(len(costs))
    for t in np.unique(task_ids):
        m = task_ids == t
        ok = m & np.isfinite(costs)
        if ok.any():
            y[ok] = costs[ok].min() / costs[ok]
    return y


class LGBMModel(CostModel):
    """LightGBM cost model: pairwise rank loss on pack-sum scores with extremely randomized trees
    (default), Ansor's pack-sum regression, or lambdarank.

    Parameters
    ----------
    objective : "pack_rank" | "pack_sum" | "rank" | "auto"; "auto" keeps whichever of
        pack-sum and rank ranks held-out states better in cross-validation
    num_warmup_sample : int, predictions stay random until this many states were measured
        (Ansor's default is 100; 16 here, since a model trained on a few dozen states already
        ranks far better than chance); ``load`` sets it to -1 so a loaded model is used at once
    seed : int or None (0), seeds the warm-up scores, the held-out split and LightGBM
    model_file : path or None, loaded at construction (if it exists) and saved after each retrain
    num_threads : int, LightGBM threads.  1 by default: on the busy 2-core machine
        OpenMP's busy-waiting made 2 threads 40x slower (28 s against 0.65 s for 200 states)
    num_rounds : int, boosting rounds per retrain
    rank_agg : "mean" | "sum" | "mean_max", how the rank objective folds a state's rows
    lgbm_params : dict or None, LightGBM parameters over ``lgbm_train.BASE_PARAMS``
        (e.g. ``lgbm_train.LEGACY_PARAMS`` for the hyperparameters used before; pack-rank puts
        ``lgbm_train.PACK_RANK_PARAMS`` in between)
    n_columns : int or None, train and predict on the first ``n_columns`` feature columns only
        (``feature.N_ANSOR_FEATURES``: TVM's 164, the feature set before the extra and
        whole-program columns); None: all ``N_FEATURES``
    pretrained : "auto" | path | None.  A model trained on other workloads' records
        (transfer learning, as TenSet and TLP do for TVM; ``benchmarks/pretrain_cost_model.py``
        writes the one shipped in ``cost_model/pretrained/llvm.json``).  For CPU tasks it
        ranks states from the first round, before this model has measurements of its own,
        and each retrain continues from its trees (``lgbm_train.train_pack_rank``'s
        ``init_model``), so the task keeps learning from its own records.  "auto" (default):
        the shipped file when it exists and matches this build's features, else none; a
        path that cannot be used raises CostModelError at the first CPU task; None: off
        (Ansor's random warm-up).  Used with the pack-rank objective on all columns only.
    """

    def __init__(self, objective: str = "pack_rank", num_warmup_sample: int = 16, seed: int | None = None,
                 model_file=None, num_threads: int = 1, num_rounds: int = 200, rank_agg: str = "mean",
                 lgbm_params: dict | None = None, n_columns: int | None = None, pretrained="auto"):
        if objective not in OBJECTIVES:
            raise CostModelError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.objective = objective
        self.num_warmup_sample = num_warmup_sample
        self.seed = 0 if seed is None else int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.model_file = model_file
        self.num_threads = num_threads
        self.num_rounds = num_rounds
        self.rank_agg = rank_agg
        self.lgbm_params = dict(lgbm_params or {})
        if n_columns is not None and not 0 < int(n_columns) <= len(FEATURE_NAMES):
            raise CostModelError(f"n_columns must be in 1..{len(FEATURE_NAMES)}, got {n_columns!r}")
        self.n_columns = None if n_columns is None else int(n_columns)
        # training data, one entry per measured state
        self.features: list = []     # float32 [n_stores, N_FEATURES] each
        self.costs: list = []        # mean seconds, inf for failures
        self.task_ids: list = []     # index into self._tasks
        self._tasks: dict = {}       # (workload_key, target) -> task id
        self.last_train_length = 0
        self.booster = None
        self.kind: str | None = None   # "pack_sum" or "rank" once trained
        self.selection: dict = {}      # the last held-out comparison (see _select)
        self._n_at_selection = 0
        self.pretrained = pretrained
        self._base: tuple | None = None  # (kind, Booster) of the pretrained model once read
        self._all_cpu = True  # every task measured so far is a CPU task (the base applies)
        if model_file and os.path.isfile(model_file):
            self.load(model_file)

    # -- queries -------------------------------------------------------------
    def predict(self, task, states: list) -> np.ndarray:
        """float64 [len(states)], higher = faster; ``-inf`` for states that fail to lower.

        Before training (or with fewer than ``num_warmup_sample`` measurements)
        the scores are uniform random from the model's seeded Generator, as in
        Ansor; unlike Ansor no features are extracted then (lowering costs a few
        milliseconds per state), so failing states are only found by measurement.
        """
        own = self.booster is not None and len(self.features) >= self.num_warmup_sample
        base = None if own else self.base_model(task)
        if not own and base is None:
            return self.rng.uniform(0.0, 1.0, len(states))
        feats = get_per_store_features_from_states(task, states)
        if own:
            scores = self._predict_features(self._columns(feats))
        else:
            scores = self._predict_with(base[0], base[1], feats)
        for k, f in enumerate(feats):
            if is_invalid(f):
                scores[k] = -math.inf
        return scores

    def base_model(self, task) -> tuple | None:
        """``(kind, Booster)`` of the pretrained model this model starts from for ``task``, or
        None (``pretrained`` off, a GPU task, no shipped file, other features or columns).

        Raises CostModelError when ``pretrained`` names a file that is not a usable model.
        """
        if self.pretrained is None or self.pretrained is False or not _is_cpu_task(task):
            return None
        if self.n_columns is not None or self.objective != "pack_rank":
            return None
        if self._base is None:
            auto = self.pretrained == "auto"
            path = PRETRAINED_FILE if auto else Path(self.pretrained)
            if auto and not path.is_file():
                self._base = (None, None)
            else:
                probe = LGBMModel(pretrained=None)
                try:
                    probe.load(path)
                    if probe.booster is None or probe.n_columns is not None or probe.kind != "pack_rank":
                        raise CostModelError(f"{path} is not a trained pack-rank model on all "
                                             f"{len(FEATURE_NAMES)} feature columns")
                except CostModelError:
                    if not auto:
                        raise
                    probe.booster = None  # a shipped file of other features: start without it
                self._base = (probe.kind, probe.booster) if probe.booster is not None else (None, None)
        return None if self._base[1] is None else self._base

    def _predict_features(self, feats: list) -> np.ndarray:
        return self._predict_with(self.kind, self.booster, feats)

    def _predict_with(self, kind, booster, feats: list) -> np.ndarray:
        if kind == "rank":
            return predict_rank(booster, feats, self.rank_agg)
        if kind == "pack_rank":
            return predict_pack_rank(booster, feats)
        return predict_pack_sum(booster, feats)

    def score(self, inputs: list, results: list) -> float:
        """Pairwise accuracy of this model's predictions on measurements (within each task).

        Call it before ``update`` with a new batch to get the held-out figure.
        """
        groups: dict = {}
        for k, inp in enumerate(inputs):
            groups.setdefault(_task_key(inp.task), []).append(k)
        preds = np.zeros(len(inputs))
        gid = np.zeros(len(inputs), np.int64)
        for g, idx in enumerate(groups.values()):
            task = inputs[idx[0]].task
            preds[idx] = self.predict(task, [inputs[k].state for k in idx])
            gid[idx] = g
        costs = np.array([_cost_s(r) for r in results])
        return pairwise_accuracy(preds, costs, gid)

    # -- training --------------------------------------------------------------
    def update(self, inputs: list, results: list) -> None:
        """Add measurements and retrain (once the data grew by a fifth since the last retrain).

        inputs: MeasureInput list (``.task`` with ``.workload_key``/``.target``, ``.state``);
        results: MeasureResult list of the same length (``.costs`` seconds, ``.error_no``).
        Raises CostModelError only when the two lengths differ.

        Any batch is accepted, however small: one or two measurements, or a batch in
        which every measurement failed.  The measurements are always kept; a retrain
        happens only once there is something to learn from, i.e. at least two
        successful states (normalized throughput > 0) and at least one feature that
        LightGBM can split on (``lgbm_train.splittable_dataset``: it refuses to train on
        a handful of rows, which it bins into a single bin, or on features that are all
        alike).  Until then the previous booster is kept: before the first successful
        training ``predict`` gives seeded random scores (Ansor's warm-up behaviour),
        afterwards the last trained model's.  A skipped retrain is retried at the next
        update (the retraining throttle counts only real retrains).
        """
        if len(inputs) != len(results):
            raise CostModelError(f"{len(inputs)} inputs but {len(results)} results")
        if not inputs:
            return
        by_task: dict = {}
        for k, inp in enumerate(inputs):
            by_task.setdefault(_task_key(inp.task), []).append(k)
        feats: list = [None] * len(inputs)
        for idx in by_task.values():
            fs = get_per_store_features_from_states(inputs[idx[0]].task, [inputs[k].state for k in idx])
            for k, f in zip(idx, fs):
                feats[k] = f
        for idx in by_task.values():
            task = inputs[idx[0]].task
            self._all_cpu = self._all_cpu and _is_cpu_task(task)
            self.base_model(task)  # read the pretrained model before the first retrain
        for inp, res, f in zip(inputs, results, feats):
            self.features.append(f)
            self.costs.append(_cost_s(res))
            self.task_ids.append(self._tasks.setdefault(_task_key(inp.task), len(self._tasks)))
        if len(self.features) - self.last_train_length < self.last_train_length / 5:
            return
        if not self._train():
            return  # nothing to learn from yet: the previous model (or random scores) stays
        self.last_train_length = len(self.features)
        if self.model_file:
            self.save(self.model_file)

    def _columns(self, feats: list) -> list:
        """The feature arrays cut to the model's first ``n_columns`` columns (all when None)."""
        if self.n_columns is None:
            return feats
        return [f[:, :self.n_columns] for f in feats]

    def _training_set(self) -> tuple:
        keep = [k for k, f in enumerate(self.features) if not is_invalid(f)]
        feats = self._columns([self.features[k] for k in keep])
        costs = np.asarray([self.costs[k] for k in keep], np.float64)
        tids = np.asarray([self.task_ids[k] for k in keep], np.int64)
        return feats, costs, tids, normalized_throughput(costs, tids)

    def _fit(self, kind: str, feats: list, y: np.ndarray, tids: np.ndarray, init_model=None):
        """A Booster of objective ``kind``; ``init_model`` (pack-rank only): the Booster to continue."""
        p = self.lgbm_params
        if kind == "rank":
            return train_rank(feats, y, tids, self.rank_agg, self.num_rounds, self.num_threads, self.seed, p)
        if kind == "pack_rank":
            return train_pack_rank(feats, y, tids, self.num_rounds, self.num_threads, self.seed, p,
                                   init_model=init_model)
        return train_pack_sum(feats, y, self.num_rounds, self.num_threads, self.seed, p)

    def _train(self) -> bool:
        """Retrain on all measurements; False (model unchanged) when there is nothing to
        learn from: fewer than two successful states, or no feature LightGBM can split on."""
        feats, costs, tids, y = self._training_set()
        if int(np.sum(y > 0)) < 2:
            return False
        kind = self.kind or CANDIDATES[0]
        if self.objective == "auto":
            if len(feats) >= MIN_SELECTION_STATES and len(feats) >= 2 * self._n_at_selection:
                kind = self._select(feats, costs, tids)
        else:
            kind = self.objective
        base = self._base[1] if self._base is not None and kind == "pack_rank" and self._all_cpu else None
        booster = self._fit(kind, feats, y, tids, init_model=base)
        if booster is None:
            return False
        self.booster, self.kind = booster, kind
        return True

    def _select(self, feats: list, costs: np.ndarray, tids: np.ndarray) -> str:
        """Compare the objectives of CANDIDATES on held-out states; return the winner.

        Up to CV_MAX_STATES states: 4-fold cross-validation (every state is held out
        once); above: one held-out quarter.  Pairs are scored within a fold and a
        task.  Fills ``self.selection`` with each candidate's pairwise accuracy.
        Another candidate replaces the first one only when it wins by RANK_MARGIN.
        """
        n = len(feats)
        fold = np.random.default_rng(self.seed + n).permutation(n) % CV_FOLDS
        folds = range(CV_FOLDS) if n <= CV_MAX_STATES else range(1)
        preds: dict = {kind: [] for kind in CANDIDATES}
        held, groups = [], []
        for f in folds:
            tr, te = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
            f_tr, f_te = [feats[k] for k in tr], [feats[k] for k in te]
            y_tr = normalized_throughput(costs[tr], tids[tr])
            for kind in preds:
                booster = self._fit(kind, f_tr, y_tr, tids[tr])
                if booster is None:  # this fold had nothing to split on: all ties
                    preds[kind].append(np.zeros(len(f_te)))
                    continue
                preds[kind].append(self._predict_with(kind, booster, f_te))
            held.append(te)
            groups.append(tids[te] * CV_FOLDS + f)
        held_idx, gid = np.concatenate(held), np.concatenate(groups)
        acc = {kind: pairwise_accuracy(np.concatenate(p), costs[held_idx], gid)
               for kind, p in preds.items()}
        chosen = CANDIDATES[0]
        for kind in CANDIDATES[1:]:
            if acc[kind] > max(acc[chosen], acc[CANDIDATES[0]] + RANK_MARGIN):
                chosen = kind
        self.selection = {**acc, "n_states": n, "n_heldout": len(held_idx), "chosen": chosen}
        self._n_at_selection = n
        return chosen

    # -- persistence -------------------------------------------------------------
    def save(self, path) -> None:
        """Write the model as one JSON file (booster text, objective, feature version)."""
        doc = {
            "format": MODEL_FORMAT,
            "feature_version": FEATURE_VERSION,
            "n_features": self.n_columns or len(FEATURE_NAMES),
            "kind": self.kind,
            "rank_agg": self.rank_agg,
            "selection": self.selection,
            "booster": None if self.booster is None else self.booster.model_to_string(),
        }
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)

    def load(self, path) -> None:
        """Read a model written by :meth:`save`; predictions use it at once.

        Raises CostModelError if the file is not such a model or was trained on
        other features (another FEATURE_VERSION).
        """
        import lightgbm

        try:
            with open(path) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as err:
            raise CostModelError(f"cannot read a cost model from {path}: {err}") from None
        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
            raise CostModelError(f"{path} is not an {MODEL_FORMAT} file")
        if doc.get("feature_version") != FEATURE_VERSION:
            raise CostModelError(f"{path} was trained on features {doc.get('feature_version')!r}, "
                                 f"this build extracts {FEATURE_VERSION!r}")
        n = doc.get("n_features", len(FEATURE_NAMES))
        if not isinstance(n, int) or not 0 < n <= len(FEATURE_NAMES):
            raise CostModelError(f"{path} has a bad n_features {n!r}")
        self.n_columns = None if n == len(FEATURE_NAMES) else n
        self.kind = doc.get("kind")
        self.rank_agg = doc.get("rank_agg", self.rank_agg)
        self.selection = doc.get("selection") or {}
        text = doc.get("booster")
        self.booster = None if text is None else lightgbm.Booster(model_str=text)
        self.num_warmup_sample = -1


__all__ = ["LGBMModel", "normalized_throughput", "pairwise_accuracy", "MODEL_FORMAT"]
