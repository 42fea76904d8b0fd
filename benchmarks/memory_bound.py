"""Benchmark of memory-bound kernels: row softmax and layer norm vs numpy (and PyTorch).

Softmax 1024x1024 float32 (max, exp-sum, normalize; TVM topi's four stages) and layer
norm 1024x1024 with hand-written schedules: rows parallel, every inner axis split by 16
and vectorized (row reductions use the vector accumulator of the vectorize pass, exp
goes through libmvec).  numpy (and torch when installed) run in the same process;
only the ratios mean anything on a shared machine.

Also counts, for random schedules (the vectorize annotation of the sketch policy's
initial population and of random split/reorder schedules), how many vectorized loops
lower to vector code and how many fall back to a serial loop.

Usage:  python benchmarks/memory_bound.py [--out benchmarks/results/memory_bound.json]
        [--baseline-vectorize PATH]   (another vectorize.py for the "before" count)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from bench_util import cpu_model, median_time_s  # same folder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.workloads

from scheduler_core import te
from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.build_module import build
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.passes import unroll_loops
from scheduler_core.passes import vectorize as vectorize_mod
from scheduler_core.passes.unroll import const_extent
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, ReorderStep, SplitStep, check_compute_locations
from sketch_rules import SketchPolicyParams, generate_sketches, sample_init_population
from tests.workloads import softmax as softmax_dag

try:  # optional: PyTorch as a second reference
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None


# -- workloads -----------------------------------------------------------------------

def _compute_stages(out) -> list:
    """The compute tensors ``out`` depends on, producers first, ``out`` last."""
    order: list = []

    def visit(t) -> None:
        if any(t is seen for seen in order) or not t.op.input_tensors():
            return
        for producer in t.op.input_tensors():
            visit(producer)
        order.append(t)

    visit(out)
    return order


def softmax(n: int, m: int):
    """Row softmax of A (n, m) float32 as TVM's topi (the test suite's DAG): row max, exp,
    row sum, divide.  Returns ``(args, compute stages)``."""
    args = softmax_dag(n, m)
    return args, _compute_stages(args[-1])


def layer_norm(n: int, m: int, eps: float = 1e-5):
    """Layer norm over the rows of A (n, m) float32 with gamma, beta (m,)."""
    A = te.placeholder((n, m), name="A")
    gamma = te.placeholder((m,), name="gamma")
    beta = te.placeholder((m,), name="beta")
    k1 = te.reduce_axis((0, m), name="k1")
    total = te.compute((n,), lambda i: te.sum(A[i, k1], axis=k1), name="total")
    k2 = te.reduce_axis((0, m), name="k2")
    sq = te.compute((n,), lambda i: te.sum(A[i, k2] * A[i, k2], axis=k2), name="sqsum")
    inv_m = 1.0 / m

    def norm(i, j):
        mean = total[i] * inv_m
        var = sq[i] * inv_m - mean * mean
        return (A[i, j] - mean) * te.rsqrt(var + eps) * gamma[j] + beta[j]

    out = te.compute((n, m), norm, name="layer_norm")
    return [A, gamma, beta, out], [total, sq, out]


def vectorized_rows(tensors_all: list, stages: list, factor: int = 16):
    """Rows parallel, the inner axis of every stage split by ``factor`` and vectorized."""
    s = te.create_schedule(tensors_all[-1].op)
    for t in stages:
        _, inner = s[t].split(s[t].leaf_iter_vars[-1], factor=factor)
        s[t].vectorize(inner)
        s[t].parallel(s[t].leaf_iter_vars[0])
    return s


def fused_softmax(n: int, m: int, factor: int = 16):
    """Softmax with the row stages attached to the output's row loop (one pass per row
    over cached data): row max, exp, row sum at the row of the output; rows parallel."""
    args, (mx, e, sm, out) = softmax(n, m)
    s = te.create_schedule(out.op)
    i = s[out].leaf_iter_vars[0]
    _, ji = s[out].split(s[out].leaf_iter_vars[1], factor=factor)
    s[out].vectorize(ji)
    s[out].parallel(i)
    for t in (mx, e, sm):
        s[t].compute_at(s[out], i)
        _, inner = s[t].split(s[t].leaf_iter_vars[-1], factor=factor)
        s[t].vectorize(inner)
    return s, args


def bench(n: int = 1024, m: int = 1024) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, m)).astype("float32")
    rows = {}

    def np_softmax():
        x = np.exp(a - a.max(1, keepdims=True))
        return x / x.sum(1, keepdims=True)

    ref = np_softmax()
    variants = {}
    args, stages = softmax(n, m)
    variants["softmax_root_stages"] = build(vectorized_rows(args, stages), args)
    s, fargs = fused_softmax(n, m)
    variants["softmax_fused_rows"] = build(s, fargs)
    t_np = median_time_s(np_softmax)
    row = {"numpy_ms": t_np * 1e3}
    if torch is not None:
        ta = torch.from_numpy(a)
        row["torch_ms"] = median_time_s(lambda: torch.softmax(ta, dim=1)) * 1e3
        row["torch_threads"] = torch.get_num_threads()
    for name, mod in variants.items():
        o = np.zeros_like(a)
        mod(a, o)
        np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-7)
        t = median_time_s(lambda mod=mod, o=o: mod(a, o))
        row[f"{name}_ms"] = t * 1e3
        row[f"{name}_speedup_vs_numpy"] = t_np / t
        if "torch_ms" in row:
            row[f"{name}_ratio_torch_over_ours"] = row["torch_ms"] / (t * 1e3)
        row[f"{name}_uses_libmvec_exp"] = "@_ZGV" in mod.get_source("ll")
    rows[f"softmax_{n}x{m}"] = row

    g = rng.standard_normal(m).astype("float32")
    b = rng.standard_normal(m).astype("float32")

    def np_layer_norm():
        mean = a.mean(1, keepdims=True)
        var = a.var(1, keepdims=True)
        return (a - mean) / np.sqrt(var + 1e-5) * g + b

    args, stages = layer_norm(n, m)
    mod = build(vectorized_rows(args, stages), args)
    o = np.zeros_like(a)
    mod(a, g, b, o)
    np.testing.assert_allclose(o, np_layer_norm(), rtol=1e-3, atol=1e-3)
    t_np = median_time_s(np_layer_norm)
    t = median_time_s(lambda: mod(a, g, b, o))
    row = {"numpy_ms": t_np * 1e3, "ours_ms": t * 1e3, "speedup_vs_numpy": t_np / t}
    if torch is not None:
        ta, tg, tb = torch.from_numpy(a), torch.from_numpy(g), torch.from_numpy(b)
        tt = median_time_s(lambda: torch.nn.functional.layer_norm(ta, (m,), tg, tb, 1e-5)) * 1e3
        row["torch_ms"] = tt
        row["ratio_torch_over_ours"] = tt / (t * 1e3)
    rows[f"layer_norm_{n}x{m}"] = row
    return rows


# -- fallback counts -------------------------------------------------------------------

def _count(func: T.PrimFunc, vec_module, counts: Counter) -> None:
    """Count the vectorized loops of ``func`` that ``vec_module.vectorize_loops`` turns
    into vector code (the loop var disappears) or keeps as a serial loop."""
    for s in T.walk_stmts(unroll_loops(func.body)):
        if isinstance(s, T.For) and s.kind == "vectorized" and (const_extent(s) or 0) > 1:
            out = vec_module.vectorize_loops(s)
            fell = any(isinstance(x, T.For) and x.loop_var is s.loop_var for x in T.walk_stmts(out))
            counts["fallback" if fell else "vector"] += 1


class _Policy:
    """What the sketch rules read from a policy: task, params, rng."""

    def __init__(self, task: Task, seed: int):
        self.task = task
        self.params = SketchPolicyParams()
        self.rng = np.random.default_rng(seed)


def _random_vectorized(state: State, rng: np.random.Generator) -> State:
    """A random schedule in the style of the random-schedule sweeps: for each stage, random
    (often non-divisible) splits of its axes, a random reorder, vectorize the innermost."""
    for sid, st in enumerate(state.stages):
        if st.op_type == "placeholder":
            continue
        for _ in range(2):
            st = state.stages[sid]
            cands = [k for k, it in enumerate(st.iters) if (it.const_extent or 0) > 1]
            if not cands:
                break
            k = cands[int(rng.integers(len(cands)))]
            ext = st.iters[k].const_extent
            try:
                state = check_compute_locations(
                    SplitStep(sid, k, ext, (int(rng.integers(1, min(ext, 32) + 1)),), True).apply(state))
            except (ScheduleError, LoweringError):
                continue
        st = state.stages[sid]
        order = tuple(int(x) for x in rng.permutation(len(st.iters)))
        if rng.random() < 0.3:
            try:
                state = ReorderStep(sid, order).apply(state)
            except ScheduleError:
                pass
        try:
            state = AnnotationStep(sid, len(state.stages[sid].iters) - 1, "vectorize").apply(state)
        except ScheduleError:
            pass
    return state


def fallback_counts(baseline_path: str | None, samples: int = 60) -> dict:
    """Per workload and source (sketch policy init population / random splits), the number
    of vectorized loops that became vector code and that fell back, now and (with a
    baseline vectorize.py) before."""
    baseline = None
    if baseline_path:
        spec = importlib.util.spec_from_file_location("baseline_vectorize", baseline_path)
        assert spec is not None and spec.loader is not None
        baseline = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(baseline)
    dags = {"softmax_64x100": softmax(64, 100)[0], "layer_norm_32x100": layer_norm(32, 100)[0]}
    out: dict = {}
    for name, tensors in dags.items():
        dag = ComputeDAG(tensors)
        task = Task(dag, dag.workload_key, Target.parse("llvm"), HardwareParams(2, 32, 64, 64))
        policy = _Policy(task, 1)
        sketch_states = sample_init_population(policy, generate_sketches(policy), samples,
                                               np.random.default_rng(1))
        rng = np.random.default_rng(2)
        random_states = [_random_vectorized(State.from_dag(dag), rng) for _ in range(samples)]
        for source, states in (("sketch_policy", sketch_states), ("random_splits", random_states)):
            now, before = Counter(), Counter()
            for st in states:
                try:
                    func = lower_state(st)
                except (LoweringError, ScheduleError):
                    continue
                _count(func, vectorize_mod, now)
                if baseline is not None:
                    _count(func, baseline, before)
            row = {"after": dict(now)}
            if baseline is not None:
                row["before"] = dict(before)
            out[f"{name}/{source}"] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/memory_bound.json")
    ap.add_argument("--baseline-vectorize", default=None,
                    help="path of another vectorize.py to count fallbacks 'before'")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--m", type=int, default=1024)
    args = ap.parse_args()
    result = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "note": "shared machine (other jobs running): compare ratios within this run only",
        "torch": None if torch is None else torch.__version__,
        "numpy": np.__version__,
        "kernels": bench(args.n, args.m),
        "vectorize_fallbacks": fallback_counts(args.baseline_vectorize),
    }
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
