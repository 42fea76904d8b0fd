"""Cost of the run-time index checks of gathers (clamp-and-flag) on embedding lookups.

An embedding lookup ``O[i, j] = W[ids[i], j]`` reads rows of a table at indices taken from
the data; lowering wraps ``ids[i]`` in ``CheckedIndex`` (clamped to the table, flagged when
out of range).  This times the same program with the check and with it stripped from the
lowered loop program (``CheckedIndex(v, n)`` -> ``v``, the rest identical: same passes, same
code generation), in one process, back to back in 9 rounds (the overhead is the median of the 9 paired ratios),
and numpy's ``W[ids]`` (``np.take``) beside
them as the baseline a user would otherwise call.  Schedules: the row split by 16 (or 8) and
vectorized, rows parallel (and serial, for the check's own instructions without the thread
pool).  Shapes: BERT's vocabulary (30522 x 768) with 128 and 4096
tokens, and a small table that stays in cache (1000 x 64, 4096 tokens).

Usage:  python benchmarks/gather_checks.py [--out benchmarks/results/gather_checks.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_isa, cpu_model, median_time_s  # same folder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scheduler_core as sc  # noqa: E402
from scheduler_core import te  # noqa: E402
from scheduler_core.codegen import compile_primfunc  # noqa: E402
from scheduler_core.driver.pipeline import run_passes  # noqa: E402
from scheduler_core.ir import expr as E  # noqa: E402
from scheduler_core.ir import expr_functor as EF  # noqa: E402
from scheduler_core.ir import tir as T  # noqa: E402
from scheduler_core.ir.stmt_functor import map_stmt, stmt_exprs  # noqa: E402
from scheduler_core.runtime.module import Module  # noqa: E402

ROUNDS = 9  # paired checked/unchecked measurements per case; the overhead is the median of their ratios
SHAPES = [(30522, 768, 128), (30522, 768, 4096), (1000, 64, 4096)]  # (rows, width, tokens)


def _strip_checks(func):
    """The lowered ``func`` with every ``CheckedIndex(v, n)`` replaced by ``v``."""
    def fn(n):
        return n.value if isinstance(n, E.CheckedIndex) else None
    return map_stmt(func.body, f_expr=lambda e: EF.transform(e, fn))


def programs(rows: int, width: int, tokens: int, lanes: int, parallel: bool = True):
    W = te.placeholder((rows, width), name="W")
    ids = te.placeholder((tokens,), name="ids", dtype="int32")
    O = te.compute((tokens, width), lambda i, j: W[ids[i], j], name="O")
    s = te.create_schedule(O.op)
    i, j = s[O].op.axis
    _, ji = s[O].split(j, lanes)
    s[O].vectorize(ji)
    if parallel:
        s[O].parallel(i)
    lowered = sc.lower(s, [W, ids, O], name="embedding")
    passed = run_passes(lowered)
    assert any(isinstance(n, E.CheckedIndex) for n in _exprs(passed.body)), "no check emitted"
    checked = Module.from_compiled(compile_primfunc(passed, "llvm"))
    unchecked_func = type(passed)(passed.name, passed.params, passed.scalar_params, _strip_checks(passed), passed.attrs)
    assert not any(isinstance(n, E.CheckedIndex) for n in _exprs(unchecked_func.body))
    unchecked = Module.from_compiled(compile_primfunc(unchecked_func, "llvm"))
    return checked, unchecked


def _exprs(stmt):
    for st in T.walk_stmts(stmt):
        for e in stmt_exprs(st):
            yield from EF.walk(e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/gather_checks.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows_out = []
    for rows, width, tokens in SHAPES:
        for lanes, parallel in ((16, True), (8, True), (16, False)):
            checked, unchecked = programs(rows, width, tokens, lanes, parallel)
            w = rng.random((rows, width), dtype="float32")
            ids = rng.integers(0, rows, tokens).astype("int32")
            out_c = np.zeros((tokens, width), "float32")
            out_u = np.zeros((tokens, width), "float32")
            call_c = checked.prebind(w, ids, out_c)
            call_u = unchecked.prebind(w, ids, out_u)
            call_c()
            call_u()
            want = np.take(w, ids, axis=0)
            assert np.array_equal(out_c, want) and np.array_equal(out_u, want)
            out_np = np.empty_like(want)

            def take(w=w, ids=ids, out_np=out_np):
                np.take(w, ids, axis=0, out=out_np)
            times: dict = {"checked": [], "unchecked": [], "numpy_take": []}
            ratios = []
            for _ in range(ROUNDS):  # back to back, alternating: drifts of a shared machine hit both alike
                tc = median_time_s(call_c, min_s=0.05, repeat=5)
                tu = median_time_s(call_u, min_s=0.05, repeat=5)
                times["checked"].append(tc)
                times["unchecked"].append(tu)
                ratios.append(tc / tu)
                times["numpy_take"].append(median_time_s(take, min_s=0.05, repeat=5))
            med = {k: float(np.median(v)) for k, v in times.items()}
            row = {"rows": rows, "width": width, "tokens": tokens, "lanes": lanes, "parallel": parallel,
                   "checked_us": med["checked"] * 1e6, "unchecked_us": med["unchecked"] * 1e6,
                   "numpy_take_us": med["numpy_take"] * 1e6,
                   "check_overhead": float(np.median(ratios)) - 1.0,
                   "check_overhead_rounds": [r - 1.0 for r in ratios],
                   "checked_vs_numpy": med["numpy_take"] / med["checked"]}
            rows_out.append(row)
            how = "parallel" if parallel else "serial"
            print(f"{rows}x{width} table, {tokens} tokens, {lanes} lanes, {how}: checked {row['checked_us']:.1f} us, "
                  f"unchecked {row['unchecked_us']:.1f} us ({100 * row['check_overhead']:+.1f}%), "
                  f"numpy take {row['numpy_take_us']:.1f} us ({row['checked_vs_numpy']:.2f}x)", flush=True)
    result = {"benchmark": "gather_checks", "cpu": cpu_model(), "isa": cpu_isa(), "threads": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "worst_check_overhead": max(r["check_overhead"] for r in rows_out), "rows": rows_out}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"worst check overhead {100 * result['worst_check_overhead']:+.1f}%  -> {args.out}")


if __name__ == "__main__":
    main()
