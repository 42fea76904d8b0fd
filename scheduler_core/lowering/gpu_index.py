"""Index arithmetic of the GPU lowering: extents compared, loops linearised.

    same_value(a, b)   a == b provably          less_than(a, b)   a < b when decidable
    linear_loops(loops) -> (sum (v - min) * stride, product of extents)

Used by the launch-dimension unification (one extent per thread tag) and the thread
allreduce (a slot per thread and spatial element).  The comparisons are those of TVM's
``arith::Analyzer::CanProveEqual`` / ``CanProve(a < b)`` on a difference that is a constant:
the linear forms of the two sides (``scheduler_core.arith.linear_form.const_diff``), or the
folded difference.
"""

from __future__ import annotations

from scheduler_core.arith.linear_form import const_diff
from scheduler_core.ir.expr import Expr, IntImm
from scheduler_core.ir.expr_functor import structural_equal
from scheduler_core.ir.simplify import const_value, simplify

__all__ = ["same_value", "less_than", "linear_loops"]


def _difference(a: Expr, b: Expr) -> int | None:
    """``a - b`` when it is provably a constant, else None."""
    sa, sb = simplify(a), simplify(b)
    d = const_diff(sa, sb)
    if d is not None:
        return d
    v = const_value(simplify(a - b))
    return v if isinstance(v, int) else None


def same_value(a: Expr, b: Expr) -> bool:
    """Whether ``a`` and ``b`` are provably equal (equal constants, structurally equal after
    simplification, or a difference that is the constant 0)."""
    ca, cb = const_value(a), const_value(b)
    if isinstance(ca, int) and isinstance(cb, int):
        return ca == cb
    return structural_equal(simplify(a), simplify(b)) or _difference(a, b) == 0


def less_than(a: Expr, b: Expr) -> bool | None:
    """``a < b`` when decidable (constants, or ``b - a`` a constant), else None."""
    d = _difference(b, a)
    return None if d is None else d > 0


def linear_loops(loops: list) -> tuple:
    """``(sum (v - min) * stride, product of extents)`` of constant-extent ``For`` loops, outer
    first (row-major: the innermost loop has stride 1)."""
    index: Expr = IntImm(0)
    total = 1
    for lp in loops:
        ext = const_value(lp.extent)
        assert isinstance(ext, int)
        index = index * ext + (lp.loop_var - lp.min)
        total *= ext
    return simplify(index), total
