"""Small constant loops are unrolled on the CPU without a pragma (SMALL_LOOP_STEPS).

LLVM's unroller is off in the CPU build, so a register tile of a stage whose
``auto_unroll_max_step`` is 0 stayed a loop nest over a local buffer (accumulators in
memory: a 4x4 conv2d tile ran 4x slower than unrolled).  The CPU pipeline now unrolls
nests of at most SMALL_LOOP_STEPS steps, as LLVM's full unrolling would.
"""

import numpy as np

from scheduler_core import te
from scheduler_core.driver.build_module import build, lower
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from scheduler_core.passes import SMALL_LOOP_STEPS, unroll_loops
from tests import workloads as W

RNG = np.random.default_rng(5)


def _nest(outer: int, inner: int, kind: str = "serial", pragma: int | None = None) -> T.Stmt:
    C = T.Buffer("C", "float32", (outer * inner,))
    i, j = E.Var("i"), E.Var("j")
    body = T.For(j, E.const(0), E.const(inner), kind, T.Store(C, i * inner + j, E.const(1.0)))
    ann = {} if pragma is None else {"auto_unroll_max_step": pragma}
    return T.For(i, E.const(0), E.const(outer), "serial", body, ann)


def _loops(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.For)]


def _stores(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.Store)]


def test_small_nests_unroll_and_larger_ones_keep_their_outer_loop():
    assert SMALL_LOOP_STEPS == 16
    s = unroll_loops(_nest(4, 4), small_loop_steps=16)
    assert not _loops(s) and len(_stores(s)) == 16
    s = unroll_loops(_nest(4, 8), small_loop_steps=16)  # inner 8 unrolled, 4 x 8 = 32 > 16
    assert [loop.extent.value for loop in _loops(s)] == [4] and len(_stores(s)) == 8
    assert len(_loops(unroll_loops(_nest(4, 4)))) == 2  # default: only pragmas and explicit


def test_small_loops_unroll_under_a_zero_pragma_and_vector_loops_count_once():
    s = unroll_loops(T.SeqStmt((_nest(2, 3, pragma=0),)), small_loop_steps=16)
    assert not _loops(s) and len(_stores(s)) == 6
    s = unroll_loops(_nest(8, 16, kind="vectorized"), small_loop_steps=16)
    assert [loop.kind for loop in _loops(s)] == ["vectorized"] * 8


def test_register_tile_without_unroll_annotations_is_unrolled_and_exact():
    """conv2d + bias + relu: a 4 x 8 output tile (channels x vectorized row) under the
    reduction, no unroll annotation and no pragma: the built program has no loop over the
    tile's channels left (nor over rx: 3 x 4 steps), and agrees with numpy."""
    args = W.conv2d_nchw(1, 8, 16, 16, 8, 3, 3)
    out = args[-1]
    conv = out.op.input_tensors()[0]
    s = te.create_schedule(out.op)
    n, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=4)
    xo, xi = s[out].split(x, factor=8)
    s[out].reorder(n, fo, y, xo, fi, xi)
    s[out].vectorize(xi)
    s[conv].compute_at(s[out], xo)
    cn, cf, cy, cx = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(cn, rc, ry, rx, cf, cy, cx)
    s[conv].vectorize(cx)
    func = lower(s, args)
    names = {loop.loop_var.name for loop in _loops(func.body)}
    assert {"rc", "ry"} <= names and not names & {"f", "f.1", "rx"}, names
    mod = build(s, args)
    data, kernel, bias = (RNG.standard_normal(tuple(int(d) for d in t.shape)).astype("float32")
                          for t in args[:-1])
    got = np.zeros(tuple(int(d) for d in out.shape), "float32")
    mod(data, kernel, bias, got)
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    ref = np.zeros(got.shape)
    for dy in range(3):
        for dx in range(3):
            ref += np.einsum("nchw,fc->nfhw", p[:, :, dy:dy + 16, dx:dx + 16], kernel[:, :, dy, dx])
    np.testing.assert_allclose(got, np.maximum(ref + bias[None, :, None, None], 0), rtol=1e-4, atol=1e-4)
