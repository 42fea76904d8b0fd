"""The best programs of several W1 record files (matmul 1024^3 + bias), timed side by side with
numpy and ``torch.addmm`` in one process: alternating repetitions, medians, GFLOP/s.

    python benchmarks/retime_w1_bests.py LABEL=RECORDS.json [LABEL=RECORDS.json ...]
        [--reps 5] [--out benchmarks/results/w1_bests_retimed.json]

Each best program is checked against numpy before it is timed.  Used for
``benchmarks/results/w1_200_bests_retimed_zen3.json`` (the two 200-trial runs of
``benchmarks/tune.py`` with TAIL_TILE_PROB 0 and 0.5).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import cpu_model  # noqa: E402  (same folder)
from tune import _median_time, matmul_add  # noqa: E402  (same folder)

import scheduler_core as sc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="LABEL=record file")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/w1_bests_retimed.json")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    n = 1024
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(n)), target="llvm")
    rng = np.random.default_rng(0)
    ins = [rng.random((n, n), dtype=np.float32) for _ in range(3)]
    ref = ins[0].astype(np.float64) @ ins[1] + ins[2]
    funcs = {}
    for spec in args.logs:
        label, log = spec.split("=", 1)
        sch, targs = task.apply_best(log)
        f = sc.build(sch, targs, "llvm")
        out = np.empty((n, n), np.float32)
        f(*ins, out)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
        funcs[label] = (f, out)
    ts = [torch.from_numpy(a) for a in ins]
    times: dict = {k: [] for k in [*funcs, "numpy", "torch"]}
    for _ in range(args.reps):
        for label, (f, out) in funcs.items():
            res = f.time_evaluator(f.entry_name, sc.cpu(), number=5, repeat=5)(*ins, out).results
            times[label].append(float(np.median(res)))
        times["numpy"].append(_median_time(lambda: np.add(ins[0] @ ins[1], ins[2])))
        times["torch"].append(_median_time(lambda: torch.addmm(ts[2], ts[0], ts[1])))
    flop = 2 * n ** 3 + n * n
    doc = {"meta": {"cpu": cpu_model(), "when": time.strftime("%Y-%m-%d %H:%M:%S"), "logs": args.logs,
                    "reps": args.reps, "torch_threads": 2},
           "median_ms": {k: float(np.median(v)) * 1e3 for k, v in times.items()},
           "gflops": {k: flop / float(np.median(v)) / 1e9 for k, v in times.items()},
           "reps_ms": {k: [x * 1e3 for x in v] for k, v in times.items()}}
    for k in times:
        print(f"{k}: {doc['median_ms'][k]:.2f} ms ({doc['gflops'][k]:.1f} GFLOP/s)")
    Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
