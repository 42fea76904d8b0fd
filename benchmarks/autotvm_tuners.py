"""AutoTVM tuners compared: best GFLOP/s against trials, on seed 003's template and a matmul.

    python benchmarks/autotvm_tuners.py [--out benchmarks/results/autotvm_tuners.json] [--seeds 0,1,2]

Tasks: seed 003's RGB->YUV 1920x1080 (tile_y: the 32 factors of 1080; every tuner gets
32 trials, the whole space) and a 512^3 float32 matmul template (tile_y over the 10 factors of
512, tile_x and tile_k up to 64, a loop-order knob and an annotation of the innermost loop:
2940 configs; 64 trials each).  Tuners: RandomTuner, GridSearchTuner, GATuner (pop 8),
LGBMTuner with its defaults ("lgbm": plan_size 4, program features, diverse plan), and
LGBMTuner with plan_size 8: knob features, program features, and program features with a
diverse plan (``diversity=0.2``), each run per seed.  ``benchmarks/autotvm_replay.py`` runs the
same tuners over fully measured spaces for many seeds.

The tuners run in lockstep (each proposes a batch of 2 per round) over one measurement table
per task: a config is measured once, and every tuner that proposes it (in any seed) sees that
same result.  So the load of a shared 2-core machine moves every tuner's numbers alike, and
the curves differ only by the configs the tuners chose.  Reported per task and seed: each
tuner's best-so-far curve, and whether it reaches the random tuner's final best in at most
half the trials (also the trial count to 97% of it).

Then the two feature kinds of LGBMTuner are compared as rankers on every matmul config
measured: 4-fold cross-validated pairwise accuracy of the knob model (``cost_model.lgbm_train``
pairwise rank on knob features) and of ``cost_model.LGBMModel`` on program features.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from cost_model.lgbm_model import LGBMModel
from cost_model.lgbm_train import train_pack_rank
from cost_model.metric import pairwise_accuracy
from scheduler_core import autotvm, te
from scheduler_core.autotvm.measure import MeasureBatch, MeasureInput
from scheduler_core.autotvm.tuner.lgbm_tuner import KnobFeatures
from scheduler_core.measure.data import MeasureErrorNo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_util import cpu_model  # noqa: E402  (same folder)

from tests.scheduler_core.autotvm.templates import rgb_yuv_schedule  # noqa: E402  (seed 003's compute)


@autotvm.template("bench/rgb_yuv_trans")
def rgb_yuv_trans(w, h):
    s, (rgb, yuv) = rgb_yuv_schedule(w, h)
    x, y = yuv.op.axis[0], yuv.op.axis[1]
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, yuv, y)
    xy = s[yuv].fuse(x, yo)
    s[yuv].parallel(xy)
    s[yuv].vectorize(yi)
    s[yuv].unroll(yuv.op.axis[2])
    return s, [rgb, yuv]


@autotvm.template("bench/matmul")
def matmul(n, l, m):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = C.op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2, max_factor=64)
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=64)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    cfg.define_knob("order", [0, 1])
    if cfg["order"].val == 0:
        s[C].reorder(yo, xo, ko, yi, ki, xi)
    else:
        s[C].reorder(yo, xo, ko, ki, yi, xi)
    cfg.define_annotate("ann", [xi], policy="try_unroll_vec")
    cfg["ann"].apply(s, C, [xi])
    s[C].parallel(yo)
    return s, [A, B, C]


TUNERS = {
    "random": lambda t, seed: autotvm.tuner.RandomTuner(t, seed=seed),
    "grid": lambda t, seed: autotvm.tuner.GridSearchTuner(t),
    "ga": lambda t, seed: autotvm.tuner.GATuner(t, pop_size=8, elite_num=2, mutation_prob=0.1, seed=seed),
    "lgbm": lambda t, seed: autotvm.tuner.LGBMTuner(t, seed=seed),  # the defaults (plan_size 4, program features)
    "lgbm_knob": lambda t, seed: autotvm.tuner.LGBMTuner(t, plan_size=8, feature_type="knob", seed=seed,
                                                         diversity=0.0),
    "lgbm_program": lambda t, seed: autotvm.tuner.LGBMTuner(t, plan_size=8, feature_type="program", seed=seed,
                                                            diversity=0.0),
    "lgbm_program_div": lambda t, seed: autotvm.tuner.LGBMTuner(t, plan_size=8, feature_type="program", seed=seed,
                                                                diversity=0.2),
}


def trials_to_reach(curve: list, target: float) -> int | None:
    for k, v in enumerate(curve):
        if v >= target:
            return k + 1
    return None


def measure_shared(measure, task, table: dict, configs: list) -> list:
    """``(MeasureInput, MeasureResult)`` of each config, measuring only those not in ``table``."""
    new = [c for c in configs if c.index not in table]
    if new:
        inputs = [MeasureInput(task.target, task, c) for c in new]
        for inp, res in zip(inputs, measure(inputs)):
            table[inp.config.index] = (inp, res)
    return [table[c.index] for c in configs]


def run_task(name: str, task, n_trial: int, measure, table: dict, seed: int) -> dict:
    """Every tuner in lockstep (one batch of 2 each per round), on one shared measurement table."""
    t0 = time.time()
    tuners = {tname: make(task, seed) for tname, make in TUNERS.items()}
    active = True
    while active:
        active = False
        for tuner in tuners.values():
            left = n_trial - len(tuner.trials)
            if left <= 0 or not tuner.has_next():
                continue
            configs = [c for c in tuner.next_batch(min(2, left)) if c.index not in tuner.visited]
            if not configs:
                continue
            active = True
            pairs = measure_shared(measure, task, table, configs)
            for inp, res in pairs:
                flops = task.flop / res.cost if res.error_no == MeasureErrorNo.NO_ERROR and res.cost else 0.0
                tuner.visited.add(inp.config.index)
                tuner.trials.append((inp.config.index, flops))
                if flops > tuner.best_flops:
                    tuner.best_flops, tuner.best_config = flops, inp.config
            tuner.update([p[0] for p in pairs], [p[1] for p in pairs])
    out = {}
    for tname, tuner in tuners.items():
        curve = [f / 1e9 for f in tuner.best_curve()]
        out[tname] = {"trials": len(tuner.trials), "best_gflops": tuner.best_flops / 1e9,
                      "best_config": str(tuner.best_config), "curve_gflops": curve,
                      "errors": sum(1 for _, f in tuner.trials if f == 0)}
        print(f"{name:9s} seed {seed} {tname:13s} best {tuner.best_flops / 1e9:8.2f} GFLOP/s after "
              f"{len(tuner.trials)} trials", flush=True)
    rand = out["random"]["best_gflops"]
    half = n_trial // 2
    for tname in ("lgbm", "lgbm_knob", "lgbm_program", "lgbm_program_div", "ga", "grid"):
        curve = out[tname]["curve_gflops"]
        strict, tol = trials_to_reach(curve, rand), trials_to_reach(curve, 0.97 * rand)
        out[tname]["trials_to_random_best"] = strict
        out[tname]["trials_to_97pct_random_best"] = tol
        out[tname]["reaches_random_best_in_half"] = strict is not None and strict <= half
    out["wall_s"] = time.time() - t0
    out["configs_measured_so_far"] = len(table)
    return out


def ranking_comparison(task, measured: dict, seed: int) -> dict:
    """4-fold pairwise accuracy of knob features vs program features on measured configs."""
    items = [(idx, inp, res) for idx, (inp, res) in measured.items() if inp.core is not None]
    idx = np.asarray([i for i, _, _ in items], np.int64)
    costs = np.asarray([r.cost if r.cost else 1e10 for _, _, r in items])
    knobs = KnobFeatures(task.config_space).features(idx)
    fold = np.random.default_rng(seed).permutation(len(items)) % 4
    pk, pp = np.zeros(len(items)), np.zeros(len(items))
    for f in range(4):
        tr, te_ = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        y = np.where(costs[tr] < 1e9, 1.0 / costs[tr], 0.0)
        y = y / y.max()
        booster = train_pack_rank([knobs[k][None, :] for k in tr], y, np.zeros(len(tr), np.int64),
                                  num_rounds=100, seed=seed)
        pk[te_] = booster.predict(knobs[te_], raw_score=True) if booster is not None else 0.0
        model = LGBMModel(seed=seed, num_warmup_sample=0)
        model.update([items[k][1].core for k in tr], [items[k][2] for k in tr])
        pp[te_] = model.predict(task.core_task, [items[k][1].core.state for k in te_])
    groups = fold
    return {"n_configs": len(items), "knob_pairwise_accuracy": pairwise_accuracy(pk, costs, groups),
            "program_pairwise_accuracy": pairwise_accuracy(pp, costs, groups)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "autotvm_tuners.json"))
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated tuner seeds")
    ap.add_argument("--matmul-trials", type=int, default=64)
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=1, repeat=3, min_repeat_ms=40, timeout=10))
    t0 = time.time()
    report = {"cpu": cpu_model(), "n_cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "seeds": seeds,
              "runner": {"number": 1, "repeat": 3, "min_repeat_ms": 40}, "plan_size": 8,
              "method": "tuners run in lockstep (a batch of 2 each per round); a config is measured once "
                        "and every tuner that proposes it sees that same result", "tasks": {}}
    yuv = autotvm.task.create("bench/rgb_yuv_trans", args=(1920, 1080), target="llvm")
    mm = autotvm.task.create("bench/matmul", args=(512, 512, 512), target="llvm")
    for name, task, n_trial in (("seed003", yuv, 32), ("matmul512", mm, args.matmul_trials)):
        table: dict = {}
        entry = {"space": len(task.config_space), "n_trial": n_trial, "flop": task.flop, "runs": {}}
        with MeasureBatch(task, option) as measure:
            for seed in seeds:
                entry["runs"][str(seed)] = run_task(name, task, n_trial, measure, table, seed)
        entry["configs_measured"] = len(table)
        entry["reaches_random_best_in_half"] = {
            tname: [entry["runs"][str(sd)][tname]["reaches_random_best_in_half"] for sd in seeds]
            for tname in ("lgbm", "lgbm_knob", "lgbm_program", "lgbm_program_div", "ga", "grid")}
        if name == "matmul512":
            entry["ranking"] = ranking_comparison(task, table, seeds[0])
            print("ranking:", entry["ranking"], flush=True)
        report["tasks"][name] = entry
        print(name, "reaches random's best in half the trials:", entry["reaches_random_best_in_half"], flush=True)
    report["wall_s"] = time.time() - t0
    report["load_avg_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
