"""Tune W1 (matmul+bias 1024^3, layout-free B) and W4 (RGB->YUV 1920x1080) end to end.

For each workload: run the search with a trial budget, build the best record,
check it against numpy, and print its time beside numpy's (and PyTorch's when
installed) measured in this process; the search's wall time split into search
/ build / run; the cost model's pairwise ranking accuracy on held-out records
(trained on the first 2/3 of the measurements, scored on the last 1/3); and the
peak resident memory of this process and its workers.

    python benchmarks/tune.py --trials 200 [--workloads W1,W4] [--population 2048]

Figures go to benchmarks/results/tune.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from compiler_core import best_of as _median_time  # same folder
from compiler_core import rgb_to_yuv

import scheduler_core as sc
from scheduler_core import te


def matmul_add(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.placeholder((n, n), name="C")
    k = te.reduce_axis((0, n), name="k")
    mm = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                    attrs={"layout_free_placeholders": [B]})
    out = te.compute((n, n), lambda i, j: mm[i, j] + C[i, j], name="out")
    return [A, B, C, out]


YUV = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]], np.float32)


def _torch_time(name: str, arrays: list):
    try:
        import torch
    except ImportError:
        return None
    ts = [torch.from_numpy(a) for a in arrays]
    if name == "W1":
        return _median_time(lambda: torch.addmm(ts[2], ts[0], ts[1]))
    m = torch.from_numpy(YUV)
    return _median_time(lambda: ts[0] @ m)


def _pairwise_accuracy(task, log_file: str) -> float | None:
    from cost_model import LGBMModel, pairwise_accuracy
    recs = [(i, r) for i, r in sc.load_records(log_file) if r.error_no == 0]
    if len(recs) < 30:
        return None
    cut = 2 * len(recs) // 3
    model = LGBMModel(seed=0)
    model.update([i for i, _ in recs[:cut]], [r for _, r in recs[:cut]])
    held = recs[cut:]
    preds = model.predict(task, [i.state for i, _ in held])
    costs = np.array([np.mean(r.costs) for _, r in held])
    return float(pairwise_accuracy(preds, costs))


def _peak_rss_mib() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return me, kids


def tune_one(name: str, args: list, trials: int, per_round: int, population: int, seed: int,
             inputs: list, reference) -> dict:
    from cost_model import LGBMModel
    from sketch_rules import SketchPolicyParams
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(args), target="llvm")
    log = os.path.join(tempfile.mkdtemp(prefix="tune_"), f"{name}.json")
    policy = sc.SketchPolicy(task, LGBMModel(seed=seed), params=SketchPolicyParams(population=population),
                             seed=seed)
    opts = sc.TuningOptions(num_measure_trials=trials, num_measures_per_round=per_round,
                            measure_callbacks=[sc.RecordToFile(log)], verbose=1)
    t0 = time.perf_counter()
    task.tune(opts, search_policy=policy)
    wall = time.perf_counter() - t0
    m = policy.measurer
    sch, targs = task.apply_best(log)
    f = sc.build(sch, targs, "llvm")
    out = np.empty(reference.shape, np.float32)
    f(*inputs, out)
    np.testing.assert_allclose(out, reference, rtol=1e-3, atol=1e-4)
    ours = float(np.median(f.time_evaluator(f.entry_name, sc.cpu(), number=5, repeat=7)(*inputs, out).results))
    if name == "W1":
        numpy_s = _median_time(lambda: np.add(inputs[0] @ inputs[1], inputs[2]))
    else:
        numpy_s = _median_time(lambda: inputs[0] @ YUV)
    torch_s = _torch_time(name, inputs)
    flop = task.compute_dag.flop_ct
    return {
        "workload": name, "trials": trials, "population": population,
        "best_ms": ours * 1e3, "numpy_ms": numpy_s * 1e3, "speed_vs_numpy": numpy_s / ours,
        "torch_ms": None if torch_s is None else torch_s * 1e3,
        "best_gflops": flop / ours / 1e9,
        "wall_s": wall, "search_s": policy.time_search_s, "build_s": m.time_build_s, "run_s": m.time_run_s,
        "search_share": policy.time_search_s / wall,
        "errors": dict(m.error_counts),
        "pairwise_accuracy_heldout": _pairwise_accuracy(task, log),
        "records": log,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="tune W1 and W4 end to end")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--population", type=int, default=2048)
    ap.add_argument("--workloads", default="W1,W4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/tune.json")
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for name in opts.workloads.split(","):
        if name == "W1":
            n = 1024
            a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
            row = tune_one("W1", matmul_add(n), opts.trials, opts.per_round, opts.population, opts.seed,
                           [a, b, c], a @ b + c)
        else:
            img = rng.random((1920, 1080, 3), dtype=np.float32)
            row = tune_one("W4", rgb_to_yuv(1920, 1080), opts.trials, opts.per_round, opts.population,
                           opts.seed, [img], img @ YUV)
        rows.append(row)
        torch_txt = "" if row["torch_ms"] is None else f", torch {row['torch_ms']:.2f} ms"
        print(f"{name}: best {row['best_ms']:.2f} ms ({row['best_gflops']:.1f} GFLOP/s), numpy {row['numpy_ms']:.2f} ms"
              f"{torch_txt}; {row['speed_vs_numpy']:.2f}x numpy | wall {row['wall_s']:.0f}s = search "
              f"{row['search_s']:.0f}s + build {row['build_s']:.0f}s + run {row['run_s']:.0f}s "
              f"(search {100 * row['search_share']:.0f}%) | held-out pairwise accuracy "
              f"{row['pairwise_accuracy_heldout']}", flush=True)
    me, kids = _peak_rss_mib()
    print(f"peak RSS: search process {me:.0f} MiB, largest worker {kids:.0f} MiB")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S"), "peak_rss_mib": me, "peak_worker_rss_mib": kids}
    Path(opts.out).write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
