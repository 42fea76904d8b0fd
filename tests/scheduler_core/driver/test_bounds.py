"""Belt and braces when compiling: loads and stores provably in bounds, names made C identifiers."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.c_names import c_identifier, c_identifiers, comment_text
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag import reference
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.driver import bounds
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.program import program_from_state
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import Broadcast, BufferLoad, CmpOp, FloatImm, IntImm, Ramp, Select, Var
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from tests import workloads as W
from tests.scheduler_core.test_random_schedules import random_inputs
from tests.workloads import conv2d_nchw, matmul_add

A = T.Buffer("A", "float32", (IntImm(10),))
B = T.Buffer("B", "float32", (IntImm(16),))


def _func(body: T.Stmt) -> T.PrimFunc:
    return T.PrimFunc("f", (A, B), (), body)


def _loop(var: Var, extent: int, body: T.Stmt) -> T.Stmt:
    return T.For(var, IntImm(0), IntImm(extent), "serial", body)


def test_store_past_the_end_is_refused_naming_the_buffer():
    i = Var("i")
    func = _func(_loop(i, 10, T.Store(A, i + 8, FloatImm(0.0))))
    with pytest.raises(LoweringError, match=r"buffer 'A' out of bounds: index \(i \+ 8\) ranges over \[8, 17\]"):
        check_bounds(func)


def test_guarded_store_is_accepted():
    i = Var("i")
    check_bounds(_func(_loop(i, 16, T.IfThenElse(i < 10, T.Store(A, i, FloatImm(0.0)), None, likely=True))))
    # the else branch sees the negated guard: i >= 10 there, so A[i - 10] is fine, A[i] is not
    inner = T.IfThenElse(i < 10, T.Store(A, i, FloatImm(0.0)), T.Store(A, i - 10, FloatImm(1.0)))
    check_bounds(_func(_loop(i, 16, inner)))
    with pytest.raises(LoweringError, match="'A'"):
        check_bounds(_func(_loop(i, 16, T.IfThenElse(i < 10, T.Store(B, i, FloatImm(0.0)),
                                                      T.Store(A, i, FloatImm(1.0))))))


def test_guard_on_a_split_loop_bounds_the_combined_index():
    """``(o*4 + k) < 10`` guards ``A[o*4 + k]`` although o*4 + k alone reaches 11."""
    o, k = Var("o"), Var("k")
    store = T.Store(A, o * 4 + k, BufferLoad(B, o * 4 + k))
    check_bounds(_func(_loop(o, 3, _loop(k, 4, T.IfThenElse(o * 4 + k < 10, store, None, likely=True)))))
    with pytest.raises(LoweringError, match="'A'"):
        check_bounds(_func(_loop(o, 3, _loop(k, 4, store))))


def test_loads_every_lane_of_a_ramp_and_select_branches():
    i = Var("i")
    lanes_ok = T.Store(B, Ramp(i * 4, IntImm(1), 4), BufferLoad(B, Ramp(i * 4, IntImm(1), 4), lanes=4))
    check_bounds(_func(_loop(i, 4, lanes_ok)))  # lanes 0 .. 15 of a 16-element buffer
    lanes_bad = T.Store(B, Ramp(i * 4, IntImm(1), 4), BufferLoad(A, Ramp(i * 4, IntImm(1), 4), lanes=4))
    with pytest.raises(LoweringError, match=r"load from buffer 'A'.*\[0, 15\]"):
        check_bounds(_func(_loop(i, 4, lanes_bad)))
    # a vector predicate guards the store and the loads of its value
    pred = CmpOp("lt", Ramp(i * 4, IntImm(1), 4), Broadcast(IntImm(10), 4, "int32"))
    masked = T.Store(A, Ramp(i * 4, IntImm(1), 4), BufferLoad(A, Ramp(i * 4, IntImm(1), 4), lanes=4), pred)
    check_bounds(_func(_loop(i, 4, masked)))
    # a Select's true branch only loads where its condition holds
    sel = Select(i < 10, BufferLoad(A, i), FloatImm(0.0))
    check_bounds(_func(_loop(i, 16, T.Store(B, i, sel))))
    with pytest.raises(LoweringError, match="'A'"):
        check_bounds(_func(_loop(i, 16, T.Store(B, i, Select(i < 12, BufferLoad(A, i), FloatImm(0.0))))))


def test_a_select_inside_an_index_is_checked_branch_by_branch():
    """``A[select(i >= 16, i + i, i)] + 0``: the doubled branch only runs where ``i >= 16``, never in
    ``0 .. 9``, so the load is proved (the union of both branches reaches 18); a select in a sum,
    and one whose reachable branch overruns, are judged the same way."""
    i = Var("i")
    unreachable = Select(i >= 16, i + i, i, "int32")
    check_bounds(_func(_loop(i, 10, T.Store(B, i, BufferLoad(A, unreachable)))))
    check_bounds(_func(_loop(i, 10, T.Store(B, i, BufferLoad(B, Select(i < 4, i + 12, i, "int32") + 0)))))
    with pytest.raises(LoweringError, match="'A'"):
        check_bounds(_func(_loop(i, 10, T.Store(B, i, BufferLoad(A, Select(i >= 5, i + i, i, "int32"))))))


def test_let_and_symbolic_extents():
    i, x, n = Var("i"), Var("x"), Var("n")
    check_bounds(_func(_loop(i, 5, T.LetStmt(x, i * 2, T.Store(A, x, FloatImm(0.0))))))
    with pytest.raises(LoweringError):
        check_bounds(_func(_loop(i, 6, T.LetStmt(x, i * 2, T.Store(A, x, FloatImm(0.0))))))
    sym = T.Buffer("S", "float32", (n,))
    body = T.For(i, IntImm(0), n + 3, "serial", T.Store(sym, i, BufferLoad(A, IntImm(0))))
    check_bounds(T.PrimFunc("f", (A, sym), (n,), body))  # not constant: not checked


def _tiled(dag: ComputeDAG, out, factors=(8, 16)) -> State:
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis[-2:]
    io, ii = s[out].split(i, factor=factors[0])
    jo, ji = s[out].split(j, factor=factors[1])
    s[out].reorder(io, jo, ii, ji)
    s[out].parallel(io)
    s[out].vectorize(ji)
    return s


def test_tuned_like_programs_are_accepted():
    """Non-divisible tiles (guarded tails), compute_at, vectorize, parallel, padding."""
    dag = ComputeDAG(matmul_add(30, 30, 30))
    out = dag.tensors[-1]
    s = _tiled(dag, out)
    s[out.op.input_tensors()[0]].compute_at(s[out], s[out].leaf_iter_vars[1])
    program = program_from_state(s.state, "llvm")
    assert "@likely" in program.lowered
    dag = ComputeDAG(conv2d_nchw(1, 3, 14, 14, 8, 3, 3))
    out = dag.tensors[-1]
    s = _tiled(dag, out, (5, 4))
    program_from_state(s.state, "llvm")
    program_from_state(State.from_dag(dag), "llvm")


# ---------------------------------------------------------------------------
# floordiv / floormod: differences, other decompositions of a fused loop
# ---------------------------------------------------------------------------

def _buf(n: int) -> T.Buffer:
    return T.Buffer("X", "float32", (IntImm(n),))


def _fused(f: Var, extent: int, guard, index, n: int) -> T.PrimFunc:
    """``for f in 0..extent-1: if guard: X[index] = 0`` with X of ``n`` elements."""
    x = _buf(n)
    body = T.Store(x, index, FloatImm(0.0))
    if guard is not None:
        body = T.IfThenElse(guard, body, None, likely=True)
    return T.PrimFunc("f", (x,), (), _loop(f, extent, body))


def test_differences_of_floordiv_terms(monkeypatch):
    """``floordiv(22*i + j, 33) - floordiv(22*i, 33)`` (a compute_at inside a fused loop) is 0 or 1:
    X of 2 elements is fine, X of 1 is refused (taking the difference for ``floordiv(j, 33) = 0``
    would accept it)."""
    i, j = Var("i"), Var("j")

    def func(n):
        x = _buf(n)
        store = T.Store(x, (i * 22 + j) // 33 - (i * 22) // 33, FloatImm(0.0))
        return T.PrimFunc("f", (x,), (), _loop(i, 12, _loop(j, 22, store)))

    check_bounds(func(2))
    with pytest.raises(LoweringError, match=r"ranges over \[0, 1\]"):
        check_bounds(func(1))
    monkeypatch.setattr(bounds, "ENUMERATION_LIMIT", 0)  # without enumerating: the linear relaxation
    check_bounds(func(2))
    with pytest.raises(LoweringError, match="'X'"):
        check_bounds(func(1))


def test_guard_on_another_decomposition_of_the_fused_loop(monkeypatch):
    """A loop fused from (2, 6) and split by 6 again: the guard speaks of
    ``floormod(floordiv(f, 6), 2)*6 + floormod(f, 6)``, the index of ``floordiv(f, 6)*6 + floormod(f, 6)``."""
    monkeypatch.setattr(bounds, "ENUMERATION_LIMIT", 0)  # proved, not enumerated
    f = Var("f")
    guard_of = lambda limit: (f // 6) % 2 * 6 + f % 6 < limit  # noqa: E731
    index = (f // 6) * 6 + f % 6
    check_bounds(_fused(f, 12, guard_of(10), index, 10))
    with pytest.raises(LoweringError, match="'X'"):  # the guard one too loose
        check_bounds(_fused(f, 12, guard_of(11), index, 10))
    with pytest.raises(LoweringError, match="'X'"):  # the index one too far
        check_bounds(_fused(f, 12, guard_of(10), index + 1, 10))


def test_off_by_one_floormod_guard_is_refused(monkeypatch):
    """``X[floordiv(f, 7)*5 + floormod(f, 7)]`` guarded by ``floormod(f, 7) < 5`` stays within 10
    elements; with ``< 6`` (a split tail guard off by one) it reaches X[10]."""
    monkeypatch.setattr(bounds, "ENUMERATION_LIMIT", 0)
    f = Var("f")
    index = (f // 7) * 5 + f % 7
    check_bounds(_fused(f, 14, f % 7 < 5, index, 10))
    with pytest.raises(LoweringError, match=r"'X' out of bounds"):
        check_bounds(_fused(f, 14, f % 7 < 6, index, 10))
    # the guard written on the fused index instead: floordiv(f, 7)*7 + floormod(f, 7) < 12
    check_bounds(_fused(f, 14, (f // 7) * 7 + f % 7 < 12, f, 12))
    with pytest.raises(LoweringError, match=r"'X' out of bounds"):
        check_bounds(_fused(f, 14, (f // 7) * 7 + f % 7 < 13, f, 12))


# Legal schedules of the test DAGs that the check refused before it knew the above (the
# random-schedule probe found them; the step records are shrunk to a minimal subsequence).
ONCE_REFUSED = [
    # row_sum[floordiv(254 + i, 33)] where the split tail guard says 254 + i < 264
    pytest.param(lambda: W.softmax(8, 33),
                 [["FU", 4, [0, 1]], ["SP", 4, 0, 264, [18, 254], 1], ["AN", 4, 1, 1]],
                 id="one-variable-guard-narrows-a-floordiv"),
    # scan[floordiv(f, 6)*6 + floormod(f, 6) + ...] guarded by floormod(floordiv(f, 6), 2)*6 + floormod(f, 6) < 10
    pytest.param(lambda: W.cumsum_scan(9, 10),
                 [["SP", 3, 1, 10, [6], 1], ["CHW", 1, "local"], ["FU", 4, [0, 1, 2]]],
                 id="guard-on-another-decomposition"),
    # total[floordiv(f, 4)*4 + floormod(f, 4)] guarded by (floordiv(f, 8)*2 + floormod(floordiv(f, 4), 2))*4 + ...
    pytest.param(lambda: W.layer_norm(6, 20),
                 [["SP", 1, 0, 11, [11, 4], 1], ["CHR", 0, "local", [1]], ["FU", 2, [0, 1, 2]]],
                 id="guard-on-a-finer-split"),
    # floordiv(81*c + 48*a + b, 81)*81 + floormod(floordiv(.., 9), 9)*9 + floormod(.., 9) under 48*a + b < 81
    pytest.param(lambda: W.depthwise_conv2d(1, 3, 9, 9, 3, 3, pad=1),
                 [["FU", 2, [1, 2, 3]], ["SP", 2, 1, 243, [3], 0], ["SP", 2, 2, 81, [48], 1]],
                 id="nested-divisions-of-a-fused-index"),
    # floordiv(x + floordiv(y, d), c) = floordiv(d*x + y, d*c) relates the index to the guards
    pytest.param(lambda: W.rgb_to_yuv(11, 6),
                 [["SP", 1, 0, 3, [3, 1], 1], ["SP", 1, 1, 3, [3], 1], ["SP", 1, 2, 3, [2], 1],
                  ["SP", 1, 2, 2, [1], 1], ["FU", 1, [0, 1, 2, 3, 4, 5]], ["SP", 1, 0, 4, [4, 4], 1]],
                 id="division-of-a-division-in-a-sum"),
    # row_max[floordiv(22*a + b, 33) - floordiv(22*a, 33)], row_max of 2 elements (compute_at)
    pytest.param(lambda: W.softmax(8, 33),
                 [["FU", 2, [0, 1]], ["SP", 2, 0, 264, [22], 1], ["CA", 1, 2, 0]],
                 id="difference-of-floordiv-terms"),
    # matmul_local[10*floordiv(5*a + b, 10) - 10*floordiv(5*a, 10) + floormod(5*a + b, 10)] (cache_write at)
    pytest.param(lambda: W.matmul_bias_relu(12, 10, 7),
                 [["CHW", 2, "local"], ["FU", 3, [0, 1]], ["SP", 3, 0, 120, [106, 5], 1], ["CA", 2, 3, 1]],
                 id="difference-of-floordiv-terms-and-floormod"),
    # a loop of 25920 fused from nine, guarded in three decompositions (too many points to enumerate)
    pytest.param(lambda: W.depthwise_conv2d(1, 12, 36, 36, 3, 3, pad=1),
                 [["SP", 2, 3, 36, [4], 0], ["SP", 2, 1, 12, [10], 1], ["SP", 2, 4, 4, [4], 1],
                  ["SP", 2, 1, 2, [1, 2], 1], ["FU", 2, [0, 1, 2, 3, 4, 5, 6, 7, 8]]],
                 id="large-fused-loop"),
]


@pytest.mark.parametrize("workload, steps", ONCE_REFUSED)
def test_legal_schedules_once_refused_build_and_match_the_reference(workload, steps, monkeypatch):
    """Each builds through program_from_state (the builder's path, bounds check included) and
    computes what numpy computes.  Proved without enumerating points, so the proof does not
    depend on the sizes being small."""
    monkeypatch.setattr(bounds, "ENUMERATION_LIMIT", 0)
    dag = ComputeDAG(workload())
    program = program_from_state(replay_steps(dag, steps), "llvm")
    rng = np.random.default_rng(0)
    inputs = random_inputs(dag, rng)
    outputs = [np.zeros(tuple(int(d.value) for d in t.shape), t.dtype) for t in dag.outputs]
    program.build()(*inputs, *outputs)
    for got, want in zip(outputs, reference.evaluate(dag, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# names -> C identifiers
# ---------------------------------------------------------------------------

def test_c_identifiers():
    assert c_identifier("T_add.local") == "T_add_local"
    assert c_identifier("3x3") == "_3x3" and c_identifier("int") == "_int" and c_identifier("") == "_"
    assert c_identifier("é*/") == "___"
    assert c_identifiers(["a.b", "a_b", "a-b", "a_b_1"]) == ["a_b", "a_b_1", "a_b_2", "a_b_1_1"]
    assert "*/" not in comment_text("a*/\n#include <x> /* */") and "\n" not in comment_text("a\nb")


def test_any_tensor_name_builds_and_its_header_compiles(tmp_path):
    weird = "a*/\n#include <x>"
    a = te.placeholder((8,), "float32", name=weird)
    b = te.placeholder((8,), "float32", name="int")
    c = te.compute((8,), lambda i: a[i] + b[i], name="out put/*")
    dag = ComputeDAG([a, b, c])
    module = sc.build(State.from_dag(dag), list(dag.tensors), "llvm")
    x, y, z = np.arange(8, dtype=np.float32), np.ones(8, np.float32), np.zeros(8, np.float32)
    module(x, y, z)
    np.testing.assert_allclose(z, x + 1)
    header = module.export_library(tmp_path / "weird.so")
    text = header.read_text()
    assert weird not in text and "a*/" not in text and "#include <x>" not in text
    assert "float* a____include__x_" in text and "float* _int" in text and "float* out_put__" in text
    src = tmp_path / "use.c"
    src.write_text(f'#include "{header.name}"\nint main(void) {{ return 0; }}\n')
    subprocess.run(["cc", "-fsyntax-only", "-Wall", "-Werror", str(src)], check=True, cwd=tmp_path)


def test_narrowing_cast_and_negative_floormod_indices_are_not_taken_as_safe():
    """A cast to int8 of 0..199 wraps to negative indices; floormod by -4 lies in (-4, 0]: both
    were once read as in bounds (the cast as the identity, the floormod unchecked)."""
    from scheduler_core.ir.expr import BinaryOp, Cast

    i = Var("i")
    big = T.Buffer("C", "float32", (IntImm(200),))
    wrapped = T.For(i, IntImm(0), IntImm(200), "serial", T.Store(big, Cast(i, "int8"), FloatImm(0.0)))
    with pytest.raises(LoweringError, match=r"'C' out of bounds: .* ranges over \[-128, 127\]"):
        check_bounds(T.PrimFunc("f", (big,), (), wrapped))
    check_bounds(T.PrimFunc("f", (big,), (), T.For(i, IntImm(0), IntImm(100), "serial",
                                                  T.Store(big, Cast(i, "int8"), FloatImm(0.0)))))
    negative = _loop(i, 16, T.Store(A, BinaryOp("floormod", i, IntImm(-4), "int32"), FloatImm(0.0)))
    with pytest.raises(LoweringError, match=r"'A' out of bounds: .* ranges over \[-3, 0\]"):
        check_bounds(_func(negative))
    check_bounds(_func(_loop(i, 16, T.Store(A, BinaryOp("floormod", i, IntImm(4), "int32"), FloatImm(0.0)))))
