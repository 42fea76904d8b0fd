"""arith.const_int_bound: every value of random expressions (checked by numpy enumeration) lies
in the bound; narrowing casts and floormod/floordiv by negative divisors follow TVM's rules."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.arith.const_int_bound import DTYPE_RANGE, ConstIntBound, const_int_bound, fits
from scheduler_core.ir.expr import BinaryOp, BufferLoad, Cast, CmpOp, IntImm, Select, Var
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.tir import Buffer

from .exprgen import evaluate, grid, random_expr

X, Y, Z = Var("x"), Var("y"), Var("z")


def _bound(e, **ranges):
    return const_int_bound(e, {v: ranges[v.name] for v in (X, Y, Z) if v.name in ranges})


def _always_zero_divisor(e, bounds) -> bool:
    return any(isinstance(n, BinaryOp) and n.op in ("floordiv", "floormod", "div")
               and const_int_bound(n.b, bounds) == (0, 0) for n in walk(e))


@pytest.mark.parametrize("seed", range(8))
def test_random_expressions_stay_inside_their_bound(seed):
    rng = np.random.default_rng(seed)
    exact = 0
    for _ in range(60):
        ranges = [tuple(sorted(int(v) for v in rng.integers(-9, 10, 2))) for _ in range(3)]
        bounds = dict(zip((X, Y, Z), ranges))
        e = random_expr(rng, [X, Y, Z], 4)
        b = const_int_bound(e, bounds)
        if b is None:
            assert _always_zero_divisor(e, bounds), e
            continue
        value, defined = evaluate(e, grid([X, Y, Z], ranges))
        value = np.broadcast_to(value, np.broadcast_shapes(np.shape(value), np.shape(defined)))
        picked = value[np.broadcast_to(defined, value.shape)]
        if picked.size:
            assert b.min_value <= picked.min() and picked.max() <= b.max_value, (e, b, picked.min(), picked.max())
            exact += (b.min_value, b.max_value) == (picked.min(), picked.max())
    assert exact > 10  # mostly tight, not just sound


def test_linear_and_corner_rules():
    assert _bound(X * 4 + Y - 3, x=(0, 7), y=(0, 3)) == (-3, 28)
    assert _bound(X * Y, x=(-2, 3), y=(-5, 4)) == (-15, 12)
    assert _bound(BinaryOp("min", X, Y), x=(0, 10), y=(3, 5)) == (0, 5)
    assert _bound(Select(CmpOp("lt", X, Y), X, Y + 20), x=(0, 4), y=(0, 4)) == (0, 24)
    assert _bound(CmpOp("lt", X, Y), x=(0, 4), y=(0, 4)) == (0, 1)


def test_floordiv_floormod_and_truncating_div():
    assert _bound(X // 4, x=(-9, 9)) == (-3, 2)
    assert _bound(X % 8, x=(9, 14)) == (1, 6)  # one period: exact
    assert _bound(X % 8, x=(0, 100)) == (0, 7)
    assert _bound(BinaryOp("floormod", X, IntImm(-3)), x=(-20, 20)) == (-2, 0)  # (d, 0]
    assert _bound(BinaryOp("floordiv", X, IntImm(-3)), x=(-9, 9)) == (-3, 3)
    assert _bound(BinaryOp("div", X, IntImm(4)), x=(-9, 9)) == (-2, 2)  # truncates toward 0
    assert _bound(BinaryOp("floordiv", X, Y), x=(0, 10), y=(-2, 5)) == (-10, 10)  # y != 0 assumed
    assert _bound(BinaryOp("floormod", X, Y), x=(-5, 10), y=(1, 4)) == (0, 3)
    assert _bound(BinaryOp("floormod", X, Y), x=(-5, 10), y=(-4, -1)) == (-3, 0)
    assert _bound(BinaryOp("floordiv", X, IntImm(0)), x=(0, 3)) is None  # always a division by 0


def test_floormod_by_negative_divisor_is_d_exclusive_to_zero():
    """floormod(x, d) for d < 0 lies in (d, 0], whatever x (TVM's rule), and one period is exact."""
    for d in (-1, -2, -7):
        b = _bound(BinaryOp("floormod", X, IntImm(d)), x=(-50, 50))
        assert b == (d + 1, 0)
    assert _bound(BinaryOp("floormod", X, IntImm(-7)), x=(-6, -4)) == (-6, -4)
    assert _bound(BinaryOp("floormod", X, IntImm(-7)), x=(1, 3)) == (-6, -4)  # 1 mod -7 = -6


def test_narrowing_cast_of_a_range_that_does_not_fit_is_the_whole_dtype():
    assert _bound(Cast(X * 100, "int8"), x=(0, 1)) == (0, 100)  # fits: kept
    assert _bound(Cast(X * 100, "int8"), x=(0, 2)) == DTYPE_RANGE["int8"] == (-128, 127)
    assert _bound(Cast(X * 1000, "int16"), x=(0, 40)) == (-32768, 32767)
    assert _bound(Cast(X, "int32"), x=(0, 1 << 31)) == (-(1 << 31), (1 << 31) - 1)
    assert _bound(Cast(X - 1, "uint8"), x=(0, 3)) == (0, 255)
    assert _bound(Cast(X, "int64"), x=(0, 1 << 40)) == (0, 1 << 40)
    assert _bound(Cast(X, "bool"), x=(1, 4)) == (1, 1)
    # the wrapped values really leave the narrow range the identity would claim
    vals = (np.arange(0, 3) * 100).astype(np.int8)
    assert vals.min() < 0


def test_unknown_nodes_go_to_the_fallback():
    load = BufferLoad(Buffer("B", "int32", (IntImm(4),)), X, "int32")
    assert _bound(load + 1, x=(0, 3)) is None
    got = const_int_bound(load + 1, {X: (0, 3)}, unknown=lambda e: DTYPE_RANGE.get(e.dtype))
    assert got == (-(1 << 31) + 1, (1 << 31))
    assert const_int_bound(X + Y, {X: (0, 3), Y: None}) is None  # a variable without a range
    assert const_int_bound(Cast(load, "int8"), {X: (0, 3)}, unknown=lambda e: (0, 0)) == (0, 0)
    assert isinstance(_bound(X, x=(1, 2)), ConstIntBound)


def test_fits():
    assert fits((0, 127), "int8") and not fits((0, 128), "int8") and not fits(None, "int32")
    assert not fits((0, 1), "float32")
