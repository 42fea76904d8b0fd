"""Layout rewrite of layout-free placeholders (seed 000's auto_scheduler_layout_transform)."""

import importlib.util
from pathlib import Path

import numpy as np

import scheduler_core as sc
from scheduler_core.dag.reference import evaluate
from scheduler_core.driver.program import program_from_state
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


FUSED_MATMUL = """
i, j, k = tuple(matmul.op.axis) + tuple(matmul.op.reduce_axis)
i0, i1 = s[matmul].split(i, factor=8)
j0, j1 = s[matmul].split(j, factor=16)
k0, k1 = s[matmul].split(k, factor=4)
s[matmul].reorder(i0, j0, k0, i1, k1, j1)
f = s[matmul].fuse(i0, j0)
s[matmul].parallel(f)
s[matmul].vectorize(j1)
"""


def _fused_schedule(text: str):
    ex = _seed_example()
    args = ex.matmul_add(64, 32, 48, "float32")  # A 64x32, B 32x48
    out = args[-1]
    s = sc.te.create_schedule(out.op)
    exec(text, {"s": s, "matmul": out.op.input_tensors()[0]})  # the constant texts of this file
    return s, args


def _agrees_with_numpy(state, args) -> None:
    f = sc.build(state, args, "llvm")
    rng = np.random.default_rng(0)
    a, b, c = rng.random((64, 32), dtype=np.float32), rng.random((32, 48), dtype=np.float32), \
        rng.random((64, 48), dtype=np.float32)
    out = np.empty((64, 48), np.float32)
    f(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_fused_loops_read_b_in_the_order_of_the_iterators_they_fused():
    # TVM expands a fused iterator into its parts: B[k, j] is read by j0 (inside i0@j0), k0, k1, j1
    s, args = _fused_schedule(FUSED_MATMUL)
    state = apply_layout_rewrite(s.state)
    layout = next(st for st in state.stages if st.name == "B.layout")
    assert [int(ax.dom_extent.value) for ax in layout.op.axis] == [3, 8, 4, 16]  # j0, k0, k1, j1
    assert "B_layout[ramp(" in str(sc.lower(state, args))
    _agrees_with_numpy(state, args)


def test_nested_fuse_is_expanded_and_a_split_fused_iterator_is_left_alone():
    nested = FUSED_MATMUL.replace("k0, i1, k1, j1", "i1, k0, k1, j1").replace(
        "s[matmul].parallel(f)\n", "g = s[matmul].fuse(f, i1)\ns[matmul].parallel(g)\n")
    s, args = _fused_schedule(nested)
    state = apply_layout_rewrite(s.state)
    assert [int(ax.dom_extent.value) for st in state.stages if st.name == "B.layout"
            for ax in st.op.axis] == [3, 8, 4, 16]
    _agrees_with_numpy(state, args)
    split_again = FUSED_MATMUL + "f0, f1 = s[matmul].split(f, factor=2)\n"
    s, args = _fused_schedule(split_again)
    state = apply_layout_rewrite(s.state)
    assert all(st.name != "B.layout" for st in state.stages)
    _agrees_with_numpy(state, args)


def test_pre_transformed_program_reads_b_packed_once_and_matches_numpy():
    """REWRITE_FOR_PRE_TRANSFORMED: no transform stage; B_layout is an argument, filled by
    running the LayoutTransform's own compute (here: the numpy reference evaluator)."""
    ex = _seed_example()
    n = 128
    args = ex.matmul_add(n, n, n, "float32")
    state = ex.apply_seed_schedule(args).state
    per_call = program_from_state(state, "llvm")
    pre = program_from_state(state, "llvm", pre_transformed=True)
    assert not per_call.layout_transforms and len(pre.layout_transforms) == 1
    (lt,) = pre.layout_transforms
    assert lt.source.name == "B" and lt.packed.name == "B.layout"
    signature = pre.lowered.splitlines()[0]
    assert "B_layout: Buffer" in signature and "B: Buffer" not in signature
    assert "allocate(B_layout" not in pre.lowered and "allocate(B_layout" in per_call.lowered
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    (packed,) = evaluate(sc.ComputeDAG([lt.source, lt.layout]), [b])
    assert packed.shape == tuple(int(s) for s in lt.packed.shape) and sorted(packed.ravel()) == sorted(b.ravel())
    out = np.empty((n, n), np.float32)
    pre.build()(a, packed, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)
