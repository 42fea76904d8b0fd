"""arith.lp and arith.enumeration against brute force over small integer boxes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from scheduler_core.arith.divmod_form import DivModNormalForm
from scheduler_core.arith.enumeration import enumerated_range
from scheduler_core.arith.int_set import Infeasible, range_interval
from scheduler_core.arith.linear_form import linear_form
from scheduler_core.arith.lp import lp_max, relaxed_range
from scheduler_core.ir.expr import Cast, Var

from .exprgen import evaluate, grid


@pytest.mark.parametrize("seed", range(20))
def test_lp_max_bounds_the_integer_maximum(seed):
    """lp_max is a valid upper bound of c.x over the integer points, and at most the LP optimum
    (>= the integer optimum) plus rounding."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 4)), int(rng.integers(0, 4))
    lo = [int(v) for v in rng.integers(-5, 1, n)]
    hi = [a + int(v) for a, v in zip(lo, rng.integers(0, 6, n))]
    rows = [{j: int(rng.integers(-3, 4)) for j in range(n)} for _ in range(m)]
    b = [int(rng.integers(-2, 8)) for _ in range(m)]
    c = {j: int(rng.integers(-4, 5)) for j in range(n)}
    best = None
    for x in itertools.product(*(range(a, z + 1) for a, z in zip(lo, hi))):
        if all(sum(r[j] * x[j] for j in r) <= bi for r, bi in zip(rows, b)):
            v = sum(c[j] * x[j] for j in c)
            best = v if best is None else max(best, v)
    bound = lp_max(c, rows, b, lo, hi, n)
    if best is not None:
        assert bound >= best
    box = sum(max(c[j] * lo[j], c[j] * hi[j]) for j in range(n))
    assert bound <= box  # never worse than the box alone


def test_relaxation_relates_two_decompositions_of_a_fused_loop():
    """floordiv(22*i + j, 33) - floordiv(22*i, 33) is 0 or 1 (the relaxation rounds at each division)."""
    i, j = Var("i"), Var("j")
    env = {i: range_interval(0, 29), j: range_interval(0, 21)}
    e = (i * 22 + j) // 33 - (i * 22) // 33
    assert relaxed_range(e, env, [], DivModNormalForm()) == (0, 1)
    assert enumerated_range(e, env, [], 1 << 14) == (0, 1)


def test_relaxation_uses_guards_and_detects_infeasible_ones():
    i, k = Var("i"), Var("k")
    env = {i: range_interval(0, 15), k: range_interval(0, 7)}
    terms = linear_form(i * 8 + k)[0]
    assert relaxed_range(i * 8 + k, env, [(terms, None, 29)], DivModNormalForm()) == (0, 29)
    with pytest.raises(Infeasible):
        relaxed_range(i, env, [(linear_form(i)[0], 20, None)], DivModNormalForm())


@pytest.mark.parametrize("seed", range(10))
def test_enumeration_is_exact_under_a_guard(seed):
    rng = np.random.default_rng(seed)
    x, y = Var("x"), Var("y")
    rx, ry = (0, int(rng.integers(3, 20))), (-3, int(rng.integers(0, 9)))
    env = {x: range_interval(*rx), y: range_interval(*ry)}
    c = int(rng.integers(2, 7))
    e = (x * 3 - y) // c + (x + y) % c
    g_hi = int(rng.integers(0, 25))
    guards = [(linear_form(x + y)[0], None, g_hi)]
    values = grid([x, y], [rx, ry])
    v, _ = evaluate(e, values)
    mask = values[x] + values[y] <= g_hi
    if not mask.any():
        with pytest.raises(Infeasible):
            enumerated_range(e, env, guards, 1 << 14)
        return
    picked = np.broadcast_to(v, mask.shape)[mask]
    assert enumerated_range(e, env, guards, 1 << 14) == (int(picked.min()), int(picked.max()))


def test_enumeration_wraps_narrowing_casts_and_respects_the_limit():
    x = Var("x")
    env = {x: range_interval(0, 3)}
    assert enumerated_range(Cast(x * 100, "int8"), env, [], 100) == (-56, 100)  # 200, 300 wrap
    assert enumerated_range(x, {x: range_interval(0, 999)}, [], 100) is None
