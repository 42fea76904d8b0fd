"""Does the time the search reports equal what a user gets from the downloaded artifact?

For each workload (small kernels first, where per-call overheads and a shared machine hurt
most): ``autosched tune`` runs the whole service path (embedded Redis in a temporary data
directory, a supervised RQ worker, the search, LocalRunner in its sandboxed worker process),
then this process loads the ``best.so`` it wrote and times it as a user would:

- ``time_evaluator`` (number grown to 200 ms per repeat, 7 repeats, median), and
- a plain Python loop calling the module on numpy arrays (argument checks included).

It reports the search's cost (median of the best record's repeats) over the artifact's,
and the spread of the record's repeats.  Target: within 15% on a quiet machine.

    python benchmarks/measure_truth.py [--trials 16] [--workloads add,softmax,...]

Figures go to benchmarks/results/measure_truth.json with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_model, median_time_s  # same folder

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.measure.data import median_of, spread_of
from scheduler_core.runtime import load_module

ROOT = Path(__file__).resolve().parent.parent


def _add(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    return [A, B, te.compute((n, n), lambda i, j: A[i, j] + B[i, j], name="C")]


def _matmul(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def _softmax(n: int):
    A = te.placeholder((n, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    ex = te.compute((n, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((n,), lambda i: te.sum(ex[i, k2], axis=k2), name="row_sum")
    return [A, te.compute((n, n), lambda i, j: ex[i, j] / sm[i], name="softmax")]


WORKLOADS = {
    "add_256": lambda: _add(256),
    "matmul_64": lambda: _matmul(64),
    "softmax_128": lambda: _softmax(128),
    "matmul_256": lambda: _matmul(256),
    "add_2048": lambda: _add(2048),
}


def measure_one(name: str, trials: int, work: Path) -> dict:
    """Tune ``name`` through ``autosched tune`` and time its artifact here; figures as a dict."""
    dag = sc.ComputeDAG(WORKLOADS[name]())
    wdir = work / name
    wdir.mkdir(parents=True)
    (wdir / "dag.json").write_text(dag.to_json())
    env = {**os.environ, "AUTOSCHED_DATA_DIR": str(wdir / "data")}
    env.pop("REDIS_URL", None)
    cmd = [sys.executable, "-m", "api.cli", "tune", str(wdir / "dag.json"), "--trials", str(trials),
           "--per-round", str(min(trials, 16)), "--population", "128", "--out", str(wdir / "out")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tune_s = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"workload": name, "error": (proc.stdout + proc.stderr)[-2000:]}
    record = json.loads((wdir / "out" / "best_record.json").read_text())
    costs = [float(c) for c in record["r"][0]]
    module = load_module(wdir / "out" / "best.so")
    rng = np.random.default_rng(0)
    arrays = [rng.random(p.shape, dtype=np.float64).astype(p.dtype) if p.np_dtype.kind == "f"
              else np.ones(p.shape, dtype=p.dtype) for p in module.signature.params]
    module(*arrays)  # warm-up
    evaluator = module.time_evaluator(module.entry_name, "cpu", number=1, repeat=7, min_repeat_ms=200)
    artifact_s = evaluator(*arrays).median
    loop_s = median_time_s(lambda: module(*arrays))
    reported_s = median_of(costs)
    return {"workload": name, "trials": trials, "tune_wall_s": round(tune_s, 1),
            "reported_ms": reported_s * 1e3, "record_costs_ms": [c * 1e3 for c in costs],
            "record_spread": spread_of(costs),
            "artifact_time_evaluator_ms": artifact_s * 1e3, "artifact_python_loop_ms": loop_s * 1e3,
            "reported_over_artifact": reported_s / artifact_s,
            "reported_over_python_loop": reported_s / loop_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "measure_truth.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="measure_truth_") as tmp:
        for name in args.workloads.split(","):
            row = measure_one(name, args.trials, Path(tmp))
            rows.append(row)
            if "error" in row:
                print(f"{name}: FAILED\n{row['error']}")
                continue
            print(f"{name:12s} reported {row['reported_ms']:9.4f} ms"
                  f"  artifact {row['artifact_time_evaluator_ms']:9.4f} ms"
                  f"  python loop {row['artifact_python_loop_ms']:9.4f} ms"
                  f"  ratio {row['reported_over_artifact']:.3f}"
                  f"  spread {row['record_spread']:.3f}")
    out = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
