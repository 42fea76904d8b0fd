"""Random tiled schedules of a matmul and in-process timings, for the cost-model tests.

    State.from_dag(dag) --tiled_matmul_state(rng)--> State (split i/j/k, reorder,
        parallel outer, vectorize inner, auto_unroll pragma)
    State --sc.build + time_evaluator--> seconds per call

Every choice comes from the ``numpy.random.Generator`` passed in.  The states are
legal by construction (divisor tile sizes, fixed loop order templates), so all of
them build; their speeds span about two orders of magnitude, which is what a
ranking test needs.
"""

from __future__ import annotations

import numpy as np

import scheduler_core as sc
from scheduler_core import ComputeDAG
from scheduler_core.ir.simplify import const_value
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, FuseStep, PragmaStep, ReorderStep, SplitStep
from tests.workloads import matmul

# Loop orders over (i0, i1, j0, j1, k0, k1) after splitting i, j and k once each
# (split leaves i0 i1 j0 j1 k0 k1 at positions 0..5).
ORDERS = (
    (0, 2, 4, 1, 5, 3),  # i0 j0 k0 i1 k1 j1: tiled, unit-stride inner j
    (0, 2, 4, 5, 1, 3),  # i0 j0 k0 k1 i1 j1
    (0, 1, 2, 3, 4, 5),  # i0 i1 j0 j1 k0 k1: reduction innermost
    (0, 2, 1, 3, 4, 5),  # i0 j0 i1 j1 k0 k1
    (0, 4, 1, 5, 2, 3),  # i0 k0 i1 k1 j0 j1
    (2, 0, 4, 5, 1, 3),  # j0 i0 k0 k1 i1 j1
)


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def matmul_dag(n: int = 64) -> ComputeDAG:
    return ComputeDAG(matmul(n, n, n))


def tiled_matmul_state(dag: ComputeDAG, rng: np.random.Generator, parallel: bool = True):
    """A random legal schedule of the matmul stage (stage 2) of ``dag``.

    parallel: whether the outer loop may be parallelized (timings of parallel
    kernels of a few microseconds swing with the machine's load, so the
    measured ranking test leaves them out).
    """
    n = const_value(dag.tensors[0].shape[0])
    s = State.from_dag(dag)
    divs = _divisors(n)
    fi, fj, fk = (int(rng.choice(divs[:-1] if len(divs) > 1 else divs)) for _ in range(3))
    s = SplitStep(2, 0, n, (fi,), True).apply(s)
    s = SplitStep(2, 2, n, (fj,), True).apply(s)
    s = SplitStep(2, 4, n, (fk,), True).apply(s)
    order = ORDERS[int(rng.integers(len(ORDERS)))]
    s = ReorderStep(2, order).apply(s)
    names = [s.stages[2].iters[k].name for k in range(6)]
    if rng.random() < 0.6 and names[-1].startswith("j"):
        s = AnnotationStep(2, 5, "vectorize").apply(s)
    if not parallel:
        pass
    elif rng.random() < 0.5 and names[0][0] != "k" and names[1][0] != "k":
        s = FuseStep(2, (0, 1)).apply(s)
        s = AnnotationStep(2, 0, "parallel").apply(s)
    elif rng.random() < 0.5 and names[0][0] != "k":
        s = AnnotationStep(2, 0, "parallel").apply(s)
    if rng.random() < 0.5:
        s = PragmaStep(2, 0, f"auto_unroll_max_step${int(rng.choice([16, 64]))}").apply(s)
    return s


def measure_in_process(dag: ComputeDAG, states: list, min_repeat_ms: float = 5.0,
                       repeat: int = 5) -> np.ndarray:
    """Seconds per call of each state (the minimum of ``repeat`` timings), float64 [n]."""
    n = const_value(dag.tensors[0].shape[0])
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    costs = []
    for st in states:
        mod = sc.build(st, list(dag.tensors), "llvm")
        timer = mod.time_evaluator(mod.entry_name, sc.cpu(0), number=1, repeat=repeat,
                                   min_repeat_ms=min_repeat_ms)
        costs.append(min(timer(a, b, c).results))
    return np.asarray(costs)
