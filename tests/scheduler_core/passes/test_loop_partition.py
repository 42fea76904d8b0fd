"""Loop partitioning: the guards of non-divisible splits leave the main part of the loop.

A 6-row register tile of a matmul whose row count is not a multiple of 6 guards every
update with ``likely(row < n)``; ``partition_loops`` splits the row loop where the guard
stops being provably true, so the main part runs unguarded, and the built program still
agrees with numpy.
"""

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.driver.build_module import build, lower
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.passes import partition_loops
from tests import workloads as W

RNG = np.random.default_rng(11)


def _ifs(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.IfThenElse)]


def _loops(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.For)]


def _tiled_matmul(n, m, k, rows, cols=8, parallel=True):
    """C = A @ B with a rows x cols register tile (rows need not divide n), k innermost-but-two."""
    A, B, C = W.matmul(n, m, k)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (kk,) = C.op.reduce_axis
    io, ii = s[C].split(i, factor=rows)
    jo, ji = s[C].split(j, factor=cols)
    s[C].reorder(io, jo, kk, ii, ji)
    if parallel:
        s[C].parallel(io)
    s[C].vectorize(ji)
    return s, [A, B, C]


def _check(s, args, shapes):
    f = build(s, args, "llvm")
    ins = [RNG.standard_normal(sh).astype("float32") for sh in shapes]
    out = np.zeros((shapes[0][0], shapes[1][1]), np.float32)
    f(*ins, out)
    np.testing.assert_allclose(out, ins[0] @ ins[1], rtol=1e-4, atol=1e-4)


def test_the_main_part_of_a_six_row_tile_has_no_guard():
    s, args = _tiled_matmul(50, 16, 24, rows=6)  # 50 = 8 * 6 + 2: i.0 runs 9 times, the last one partly
    func = lower_state(s.state, args)
    raw = func.body
    assert _ifs(raw), "the lowered program guards the tail rows"
    out = partition_loops(raw)
    outer = [lp for lp in _loops(out) if lp.loop_var.name.startswith("i.0")]
    assert [(lp.min.value, lp.extent.value, lp.kind) for lp in outer] == [(0, 8, "parallel"), (8, 1, "parallel")]
    main, tail = outer
    assert not _ifs(main), "rows 0..47 are all inside the matrix: no guard left"
    # the tail's row loop is split again: rows 48, 49 unguarded, rows 50..53 dropped (proved false)
    assert not _ifs(tail)
    tail_rows = [lp for lp in _loops(tail) if lp.loop_var.name.startswith("i.1")]
    assert tail_rows and all((lp.min.value, lp.extent.value) == (0, 2) for lp in tail_rows)  # init, update


@pytest.mark.parametrize("n, rows, parallel", [(50, 6, True), (50, 6, False), (37, 4, True), (7, 6, True),
                                               (1024 + 2, 6, True)])
def test_partitioned_tiles_match_numpy(n, rows, parallel):
    s, args = _tiled_matmul(n, 16, 24, rows=rows, parallel=parallel)
    _check(s, args, [(n, 24), (24, 16)])


def test_a_guard_proved_false_removes_its_statement():
    """37 elements in tiles of 16: the third tile's rows 5..15 are outside; after the passes no
    guard is left at all (rows 0..31 unguarded, 32..36 unguarded in the tail, 37..47 gone)."""
    x = te.placeholder((37,), name="x")
    y = te.compute((37,), lambda i: x[i] * 2.0, name="y")
    s = te.create_schedule(y.op)
    xo, xi = s[y].split(y.op.axis[0], factor=16)
    s[y].parallel(xo)
    func = lower(s, [x, y])  # with the passes
    assert not _ifs(func.body)
    f = build(s, [x, y], "llvm")
    xs = RNG.standard_normal(37).astype("float32")
    ys = np.zeros(37, np.float32)
    f(xs, ys)
    np.testing.assert_allclose(ys, xs * 2)


def test_a_fused_parallel_loop_is_partitioned_through_its_floordiv():
    """rows split by 6 and fused with the column tiles into one parallel loop: the guard reads
    ``floordiv(fused, col_tiles)``, and the main part is the prefix of whole row tiles."""
    A, B, C = W.matmul(26, 16, 8)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=6)  # 26 = 4 * 6 + 2
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(io, jo, ii, ji)
    fused = s[C].fuse(io, jo)  # 5 x 2 = 10 iterations, the last 2 partial
    s[C].parallel(fused)
    func = lower_state(s.state, [A, B, C])
    out = partition_loops(func.body)
    par = [lp for lp in _loops(out) if lp.kind == "parallel"]
    assert [(lp.min.value, lp.extent.value) for lp in par] == [(0, 8), (8, 2)]
    assert not _ifs(par[0])
    _check(s, [A, B, C], [(26, 8), (8, 16)])


def test_a_loop_without_guards_is_the_same_object():
    s, args = _tiled_matmul(48, 16, 24, rows=6)
    func = lower_state(s.state, args)
    assert partition_loops(func.body) is func.body
