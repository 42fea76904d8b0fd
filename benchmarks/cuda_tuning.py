"""Benchmark of the GPU path: tuned cuda programs vs PyTorch (cuBLAS / cuDNN kernels), in one process.

Workloads: matmul 1024^3 and 4096^3 (float32) and row softmax 4096x4096.  Each is tuned on
``cuda -arch=<the device's arch>`` with the library (SketchPolicy with the GPU rules,
LGBMModel, LocalBuilder/LocalRunner measuring on the GPU), its best record is applied and
timed with CUDA events (``time_evaluator`` on ``sc.cuda(0)``), and PyTorch's kernel for the
same computation is timed with ``torch.cuda.Event`` in the same process.

Usage:  python benchmarks/cuda_tuning.py [--trials 200] [--out benchmarks/results/cuda_tuning.json]
Needs a CUDA device, nvcc and pycuda (``pip install -e ".[cuda]"``), and torch with CUDA for
the baseline.  Without a device it prints why and exits 2 (it never reports a time it did not
measure).  The JSON records the GPU model, the driver's arch and every figure.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.runtime.cuda_driver import device_name
from sketch_rules import SketchPolicyParams


def matmul(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def softmax(m: int, n: int):
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    s = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    out = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="softmax")
    return [A, out]


def tune(tensors, target: str, trials: int, log: Path):
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(tensors), target=target)
    policy = sc.SketchPolicy(task, sc.LGBMModel(seed=0), params=SketchPolicyParams(), seed=0, verbose=0)
    task.tune(sc.TuningOptions(num_measure_trials=trials, num_measures_per_round=32, verbose=1,
                               measure_callbacks=[sc.RecordToFile(str(log))]), search_policy=policy)
    sch, args = task.apply_best(str(log))
    return sc.build(sch, args, target)


def time_ours(mod, host_arrays, dev) -> float:
    arrays = [sc.nd.array(a, dev) for a in host_arrays]
    return float(np.median(mod.time_evaluator(mod.entry_name, dev, number=10, repeat=5,
                                              min_repeat_ms=50)(*arrays).results))


def time_torch(fn, repeat: int = 5, number: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / number)
    return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/cuda_tuning.json")
    opts = ap.parse_args()
    dev = sc.cuda(0)
    if not dev.exist:
        print("no CUDA device here (sc.cuda(0).exist is False): nothing measured", file=sys.stderr)
        return 2
    import torch

    gpu, arch = device_name(0)
    target = f"cuda -arch={arch}"
    rng = np.random.default_rng(0)
    figures = {"gpu": gpu, "arch": arch, "host": platform.processor() or platform.machine(),
               "trials": opts.trials, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tensors, host, torch_fn in [
            *[(f"matmul_{n}", matmul(n), [rng.random((n, n), dtype=np.float32),
                                          rng.random((n, n), dtype=np.float32), np.zeros((n, n), np.float32)],
               lambda a, b: torch.matmul(a, b)) for n in (1024, 4096)],
            ("softmax_4096", softmax(4096, 4096), [rng.random((4096, 4096), dtype=np.float32),
                                                   np.zeros((4096, 4096), np.float32)],
             lambda a: torch.softmax(a, dim=1)),
        ]:
            mod = tune(tensors, target, opts.trials, Path(tmp) / f"{name}.json")
            ours = time_ours(mod, host, dev)
            inputs = [torch.from_numpy(a).cuda() for a in host[:-1]]
            theirs = time_torch(lambda inputs=inputs, fn=torch_fn: fn(*inputs))
            figures["workloads"][name] = {"ours_s": ours, "torch_s": theirs, "speedup_vs_torch": theirs / ours}
            print(f"{name}: ours {ours * 1e3:.3f} ms, PyTorch {theirs * 1e3:.3f} ms, {theirs / ours:.2f}x")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
