"""Seed 000's matmul+bias with the schedule TVM's auto-scheduler printed for it.

Describes the workload, applies the printed schedule (Python schedule code, run
as code), prints the DAG and the lowered loop program, builds it with LLVM for
this CPU, checks it against numpy and prints both times.

    python examples/matmul_schedule.py [--n 1024]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import scheduler_core as sc
from scheduler_core import te

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_matmul import matmul_add  # noqa: E402  (seed 000's workload, defined once)

# The "Equivalent python schedule" that seed 000's print_best printed.
SEED000_BEST = """
matmul_i, matmul_j, matmul_k = tuple(matmul.op.axis) + tuple(matmul.op.reduce_axis)
out_i, out_j = tuple(out.op.axis) + tuple(out.op.reduce_axis)
matmul_i_o_i, matmul_i_i = s[matmul].split(matmul_i, factor=4)
matmul_i_o_o_i, matmul_i_o_i = s[matmul].split(matmul_i_o_i, factor=1)
matmul_i_o_o_o, matmul_i_o_o_i = s[matmul].split(matmul_i_o_o_i, factor=2)
matmul_j_o_i, matmul_j_i = s[matmul].split(matmul_j, factor=8)
matmul_j_o_o_i, matmul_j_o_i = s[matmul].split(matmul_j_o_i, factor=1)
matmul_j_o_o_o, matmul_j_o_o_i = s[matmul].split(matmul_j_o_o_i, factor=1)
matmul_k_o, matmul_k_i = s[matmul].split(matmul_k, factor=4)
s[matmul].reorder(matmul_i_o_o_o, matmul_j_o_o_o, matmul_i_o_o_i, matmul_j_o_o_i, matmul_k_o, matmul_i_o_i, matmul_j_o_i, matmul_k_i, matmul_i_i, matmul_j_i)
out_i_o_i, out_i_i = s[out].split(out_i, factor=4)
out_i_o_o, out_i_o_i = s[out].split(out_i_o_i, factor=2)
out_j_o_i, out_j_i = s[out].split(out_j, factor=8)
out_j_o_o, out_j_o_i = s[out].split(out_j_o_i, factor=1)
s[out].reorder(out_i_o_o, out_j_o_o, out_i_o_i, out_j_o_i, out_i_i, out_j_i)
s[matmul].compute_at(s[out], out_j_o_i)
out_i_o_o_j_o_o_fused = s[out].fuse(out_i_o_o, out_j_o_o)
s[out].parallel(out_i_o_o_j_o_o_fused)
s[matmul].pragma(matmul_i_o_o_o, "auto_unroll_max_step", 8)
s[matmul].pragma(matmul_i_o_o_o, "unroll_explicit", True)
s[matmul].vectorize(matmul_j_i)
s[out].vectorize(out_j_i)
"""


def apply_seed_schedule(args):
    """A schedule for ``matmul_add``'s tensors built by running SEED000_BEST."""
    out = args[-1]
    matmul = out.op.input_tensors()[0]
    s = te.create_schedule(out.op)
    exec(SEED000_BEST, {"s": s, "te": te, "matmul": matmul, "out": out})  # our own constant text
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description="seed 000's matmul+bias with its printed schedule")
    ap.add_argument("--n", type=int, default=1024)
    n = ap.parse_args().n
    args = matmul_add(n, n, n, "float32")
    print("Computational DAG:")
    print(sc.ComputeDAG(args))
    s = apply_seed_schedule(args)
    print("Lowered loop program:")
    print(sc.lower(s, args, simple_mode=True))
    t0 = time.perf_counter()
    func = sc.build(s, args, "llvm")
    print(f"built in {time.perf_counter() - t0:.2f} s")
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    out = sc.nd.empty((n, n))
    func(sc.nd.array(a), sc.nd.array(b), sc.nd.array(c), out)
    np.testing.assert_allclose(out.numpy(), a @ b + c, rtol=1e-3)
    ev = func.time_evaluator(func.entry_name, sc.cpu(), number=3, repeat=5)
    ours = float(np.median(ev(a, b, c, out.numpy()).results))
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b + c
    ref = (time.perf_counter() - t0) / 5
    gflop = (2 * n ** 3 + n * n) / 1e9
    print(f"result matches numpy; ours {ours * 1e3:.2f} ms ({gflop / ours:.1f} GFLOP/s), "
          f"numpy {ref * 1e3:.2f} ms ({gflop / ref:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
