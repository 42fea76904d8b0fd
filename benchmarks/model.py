"""Whole-model latency after tuning, beside PyTorch eager and torch.compile (issue 12).

For each model of examples/torch_models.py (ResNet basic block 1x64x56x56, MLP 64x784-512-512-10,
transformer encoder layer 1x128x256, 4 heads, ffn 1024), in one process:

1. import it (``frontend.from_pytorch``), build it untuned (default schedules) and time it;
2. ``extract_tasks`` + ``TaskScheduler(tasks, weights).tune`` (gradient strategy) with
   ``--trials`` trials per task (records in a temporary log), timing the tuning's wall clock;
3. build it under ``ApplyHistoryBest``; check it against torch (max relative error);
4. time the tuned model, torch eager and ``torch.compile`` (default inductor backend; a
   failure is caught and noted) in alternating rounds; each figure is the median of the
   rounds' medians.

torch runs with as many threads as the machine has cores (as the compiled programs' pool).

    python benchmarks/model.py [--trials 32] [--models mlp,transformer,resnet_block] [--no-compile]
                               [--log-dir DIR] [--merge]

Figures go to benchmarks/results/model.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_util import cpu_model, median_time_s  # same folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import torch_models as tm  # noqa: E402  (examples/torch_models.py)

import scheduler_core as sc  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "model.json"


def _timer(fn, rounds_min_s: float = 0.3):
    return lambda: median_time_s(fn, min_s=rounds_min_s, repeat=5)


def bench_model(name: str, trials: int, use_compile: bool, log_dir: str, rounds: int = 3,
                reuse: bool = False) -> dict:
    module, xs, graph = tm.load(name)
    x_np = [x.numpy() for x in xs]
    with torch.no_grad():
        want = module(*xs).numpy()
    row: dict = {"model": name, "calls": len(graph.calls),
                 "library_calls": sum(c.kind == "library" for c in graph.calls),
                 "functions": sorted({f.name.rsplit("_", 1)[0] for _, _, f in graph.tir_calls()})}

    untuned = sc.build_graph(graph)
    row["untuned_max_rel_err"] = tm.max_rel_error(untuned(*x_np), want)
    row["untuned_ms"] = median_time_s(lambda: untuned(*x_np), min_s=0.3, repeat=5) * 1e3

    log = os.path.join(log_dir, f"{name}.json")
    reused = reuse and os.path.exists(log)
    if os.path.exists(log) and not reused:
        os.remove(log)
    sched, row["tune_wall_s"] = tm.tune_model(graph, 0 if reused else trials, log)
    row.update(tasks=len(sched.tasks), weights=[int(w) for w in sched.weights])
    if reused:  # --reuse-logs: time the programs of an earlier run's records, tune nothing
        row.update(records_reused_from=log, tune_wall_s=None)
    else:
        print(sched.progress_table(row["tune_wall_s"]), flush=True)
        row.update(trials_per_task=trials, trials_total=int(sum(sched.task_cts)),
                   estimated_total_ms=sched.total_latency() * 1e3,
                   task_best_ms={t.desc: float(c) * 1e3 for t, c in zip(sched.tasks, sched.best_costs)})
    with sc.ApplyHistoryBest(log):
        lib = sc.build_graph(graph)
    row["sources"] = sorted({lib.schedule_source(f.name) for _, _, f in graph.tir_calls()})
    row["tuned_max_rel_err"] = tm.max_rel_error(lib(*x_np), want)

    timers = {"tuned": _timer(lambda: lib(*x_np))}

    def eager():
        with torch.no_grad():
            module(*xs)
    timers["torch_eager"] = _timer(eager)
    if use_compile:
        try:
            compiled = torch.compile(module)
            t0 = time.perf_counter()
            with torch.no_grad():
                got = compiled(*xs).numpy()
            row["torch_compile_first_call_s"] = time.perf_counter() - t0
            row["torch_compile_max_rel_err"] = tm.max_rel_error(got, want)

            def comp():
                with torch.no_grad():
                    compiled(*xs)
            timers["torch_compile"] = _timer(comp)
        except Exception as e:  # inductor needs a C++ compiler and more; note why it failed
            row["torch_compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    samples: dict = {k: [] for k in timers}
    for _ in range(rounds):
        for k, t in timers.items():
            samples[k].append(t())
    for k, v in samples.items():
        row[f"{k}_ms"] = float(np.median(v)) * 1e3
        row[f"{k}_rounds_ms"] = [x * 1e3 for x in v]
    row["speed_vs_eager"] = row["torch_eager_ms"] / row["tuned_ms"]
    if "torch_compile_ms" in row:
        row["speed_vs_compile"] = row["torch_compile_ms"] / row["tuned_ms"]
    row["tuned_vs_untuned"] = row["untuned_ms"] / row["tuned_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32, help="trials per task")
    ap.add_argument("--reuse-logs", action="store_true",
                    help="with --log-dir: time the programs of the records already there (no tuning)")
    ap.add_argument("--models", default="mlp,transformer,resnet_block")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--log-dir", default=None, help="keep the tuning records here (default: a temporary folder)")
    ap.add_argument("--merge", action="store_true",
                    help="replace only these models' entries of an existing --out file")
    opts = ap.parse_args()
    log_dir = opts.log_dir or tempfile.mkdtemp(prefix="model_bench_")
    os.makedirs(log_dir, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "trials_per_task": opts.trials,
           "strategy": "gradient", "models": []}
    t_all = time.perf_counter()
    for name in opts.models.split(","):
        row = bench_model(name, opts.trials, not opts.no_compile, log_dir, reuse=opts.reuse_logs)
        out["models"].append(row)
        comp = f", torch.compile {row['torch_compile_ms']:.3f} ms" if "torch_compile_ms" in row else \
            f", torch.compile failed ({row.get('torch_compile_error', 'skipped')})"
        tuned_how = ("records reused" if row["tune_wall_s"] is None
                     else f"{opts.trials} trials in {row['tune_wall_s']:.0f} s")
        print(f"{name}: {row['tasks']} tasks, {tuned_how}; "
              f"untuned {row['untuned_ms']:.3f} ms, tuned {row['tuned_ms']:.3f} ms, "
              f"torch eager {row['torch_eager_ms']:.3f} ms{comp}; "
              f"{row['speed_vs_eager']:.2f}x eager's speed; max rel err {row['tuned_max_rel_err']:.1e}",
              flush=True)
    out["total_wall_s"] = time.perf_counter() - t_all
    if opts.merge and opts.out.exists():
        old = json.loads(opts.out.read_text())
        fresh = {r["model"] for r in out["models"]}
        before = {r["model"]: r for r in old.get("models", [])}
        for r in out["models"]:  # reused records: keep how they were tuned, from the earlier row
            if r.get("records_reused_from") and r["model"] in before:
                tuning = ("tune_wall_s", "trials_per_task", "trials_total", "estimated_total_ms", "task_best_ms")
                r.update({k: before[r["model"]][k] for k in tuning if k in before[r["model"]]})
        kept = [r for r in old.get("models", []) if r["model"] not in fresh]
        out["models"] = kept + out["models"]
        out["earlier_runs"] = old.get("earlier_runs", []) + [{k: v for k, v in old.items() if k != "models"}]
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
