"""Belt and braces when compiling: loads and stores provably in bounds, names made C identifiers."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.c_names import c_identifier, c_identifiers, comment_text
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.program import program_from_state
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import Broadcast, BufferLoad, CmpOp, FloatImm, IntImm, Ramp, Select, Var
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
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
