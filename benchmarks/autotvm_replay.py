"""AutoTVM tuners replayed over a fully measured config space: many seeds at no measuring cost.

    python benchmarks/autotvm_replay.py measure [--table benchmarks/results/autotvm_matmul512_table.json]
    python benchmarks/autotvm_replay.py replay [--seeds 20] [--trials 64] [--out FILE.json]

``measure`` builds and runs every config of ``benchmarks/autotvm_tuners.py``'s 512^3 matmul
template (2940 configs) once and writes each config's costs (seconds per call, one per
repeat) and error code to a JSON table; it resumes a partial table.  ``replay`` then runs
every tuner of autotvm_tuners.py for ``--seeds`` seeds against that table: a tuner's
"measurement" of a config is the table's entry (the fastest repeat, so a repeat slowed by
another process on the machine does not decide a ranking).  Program-feature tuners still
instantiate and lower each config they look at; only the building and running are replayed.

What it reports per tuner: in how many seeds it reaches the random tuner's final best (same
seed) in at most half the trials, the median trial count to reach it, and the median trial
count to reach 97% and 100% of the space's best.  Because every tuner sees the same fixed
numbers, the comparison measures the search strategies alone; with 20 seeds it is not at the
mercy of one lucky draw, which three live seeds were.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from scheduler_core import autotvm
from scheduler_core.autotvm.measure import MeasureBatch, MeasureInput
from scheduler_core.measure.data import MeasureErrorNo, MeasureResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotvm_tuners import TUNERS, trials_to_reach  # noqa: E402  (same folder; registers the templates)
from bench_util import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# LGBMTuner settings tried beside autotvm_tuners.TUNERS (name: plan_size, pool_size)
VARIANTS = {f"lgbm_p{plan}_pool{pool}": (plan, pool) for plan in (2, 3, 4, 8) for pool in (256, 1024)}
TUNERS = {**TUNERS, **{name: (lambda t, seed, plan=plan, pool=pool: autotvm.tuner.LGBMTuner(
    t, plan_size=plan, pool_size=pool, feature_type="program", seed=seed, diversity=0.2))
    for name, (plan, pool) in VARIANTS.items()}}
# the two tasks of autotvm_tuners.py: (template, args, default table file)
TASKS = {"matmul512": ("bench/matmul", (512, 512, 512)), "seed003": ("bench/rgb_yuv_trans", (1920, 1080))}


def table_path_of(name: str) -> Path:
    return ROOT / "benchmarks" / "results" / f"autotvm_{name}_table.json"


def make_task(name: str):
    template, args = TASKS[name]
    return autotvm.task.create(template, args=args, target="llvm")


def measure_space(name: str, table_path: Path, batch: int = 32) -> None:
    """Measure every config not yet in the table; the table is rewritten after every batch."""
    task = make_task(name)
    table = json.loads(table_path.read_text()) if table_path.exists() else {
        "cpu": cpu_model(), "n_cpus": os.cpu_count(), "space": len(task.config_space), "flop": task.flop,
        "runner": {"number": 1, "repeat": 3, "min_repeat_ms": 20}, "load_avg": [], "configs": {}}
    todo = [k for k in range(len(task.config_space)) if str(k) not in table["configs"]]
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=1, repeat=3, min_repeat_ms=20, timeout=10))
    t0 = time.time()
    with MeasureBatch(task, option) as measure:
        for start in range(0, len(todo), batch):
            inputs = [MeasureInput(task.target, task, task.config_space.get(k)) for k in todo[start:start + batch]]
            for inp, res in zip(inputs, measure(inputs)):
                table["configs"][str(inp.config.index)] = {"costs": list(res.costs), "error_no": int(res.error_no)}
            table["load_avg"].append(os.getloadavg()[0])
            table_path.parent.mkdir(parents=True, exist_ok=True)
            table_path.write_text(json.dumps(table) + "\n")
            print(f"{len(table['configs'])}/{table['space']} configs ({time.time() - t0:.0f} s)", flush=True)


def replay_tuner(name: str, task, table: dict, n_trial: int, seed: int) -> list:
    """The best-so-far GFLOP/s curve of one tuner over ``n_trial`` trials replayed from ``table``."""
    tuner = TUNERS[name](task, seed)
    batcher = MeasureBatch.__new__(MeasureBatch)  # instantiate() only: no builder or runner processes
    batcher.task = task
    curve: list = []
    best = 0.0
    while len(curve) < n_trial and tuner.has_next():
        configs = [c for c in tuner.next_batch(min(2, n_trial - len(curve))) if c.index not in tuner.visited]
        if not configs:
            continue
        inputs, results = [], []
        for c in configs:
            inp = MeasureInput(task.target, task, c)
            entry = table[str(c.index)]
            ok = entry["error_no"] == MeasureErrorNo.NO_ERROR
            if ok:
                batcher.instantiate(inp)
            res = MeasureResult((min(entry["costs"]),), entry["error_no"], "", 0.0, time.time())
            inputs.append(inp)
            results.append(res)
            tuner.visited.add(c.index)
            best = max(best, task.flop / res.cost / 1e9 if ok else 0.0)
            curve.append(best)
        tuner.update(inputs, results)
    return curve


def replay(name: str, table_path: Path, seeds: int, n_trial: int, out: Path, tuners: list) -> None:
    table = json.loads(table_path.read_text())
    if len(table["configs"]) < table["space"]:
        raise SystemExit(f"{table_path}: {len(table['configs'])}/{table['space']} configs measured; run `measure`")
    task = make_task(name)
    ok = [task.flop / min(e["costs"]) / 1e9 for e in table["configs"].values() if e["error_no"] == 0]
    space_best = max(ok)
    half = n_trial // 2
    curves: dict = {name: [] for name in tuners}
    t0 = time.time()
    for seed in range(seeds):
        for name in tuners:
            curves[name].append(replay_tuner(name, task, table["configs"], n_trial, seed))
        print(f"seed {seed}: " + ", ".join(f"{n} {curves[n][-1][-1]:.1f}" for n in tuners), flush=True)
    summary: dict = {}
    for name in tuners:
        reach_rand = [trials_to_reach(c, r[-1]) for c, r in zip(curves[name], curves["random"])]
        reach_97 = [trials_to_reach(c, 0.97 * space_best) for c in curves[name]]
        reach_best = [trials_to_reach(c, space_best) for c in curves[name]]

        def med(xs: list) -> float | None:
            got = [x if x is not None else n_trial + 1 for x in xs]
            return float(np.median(got))
        summary[name] = {
            "reaches_random_best_in_half": sum(1 for x in reach_rand if x is not None and x <= half),
            "median_trials_to_random_best": med(reach_rand),
            "median_trials_to_97pct_space_best": med(reach_97),
            "median_trials_to_space_best": med(reach_best),
            "mean_final_gflops": float(np.mean([c[-1] for c in curves[name]])),
            "mean_gflops_at_half": float(np.mean([c[half - 1] for c in curves[name]])),
        }
        print(name, summary[name], flush=True)
    report = {"task": name, "cpu": table["cpu"], "space": table["space"], "space_best_gflops": space_best,
              "configs_ok": len(ok), "seeds": seeds, "n_trial": n_trial, "table": str(table_path.relative_to(ROOT)),
              "method": "each tuner's measurements are the table's fastest repeat of the config "
                        "(an unreached target counts as n_trial + 1 in the medians)",
              "summary": summary, "curves": curves, "wall_s": time.time() - t0}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("measure", "replay"))
    ap.add_argument("--task", choices=tuple(TASKS), default="matmul512")
    ap.add_argument("--table", default=None, help="default: benchmarks/results/autotvm_<task>_table.json")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--tuners", default=",".join(TUNERS), help="comma-separated names of autotvm_tuners.TUNERS")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/autotvm_replay_<task>.json")
    args = ap.parse_args()
    table = Path(args.table) if args.table else table_path_of(args.task)
    if args.mode == "measure":
        measure_space(args.task, table)
    else:
        out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"autotvm_replay_{args.task}.json"
        names = args.tuners.split(",")
        if "random" not in names:
            names.insert(0, "random")
        replay(args.task, table, args.seeds, args.trials, out, names)


if __name__ == "__main__":
    main()
