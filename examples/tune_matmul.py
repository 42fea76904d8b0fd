"""Seed 000 end to end: auto-schedule matmul+bias with no template.

Registers the workload, creates a SearchTask, tunes it with records kept in a
file, applies the best schedule, checks it against numpy, prints the lowered
program, the time beside numpy's and the equivalent Python schedule, then
resumes the search from the records (measuring none of them again).

    python examples/tune_matmul.py [--n 512] [--trials 32] [--log matmul.json]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import scheduler_core as sc
from scheduler_core import te


@sc.register_workload
def matmul_add(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    C = te.placeholder((N, M), name="C", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    matmul = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                        attrs={"layout_free_placeholders": [B]})
    out = te.compute((N, M), lambda i, j: matmul[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def main() -> None:
    ap = argparse.ArgumentParser(description="auto-schedule seed 000's matmul+bias")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--log", default="matmul.json")
    opts = ap.parse_args()
    n = opts.n
    task = sc.SearchTask(func=matmul_add, args=(n, n, n, "float32"), target="llvm")
    print("Computational DAG:")
    print(task.compute_dag)
    if os.path.exists(opts.log):
        os.remove(opts.log)
    tune_option = sc.TuningOptions(num_measure_trials=opts.trials, num_measures_per_round=16,
                                   measure_callbacks=[sc.RecordToFile(opts.log)], verbose=1)
    t0 = time.perf_counter()
    task.tune(tune_option)
    print(f"tuned {opts.trials} trials in {time.perf_counter() - t0:.1f} s; records in {opts.log}")
    sch, args = task.apply_best(opts.log)
    print("Lowered loop program:")
    print(sc.lower(sch, args, simple_mode=True))
    func = sc.build(sch, args, "llvm")
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    out = sc.nd.empty((n, n))
    func(sc.nd.array(a), sc.nd.array(b), sc.nd.array(c), out)
    np.testing.assert_allclose(out.numpy(), a @ b + c, rtol=1e-3)
    ours = float(np.median(func.time_evaluator(func.entry_name, sc.cpu(), number=5, repeat=5)(
        a, b, c, out.numpy()).results))
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b + c
    ref = (time.perf_counter() - t0) / 5
    print(f"best program matches numpy: {ours * 1e3:.3f} ms vs numpy {ref * 1e3:.3f} ms "
          f"({ref / ours:.2f}x numpy's speed)")
    print("Equivalent python schedule:")
    print(task.print_best(opts.log))
    print("Resume search:")
    cost_model = sc.LGBMModel()
    cost_model.update_from_file(opts.log)
    policy = sc.SketchPolicy(task, cost_model, init_search_callbacks=[sc.PreloadMeasuredStates(opts.log)])
    task.tune(sc.TuningOptions(num_measure_trials=8, num_measures_per_round=8,
                               measure_callbacks=[sc.RecordToFile(opts.log)]), search_policy=policy)


if __name__ == "__main__":
    main()
