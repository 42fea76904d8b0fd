"""Speed of one evolutionary-search round (Ansor section 5, ``EvolutionarySearch``), by phase.

W1: matmul+bias 1024^3 float32, B layout-free (``benchmarks/tune.py``'s ``matmul_add``).
W2: conv2d NCHW 1x64x56x56, 64 filters 3x3, pad 1, + bias + ReLU (TOPI's padding stage).

For each workload: sample the initial population (``sample_init_population``, population
2048 by default), train an ``LGBMModel`` on ``--train`` states of that population with
synthetic costs (seeded uniform 1-10 ms: the model's accuracy does not matter here, only
the work ``predict`` does, which is the same for any trained booster of the same size), then
time ``SketchPolicy.evolutionary_search`` once (``num_iters`` generations, Ansor's default 4)
split into phases:

    mutation           SketchPolicy._mutate (edit the step history, replay, validate)
    features           lowering + feature extraction (get_per_store_features_from_states)
    prediction         the booster on the feature rows (predict minus features)
    selection          the rest: roulette selection, de-duplication, bookkeeping

Times are wall seconds (and the round's CPU seconds of this process) on a shared machine
(2 cores on the development machine, where other jobs run too): compare numbers taken in
the same conditions only.  Results, with the CPU model and ISA from /proc/cpuinfo, go to
``benchmarks/results/search_speed.json``.  The features of a large batch are computed on
worker processes (``cost_model.feature_pool``); ``AUTOSCHED_FEATURE_WORKERS=1`` keeps them in
this process.  Each row carries a digest of the round's best states: runs with the same seed
and any number of workers must print the same digest.  The CPU seconds are this process's
only (the workers' are not in them).

    python benchmarks/search_speed.py [--workloads W1,W2] [--population 2048] [--train 64]
    AUTOSCHED_FEATURE_WORKERS=1 python benchmarks/search_speed.py --label serial --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_isa, cpu_model  # same folder
from tune import matmul_add  # same folder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.workloads

import cost_model.lgbm_model as lgbm_module
import scheduler_core as sc
from cost_model import LGBMModel
from cost_model.feature_pool import feature_workers
from scheduler_core.measure.data import MeasureInput, MeasureResult
from sketch_rules import SketchPolicyParams, generate_sketches
from sketch_rules.step_history import step_key
from tests.workloads import conv2d_nchw  # the test suite's DAG library

WORKLOADS = {"W1": lambda: matmul_add(1024), "W2": lambda: conv2d_nchw(1, 64, 56, 56, 64, 3, 3)}


class _Timer:
    """Accumulated wall seconds of wrapped calls."""

    def __init__(self):
        self.s = 0.0
        self.calls = 0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.s += time.perf_counter() - t0
                self.calls += 1
        return timed


def time_round(name: str, population: int, n_train: int, seed: int) -> dict:
    """One evolution round of workload ``name``; a dict of wall seconds per phase."""
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(WORKLOADS[name]()), target="llvm")
    model = LGBMModel(seed=seed, num_warmup_sample=0)
    policy = sc.SketchPolicy(task, model, params=SketchPolicyParams(population=population),
                             seed=seed, verbose=0)
    t0 = time.perf_counter()
    policy.sketches = generate_sketches(policy, None)
    init = policy.sample_initial_population(population)  # as SketchPolicy.search_one_round
    t_init = time.perf_counter() - t0
    rng = np.random.default_rng(seed + 1)
    train = [init[int(i)] for i in rng.permutation(len(init))[:n_train]]
    results = [MeasureResult(costs=(float(c),), error_no=0, error_msg="", all_cost=0.0, timestamp=0.0)
               for c in rng.uniform(1e-3, 1e-2, len(train))]
    model.update([MeasureInput(task, s) for s in train], results)
    if model.booster is None:
        raise RuntimeError("the LGBM model did not train")

    mutation, features, predict = _Timer(), _Timer(), _Timer()
    policy._mutate = mutation.wrap(policy._mutate)
    policy._predict = predict.wrap(policy._predict)
    original = lgbm_module.get_per_store_features_from_states
    lgbm_module.get_per_store_features_from_states = features.wrap(original)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        best = policy.evolutionary_search(init, 2 * 64 + 64)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        lgbm_module.get_per_store_features_from_states = original
    return {
        "workload": name, "population": population, "num_iters": policy.params.num_iters,
        "init_population": len(init), "sample_init_s": t_init, "round_s": total, "round_cpu_s": cpu,
        "phases_s": {"mutation": mutation.s, "features": features.s,
                     "prediction": predict.s - features.s,
                     "selection": total - mutation.s - predict.s},
        "mutations": mutation.calls, "predict_calls": predict.calls, "best_states": len(best),
        "feature_workers": feature_workers(),
        # the same seed must give the same search, whatever the number of feature workers
        "best_digest": hashlib.sha1(repr([step_key(s) for s in best]).encode()).hexdigest()[:12],
        "model": f"LGBMModel trained on {len(train)} states of the initial population with synthetic costs",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="time one evolutionary-search round by phase")
    ap.add_argument("--workloads", default="W1,W2")
    ap.add_argument("--population", type=int, default=2048)
    ap.add_argument("--train", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="", help="a note stored with the results (e.g. 'before')")
    ap.add_argument("--out", default="benchmarks/results/search_speed.json")
    opts = ap.parse_args()
    rows = []
    for name in opts.workloads.split(","):
        row = time_round(name, opts.population, opts.train, opts.seed)
        rows.append(row)
        ph = row["phases_s"]
        print(f"{name}: round {row['round_s']:.2f}s (CPU {row['round_cpu_s']:.2f}s) = mutation {ph['mutation']:.2f}s"
              f" + features {ph['features']:.2f}s + prediction {ph['prediction']:.2f}s"
              f" + selection {ph['selection']:.2f}s "
              f"({row['mutations']} mutations; sampling the initial population took {row['sample_init_s']:.2f}s; "
              f"{row['feature_workers']} feature worker(s); best states {row['best_digest']})",
              flush=True)
    meta = {"cpu": cpu_model(), "isa": cpu_isa(), "cores": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "label": opts.label}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
