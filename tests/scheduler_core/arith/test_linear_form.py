"""arith.linear_form and arith.divmod_form: round trips, split/fuse rejoin, and rewrites that
keep every value (checked by numpy enumeration)."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.arith.divmod_form import DivModNormalForm, simplify_divmod
from scheduler_core.arith.int_set import const_range, range_interval
from scheduler_core.arith.linear_form import (
    canonical,
    const_diff,
    from_linear,
    joined_linear_form,
    linear_form,
    signature,
)
from scheduler_core.ir.expr import Var, expr_str

from .exprgen import evaluate, grid, random_expr

X, Y, Z = Var("x"), Var("y"), Var("z")
RANGES = [(-6, 9), (0, 11), (-4, 4)]


def _same_values(a, b) -> bool:
    values = grid([X, Y, Z], RANGES)
    (va, da), (vb, db) = evaluate(a, values), evaluate(b, values)
    shape = np.broadcast_shapes(np.shape(va), np.shape(vb), np.shape(da), np.shape(db))
    ok = np.broadcast_to(da & db, shape)
    return bool(np.array_equal(np.broadcast_to(va, shape)[ok], np.broadcast_to(vb, shape)[ok]))


@pytest.mark.parametrize("seed", range(5))
def test_round_trip_keeps_every_value(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        e = random_expr(rng, [X, Y, Z], 4)
        terms, k = linear_form(e)
        assert all(c != 0 for _, c in terms.values())
        assert _same_values(e, from_linear(terms, k)), expr_str(e)
        assert _same_values(e, canonical(e))


def test_terms_gather_and_cancel():
    terms, k = linear_form((X * 3 + Y) * 2 - X * 6 + 5 - (Y // 4) + (Y // 4))
    assert k == 5 and {expr_str(a): c for a, c in terms.values()} == {"y": 2}
    assert const_diff(X * 2 + 7, X * 2 + 3) == 4
    assert const_diff(X * 2 + 7, X * 3) is None
    assert signature(linear_form(X + Y)[0]) == signature(linear_form(Y + X)[0])


def test_split_fuse_pairs_join_back():
    f = X * 12 + Y  # a fused loop, split twice
    e = (f // 12) * 12 * 5 + (f % 12) * 5 + 3
    terms, k = joined_linear_form(e)
    assert k == 3 and {expr_str(a): c for a, c in terms.values()} == {"x": 60, "y": 5}
    assert _same_values(e, from_linear(terms, k))


@pytest.mark.parametrize("seed", range(5))
def test_normal_form_keeps_every_value(seed):
    rng = np.random.default_rng(100 + seed)
    nf = DivModNormalForm()
    for _ in range(40):
        e = random_expr(rng, [X, Y, Z], 4)
        assert _same_values(e, nf.normalize(e)), expr_str(e)


def test_normal_form_makes_two_writings_one_atom():
    nf = DivModNormalForm()
    a = nf.normalize((X // 7) // 5)
    b = nf.normalize(X // 35)
    assert expr_str(a) == expr_str(b)
    assert expr_str(nf.normalize((X * 6 + Y * 4) // 2)) == expr_str(nf.normalize(X * 3 + Y * 2))


def test_simplify_divmod_removes_exact_divisions():
    env = {X: range_interval(0, 3), Y: range_interval(0, 7)}
    e = (X * 8 + Y) // 8 + (X * 8 + Y) % 8
    s = simplify_divmod(e, env)
    assert "floordiv" not in expr_str(s) and "floormod" not in expr_str(s)
    assert const_range(s, env) == (0, 10)
    assert simplify_divmod((X * 8 + Y + 1) // 8, env) is not None  # not exact: kept
    assert "floordiv" in expr_str(simplify_divmod((X * 8 + Y + 1) // 8, env))
