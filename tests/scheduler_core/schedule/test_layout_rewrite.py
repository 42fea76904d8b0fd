"""Layout rewrite of layout-free placeholders (seed 000's auto_scheduler_layout_transform)."""

import importlib.util
from pathlib import Path

import numpy as np

import scheduler_core as sc
from scheduler_core.schedule.layout_rewrite import apply_layout_rewrite, has_layout_free_placeholders
from scheduler_core.schedule.loop_state import State
from tests.workloads import matmul


def _seed_example():
    path = Path(__file__).resolve().parents[3] / "examples" / "matmul_schedule.py"
    spec = importlib.util.spec_from_file_location("matmul_schedule_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_seed000_schedule_reads_b_in_tile_order_and_matches_numpy():
    ex = _seed_example()
    n = 128
    args = ex.matmul_add(n, n, n, "float32")
    s = ex.apply_seed_schedule(args)
    assert has_layout_free_placeholders(s.state.dag)
    state = apply_layout_rewrite(s.state)
    text = str(sc.lower(state, args))
    assert "B_layout" in text
    # Inner tile loops walk the rewritten buffer contiguously: a stride-1 vector load.
    assert "B_layout[ramp(" in text and "B[ramp(" not in text.split("B_layout")[-1]
    assert state.transform_steps == s.state.transform_steps  # the rewrite is not a step
    f = sc.build(state, args, "llvm")
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    out = np.empty((n, n), np.float32)
    f(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_no_layout_free_placeholders_is_a_no_op():
    A, B, C = matmul(16, 16, 16)
    dag = sc.ComputeDAG([A, B, C])
    state = State.from_dag(dag)
    assert not has_layout_free_placeholders(dag)
    assert apply_layout_rewrite(state) is state
