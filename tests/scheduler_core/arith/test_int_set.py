"""arith.int_set: symbolic intervals, union, constant ranges."""

from __future__ import annotations

import pytest

from scheduler_core.arith.int_set import (
    Infeasible,
    Interval,
    const_range,
    intersect_bounds,
    interval,
    point,
    range_interval,
    union,
)
from scheduler_core.ir.expr import Cast, IntImm, Var, expr_str

I, J, N = Var("i"), Var("j"), Var("n")


def test_interval_with_a_symbolic_origin():
    env = {I: range_interval(0, 7)}
    r = interval(N * 8 + I, env)  # n stays fixed
    assert expr_str(r.lo) == expr_str(N * 8) and r.const_extent == 8
    assert interval((N * 8 + I) // 8, env) is not None


def test_union_and_const_range():
    u = union([Interval(N, IntImm(4)), Interval(N + 2, IntImm(4)), point(N - 1)])
    assert const_range(u.extent, {}) == (7, 7) and expr_str(u.lo) == expr_str(N + -1)
    assert union([Interval(N, IntImm(4)), Interval(I, IntImm(4))]) is None
    assert const_range(I * 4 + J, {I: range_interval(0, 3), J: range_interval(0, 3)}) == (0, 15)
    assert const_range(I + N, {I: range_interval(0, 3)}) is None


def test_narrowing_cast_in_intervals():
    env = {I: range_interval(0, 300)}
    assert interval(Cast(I, "int8"), env).const_bounds == (-128, 127)
    assert interval(Cast(I, "int16"), env).const_bounds == (0, 300)
    assert interval(Cast(N + I, "int64"), env) is not None  # widening: kept symbolic
    assert interval(Cast(N + I, "int8"), env) is None  # may or may not fit: not analysable


def test_intersect_bounds():
    assert intersect_bounds((0, 10), (None, 5)) == (0, 5)
    with pytest.raises(Infeasible):
        intersect_bounds((0, 3), (4, None))
