"""Step semantics as TVM's auto_scheduler (v0.13): what a step checks, what lowering checks.

    steps (any order TVM accepts) --replay_steps--> State --lower_state (check_compute_locations,
    TVM's InferBound)--> PrimFunc --build--> Module == reference.evaluate

TVM's ComputeAtStep and ComputeRootStep only move a stage (``transform_step.cc``): the
stages attached to it stay attached to its iterators and nothing checks where its readers
are, so a sequence may pass through a state that cannot be lowered and mend it with a later
step.  TVM refuses such a state when it is lowered (InferBound: "cannot find the producer
along the loop nest"); so does ``lower_state`` here, naming the stage, the loop and why.
Checks no later step can undo stay in the step (bad ids; TVM's ComputeInlineStep refuses a
stage other stages are computed at).

Cache stages are named as te's cache_read names them: a second cache of one tensor in
the same scope is ``<name>.d.<scope>`` (``schedule_dataflow_rewrite.cc``).

Stage numbers are given in each test.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.dag import reference
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.dataflow_step import (
    CacheReadStep,
    CacheWriteStep,
    ComputeInlineStep,
    replay_steps,
    step_from_record,
)
from scheduler_core.schedule.schedule_printer import state_to_python
from scheduler_core.schedule.transform_step import (
    ComputeAtStep,
    ComputeRootStep,
    ReorderStep,
    SplitStep,
)
from tests.scheduler_core.test_random_schedules import check_state, get_dag, random_inputs


def _builds_and_matches(name: str, steps: list):
    """Replay ``steps`` (also from their records), lower, build and compare with numpy."""
    dag = get_dag(name)
    state = replay_steps(dag, steps)
    again = replay_steps(dag, [step_from_record(s.to_record()) for s in steps])
    assert str(again) == str(state)
    inputs = random_inputs(dag, np.random.default_rng(0))
    check_state(dag, state, inputs, reference.evaluate(dag, inputs))
    return state


def _refused_at_lowering(name: str, steps: list, match: str) -> None:
    """Every step applies; lowering the final state raises LoweringError matching ``match``."""
    state = replay_steps(get_dag(name), steps)
    with pytest.raises(LoweringError, match=match):
        lower_state(state)


# -- compute_root (conv2d_nchw stages: 0 data, 1 pad, 2 kernel, 3 conv2d, 4 bias, 5 bias_relu)

def test_compute_root_keeps_the_stages_attached_to_it():
    """pad at conv2d.x, conv2d at bias_relu.y, then conv2d back to root: pad stays at conv2d.x."""
    state = _builds_and_matches("conv2d_nchw", [ComputeAtStep(3, 5, 2), ComputeAtStep(1, 3, 3),
                                                 ComputeRootStep(3)])
    assert state.stages[3].compute_at == "root"
    assert state.stages[1].compute_at == "iter" and state.stages[1].attach == (3, "x")


def test_compute_root_while_a_producer_is_still_attached_at_its_consumer():
    """conv2d and pad at bias_relu.y; compute_root(conv2d) leaves pad inside bias_relu.y with
    conv2d (now at root) reading it (ScheduleError at the step before); a later compute_at
    of pad into conv2d mends it, as in TVM."""
    steps = [ComputeAtStep(3, 5, 2), ComputeAtStep(1, 5, 2), ComputeRootStep(3), ComputeAtStep(1, 3, 3)]
    _refused_at_lowering("conv2d_nchw", steps[:3], "pad is computed at bias_relu.y but conv2d reads it outside")
    state = _builds_and_matches("conv2d_nchw", steps)
    assert state.stages[1].attach == (3, "x")


# -- compute_at a cache stage before its consumer is placed ------------------------------
# matmul: 0 A, 1 B, 2 matmul; CHW -> 0 A, 1 B, 2 matmul.local, 3 matmul;
# CHR(A, shared) -> 0 A, 1 A.shared, 2 B, 3 matmul.local, 4 matmul;
# CHR(A.shared, local) -> 0 A, 1 A.shared, 2 A.shared.local, 3 B, 4 matmul.local, 5 matmul

MATMUL_CACHES = [CacheWriteStep(2, "local"), CacheReadStep(0, "shared", (2,)), CacheReadStep(1, "local", (3,)),
                 SplitStep(4, 2, 9, (3,), True)]


def test_compute_at_of_a_cache_stage_before_its_reader_is_placed():
    """A.shared at matmul.local.k.0 while its reader A.shared.local is still at root (the
    order of TVM's test_cache_read_write; ScheduleError at the step before), then
    A.shared.local at matmul.local.k.1 and matmul.local (a cache_write stage) at matmul.j.0,
    after the stages computed at its loops."""
    steps = MATMUL_CACHES + [ComputeAtStep(1, 4, 2)]
    _refused_at_lowering("matmul", steps, "A.shared is computed at matmul.local.k.0 but A.shared.local "
                                          "reads it outside that loop")
    steps += [ComputeAtStep(2, 4, 3), SplitStep(5, 1, 24, (8,), True), ComputeAtStep(4, 5, 1)]
    state = _builds_and_matches("matmul", steps)
    assert [(st.name, st.attach) for st in state.stages if st.compute_at == "iter"] == [
        ("A.shared", (4, "k.0")), ("A.shared.local", (4, "k.1")), ("matmul.local", (5, "j.0"))]
    func = str(lower_state(state))
    assert "storage_scope = shared" in func and "matmul_local" in func


def test_tvm_cache_read_write_order_on_a_conv_with_padding():
    """TVM's test_cache_read_write order on conv2d_nchw: cache_write conv2d, its cache stage at
    conv2d.x, two-level cache_read of pad, then pad.global at conv2d.global.y before its
    reader pad.global.shared is placed (at conv2d.global.rc).  Stages: CHW -> 3 conv2d.global,
    4 conv2d; CHR(pad) -> 2 pad.global; CHR(pad.global) -> 3 pad.global.shared,
    5 conv2d.global, 6 conv2d."""
    steps = [CacheWriteStep(3, "global"), ComputeAtStep(3, 4, 3), CacheReadStep(1, "global", (3,)),
             CacheReadStep(2, "shared", (4,)), ComputeAtStep(2, 5, 2)]
    _refused_at_lowering("conv2d_nchw", steps, "pad.global is computed at conv2d.global.y but "
                                               "pad.global.shared reads it outside that loop")
    state = _builds_and_matches("conv2d_nchw", steps + [ComputeAtStep(3, 5, 4)])
    assert [(st.name, st.attach) for st in state.stages if st.compute_at == "iter"] == [
        ("pad.global", (5, "y")), ("pad.global.shared", (5, "rc")), ("conv2d.global", (6, "x"))]


def test_compute_at_an_inlined_stage_is_refused_at_lowering_and_mended_by_compute_root():
    """softmax (0 A, 1 row_max, 2 exp, 3 row_sum, 4 softmax): exp inlined, then row_max at
    exp.i (an inlined stage keeps its loops, as in TVM); lowering refuses it while exp is
    inlined, compute_root(exp) brings the loop back."""
    steps = [ComputeInlineStep(2), ComputeAtStep(1, 2, 0)]
    _refused_at_lowering("softmax", steps, "row_max is computed at exp.i but exp is inlined")
    state = _builds_and_matches("softmax", steps + [ComputeRootStep(2)])
    assert state.stages[1].attach == (2, "i") and state.stages[2].compute_at == "root"


# -- what is still refused ---------------------------------------------------------------

def test_inlining_a_stage_with_attached_stages_is_refused_at_the_step():
    """TVM's ComputeInlineStep checks this eagerly: row_max at exp.i, then inline exp."""
    state = replay_steps(get_dag("softmax"), [ComputeAtStep(1, 2, 0)])
    with pytest.raises(ScheduleError, match="other stages are computed at its loops"):
        ComputeInlineStep(2).apply(state)


def test_a_reader_outside_the_producers_loop_is_refused_at_lowering():
    """softmax: exp at softmax.j while row_sum (at root) reads exp."""
    _refused_at_lowering("softmax", [ComputeAtStep(2, 4, 1)],
                         "exp is computed at softmax.j but row_sum reads it outside that loop")


def test_a_reader_moved_out_by_a_later_reorder_is_refused_at_lowering():
    """row_sum at softmax.j, exp at softmax.i, then softmax's loops swapped."""
    _refused_at_lowering("softmax", [ComputeAtStep(3, 4, 1), ComputeAtStep(2, 4, 0), ReorderStep(4, (1, 0))],
                         "exp is computed at softmax.i but row_sum reads it outside")


def test_an_attach_cycle_is_refused_at_lowering():
    """No step sequence makes one (compute_at needs the target to read the stage); a State
    built by hand with row_sum at softmax.i and softmax at row_sum.i is still refused."""
    state = replay_steps(get_dag("softmax"), [ComputeAtStep(3, 4, 0)])
    state = state.with_stage(4, replace(state.stages[4], compute_at="iter", attach=(3, "i")))
    with pytest.raises(LoweringError, match=r"cycle: row_sum at softmax\.i, softmax at row_sum\.i"):
        lower_state(state)


@pytest.mark.parametrize("step", [ComputeAtStep(9, 4, 0), ComputeAtStep(2, 4, 5), ComputeAtStep(0, 4, 0),
                                  ComputeAtStep(4, 4, 0), ComputeRootStep(0)])
def test_bad_ids_and_non_compute_stages_are_refused_at_the_step(step):
    with pytest.raises(ScheduleError):
        step.apply(replay_steps(get_dag("softmax"), []))


def test_scan_time_loops_out_of_order_are_refused_at_lowering_and_mended_by_a_reorder():
    """cumsum_scan (4 scan): the time loop split, the pieces swapped (lowering refuses), then
    swapped back."""
    steps = [SplitStep(4, 0, 8, (2,), True), ReorderStep(4, (1, 0))]
    _refused_at_lowering("cumsum_scan", steps,
                         r"time loops of scan scan run out of order \(scan\.idx\.1, scan\.idx\.0\)")
    _builds_and_matches("cumsum_scan", steps + [ReorderStep(4, (1, 0))])


# -- cache stage names -------------------------------------------------------------------

def test_two_cache_reads_of_one_tensor_get_tvms_unique_names():
    """softmax: A read by row_max (1) and exp (2); cache_read(A, shared, [row_max]) gives
    A.shared, then cache_read(A, shared, [exp]) gives A.d.shared (te's cache_read).  Each
    new stage goes right after A: 0 A, 1 A.d.shared, 2 A.shared, 3 row_max, 4 exp, ..."""
    steps = [CacheReadStep(0, "shared", (1,)), CacheReadStep(0, "shared", (3,))]
    state = _builds_and_matches("softmax", steps)
    names = [st.name for st in state.stages]
    assert names[:3] == ["A", "A.d.shared", "A.shared"]
    assert len(set(names)) == len(names)
    assert state.stage_index("A.d.shared") == 1
    code = state_to_python(state)
    assert 'A_shared = s.cache_read(A, "shared", [row_max])' in code
    assert 'A_d_shared = s.cache_read(A, "shared", [exp])' in code
    # Both buffers exist, under their own names.
    func = str(lower_state(state))
    assert "A_shared" in func and "A_d_shared" in func


def test_cache_read_of_a_cache_stage_and_a_third_cache_read():
    """matmul (0 A, 1 B, 2 matmul): A.shared, then A.shared.local and A.shared.shared,
    caches of the cache stage (no collision: a scope is added to A.shared's name)."""
    state = _builds_and_matches("matmul", [CacheReadStep(0, "shared", (2,)), CacheReadStep(1, "local", (3,)),
                                           CacheReadStep(1, "shared", (2,))])
    assert [st.name for st in state.stages] == ["A", "A.shared", "A.shared.shared", "A.shared.local", "B",
                                                "matmul"]


def test_three_cache_reads_of_one_tensor_in_one_scope():
    """softmax: A cached in local for row_max (A.local), for exp (A.d.local), A.local cached
    again (A.local.local), and A cached a third time, for A.local (A.d.d.local)."""
    dag = get_dag("softmax")
    state = replay_steps(dag, [CacheReadStep(0, "local", (1,)), CacheReadStep(0, "local", (3,))])
    # 0 A, 1 A.d.local (exp's), 2 A.local (row_max's), 3 row_max, 4 exp, ...
    state = CacheReadStep(2, "local", (3,)).apply(state)  # cache A.local for row_max: A.local.local
    state = CacheReadStep(0, "local", (2,)).apply(state)  # A again, read by A.local: A.d.d.local
    assert [st.name for st in state.stages[:5]] == ["A", "A.d.d.local", "A.d.local", "A.local",
                                                    "A.local.local"]
    inputs = random_inputs(dag, np.random.default_rng(0))
    check_state(dag, state, inputs, reference.evaluate(dag, inputs))


def test_two_cache_writes_of_one_stage_get_unique_names():
    """matmul: cache_write twice.  te names both ``matmul.local``; here the second is
    ``matmul.d.local`` (cache_read's rule), so stage names stay unique."""
    state = _builds_and_matches("matmul", [CacheWriteStep(2, "local"), CacheWriteStep(3, "local")])
    assert [st.name for st in state.stages] == ["A", "B", "matmul.local", "matmul.d.local", "matmul"]
    code = state_to_python(state)
    assert 'matmul_d_local = s.cache_write(matmul, "local")' in code


def test_inlining_stops_where_the_expression_would_grow_too_deep():
    """A chain of element-wise stages inlines until the expression it builds would pass
    MAX_INLINED_DEPTH (the walks over expressions recurse); the stages left at root split the
    chain into pieces, and the program still matches numpy."""
    from scheduler_core import te
    from scheduler_core.dag.compute_dag import ComputeDAG
    from scheduler_core.schedule.dataflow_step import MAX_INLINED_DEPTH, inlined_depth
    from scheduler_core.schedule.loop_state import State

    n = 120
    A = te.placeholder((16,), name="A")
    t = A
    for k in range(n):
        t = te.compute((16,), lambda i, t=t: t[i] * te.const(0.5, "float32") + te.const(1.0, "float32"),
                       name=f"C{k}")
    dag = ComputeDAG([A, t])
    state, refused = State.from_dag(dag), []
    for sid in range(n, 0, -1):  # as the sketch rule goes: from the output's producer back
        if sid == n:
            continue  # the output
        try:
            state = ComputeInlineStep(sid).apply(state)
        except ScheduleError as e:
            assert "levels deep (limit" in str(e)
            refused.append(sid)
    assert refused and all(inlined_depth(state, s) > MAX_INLINED_DEPTH for s in refused)
    roots = [s for s in range(1, n + 1) if state.stages[s].compute_at == "root"]
    assert 2 <= len(roots) <= n // 10  # pieces of about MAX_INLINED_DEPTH / 4 stages
    x = np.random.default_rng(0).standard_normal(16).astype("float32")
    check_state(dag, state, [x], reference.evaluate(dag, [x]))
