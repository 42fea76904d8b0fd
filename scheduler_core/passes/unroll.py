"""Loop unrolling on the lowered loop program (TVM's ``tir.transform.UnrollLoop``).

    For(kind="unrolled", extent=c) --unroll_loops--> c copies of the body

Two sources of unrolling:

* explicit: a ``For`` of kind ``"unrolled"`` with a constant extent;
* automatic (Ansor's ``auto_unroll_max_step`` pragma): inside a loop annotated
  ``{"auto_unroll_max_step": N}`` (or everywhere, with the function argument),
  a serial loop with a constant extent is unrolled when every loop inside it was
  unrolled too, the unrolled nest is at most 8 deep, and
  ``extent * steps(body) <= N``, where ``steps`` counts the stores of the body
  after the inner unrolling (TVM's ``step_count_``; for a single store it is the
  product of the trip counts of the nest).  The annotated loop itself is outside
  the pragma's scope, as in TVM, where the pragma is an attribute inside it.

* small loops (``small_loop_steps``, the CPU pipeline's SMALL_LOOP_STEPS): a serial
  loop of constant extent whose unrolled nest has at most that many steps, with or
  without a pragma.  This is the full unrolling of small constant loops that LLVM's O3
  would do, which the CPU build turns off (``codegen.llvm_codegen.optimize``): without
  it a register tile whose stage drew ``auto_unroll_max_step`` 0 kept its accumulators
  in memory (a 4x4 tile of conv2d ran 4x slower than unrolled), where TVM's build of the
  same schedule gets LLVM's unrolling.

Loops with non-constant extents are left alone.  A vectorized loop with a
constant extent counts as a single step (it becomes one vector statement) and
is never unrolled itself.
"""

from __future__ import annotations

import copy
import dataclasses

from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T
from scheduler_core.ir.stmt_functor import map_stmt

AUTO_MAX_DEPTH = 8  # TVM's auto_max_depth default
SMALL_LOOP_STEPS = 16  # CPU: nests of at most this many steps are unrolled without a pragma


def substitute_stmt(s: T.Stmt, mapping: dict) -> T.Stmt:
    """Replace variables (``Var`` -> ``Expr``, by identity) in every expression of ``s``,
    then simplify those expressions.  Every statement of the result is a new object, so the
    copies of an unrolled body share none (passes and features tell statements apart by
    identity); buffers are kept."""
    return map_stmt(s, f_stmt=copy.copy, f_expr=lambda e: ES.simplify(EF.substitute(e, mapping)))


def const_extent(loop: T.For) -> int | None:
    """The loop's trip count if it is a compile-time constant, else ``None``."""
    v = ES.const_value(loop.extent)
    return int(v) if isinstance(v, int) else None


def unroll_copies(loop: T.For) -> T.Stmt:
    """The body of ``loop`` repeated once per iteration, the loop var substituted.

    The loop must have a constant extent; an extent of 0 gives an empty SeqStmt.
    """
    n = const_extent(loop)
    assert n is not None, "unroll_copies needs a constant extent"
    copies = [substitute_stmt(loop.body, {loop.loop_var: ES.simplify(loop.min + i)})
              for i in range(n)]
    return T.seq(*copies) if copies else T.SeqStmt(())


@dataclasses.dataclass(frozen=True)
class _Info:
    steps: int = 0  # stores after unrolling (TVM's step_count_)
    unroll_depth: int = 0  # depth of unrolled loops
    normal_depth: int = 0  # depth of loops that stay loops

    def join(self, o: _Info) -> _Info:
        return _Info(self.steps + o.steps, max(self.unroll_depth, o.unroll_depth),
                     max(self.normal_depth, o.normal_depth))


def unroll_loops(stmt: T.Stmt, auto_unroll_max_step: int = 0, small_loop_steps: int = 0) -> T.Stmt:
    """Unroll explicit and automatic loops in ``stmt`` (TVM's UnrollLoop pass).

    Parameters
    ----------
    stmt : tir.Stmt
        A lowered loop program body.
    auto_unroll_max_step : int
        Default maximum step count for automatic unrolling outside any loop
        annotated with ``auto_unroll_max_step`` (0 = only explicit unrolling).
    small_loop_steps : int
        Nests of at most this many steps are unrolled everywhere, whatever the pragma
        says (the CPU pipeline passes SMALL_LOOP_STEPS; 0 = none).

    Returns the rewritten statement (a PrimFunc gives a PrimFunc); the input is
    not modified.
    """
    if isinstance(stmt, T.PrimFunc):
        return dataclasses.replace(stmt, body=unroll_loops(stmt.body, auto_unroll_max_step, small_loop_steps))
    return _visit(stmt, max(auto_unroll_max_step, small_loop_steps), small_loop_steps)[0]


def _visit(s: T.Stmt, max_step: int, small: int) -> tuple:
    if isinstance(s, T.For):
        return _visit_for(s, max_step, small)
    if isinstance(s, T.SeqStmt):
        info, out = _Info(), []
        for c in s.seq:
            new, ci = _visit(c, max_step, small)
            out.append(new)
            info = info.join(ci)
        return (T.seq(*out) if out else T.SeqStmt(())), info
    if isinstance(s, T.IfThenElse):
        then, ti = _visit(s.then_case, max_step, small)
        if s.else_case is None:
            return T.IfThenElse(s.cond, then, None, s.likely), ti
        other, ei = _visit(s.else_case, max_step, small)
        return T.IfThenElse(s.cond, then, other, s.likely), ti.join(ei)
    if isinstance(s, T.Allocate):
        body, bi = _visit(s.body, max_step, small)
        return T.Allocate(s.buffer, body), bi
    if isinstance(s, T.LetStmt):
        body, bi = _visit(s.body, max_step, small)
        return T.LetStmt(s.var, s.value, body), bi
    if isinstance(s, (T.Store, T.Evaluate, T.Barrier)):
        return s, _Info(steps=1)
    raise TypeError(f"unknown statement {type(s).__name__}")


def _visit_for(loop: T.For, max_step: int, small: int) -> tuple:
    inner_step = max(int(loop.annotations.get("auto_unroll_max_step", max_step)), small)
    body, bi = _visit(loop.body, inner_step, small)
    new = T.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, dict(loop.annotations))
    n = const_extent(loop)
    if loop.kind == "vectorized" and n is not None:
        return new, bi
    explicit = loop.kind == "unrolled" and n is not None
    auto = (loop.kind == "serial" and n is not None and bi.normal_depth == 0
            and bi.unroll_depth < AUTO_MAX_DEPTH and n * max(bi.steps, 1) <= max_step)
    if explicit or auto:
        info = _Info(bi.steps * n, bi.unroll_depth + 1, 0)
        return unroll_copies(new), info
    return new, _Info(bi.steps, bi.unroll_depth, bi.normal_depth + 1)
