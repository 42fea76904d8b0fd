"""Random integer expressions and their exact values at every point, for the arith tests.

    random_expr(rng, variables, depth) -> Expr      evaluate(e, values) -> (values, defined)

``evaluate`` runs numpy over broadcast arrays of the variables' values, with the semantics of
the compiled code: floor division and modulo, truncating ``div``, casts that wrap (two's
complement).  ``defined`` is False where a divisor is 0 (undefined: no bound covers it).
"""

from __future__ import annotations

import numpy as np

from scheduler_core.ir.expr import BinaryOp, Cast, CmpOp, Expr, IntImm, Select, Var

_WRAP = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "uint8": np.uint8}


def random_expr(rng: np.random.Generator, variables: list, depth: int) -> Expr:
    """An int32 expression of ``variables`` with add/sub/mul/min/max/floordiv/floormod/div
    (constant divisors of either sign, or expressions), select and narrowing casts."""
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.6:
            return variables[int(rng.integers(len(variables)))]
        return IntImm(int(rng.integers(-9, 10)))
    kind = rng.choice(["bin", "bin", "bin", "divc", "select", "cast"])
    sub = lambda: random_expr(rng, variables, depth - 1)  # noqa: E731
    if kind == "bin":
        op = str(rng.choice(["add", "sub", "mul", "min", "max", "floordiv", "floormod", "div"]))
        return BinaryOp(op, sub(), sub(), "int32")
    if kind == "divc":
        c = int(rng.choice([-7, -3, -2, 2, 3, 5, 8]))
        return BinaryOp(str(rng.choice(["floordiv", "floormod", "div"])), sub(), IntImm(c), "int32")
    if kind == "select":
        return Select(CmpOp(str(rng.choice(["lt", "ge", "eq"])), sub(), sub()), sub(), sub(), "int32")
    inner = BinaryOp("mul", sub(), IntImm(int(rng.choice([1, 16, 40, 1000]))), "int32")
    return Cast(Cast(inner, str(rng.choice(["int8", "int16", "uint8"]))), "int32")


def evaluate(e: Expr, values: dict) -> tuple:
    """``(value, defined)``: int64 arrays over the broadcast points of ``values`` (Var -> array)."""
    if isinstance(e, IntImm):
        return np.int64(e.value), np.bool_(True)
    if isinstance(e, Var):
        return values[e], np.bool_(True)
    if isinstance(e, Cast):
        v, ok = evaluate(e.value, values)
        if e.dtype in _WRAP:
            v = np.asarray(v).astype(_WRAP[e.dtype]).astype(np.int64)
        return v, ok
    if isinstance(e, CmpOp):
        (a, oa), (b, ob) = evaluate(e.a, values), evaluate(e.b, values)
        fn = {"lt": np.less, "ge": np.greater_equal, "eq": np.equal}[e.op]
        return fn(a, b).astype(np.int64), oa & ob
    if isinstance(e, Select):
        c, oc = evaluate(e.cond, values)
        (t, ot), (f, of) = evaluate(e.true_value, values), evaluate(e.false_value, values)
        return np.where(c != 0, t, f), oc & np.where(c != 0, ot, of)
    assert isinstance(e, BinaryOp)
    (a, oa), (b, ob) = evaluate(e.a, values), evaluate(e.b, values)
    ok = oa & ob
    if e.op in ("floordiv", "floormod", "div"):
        ok = ok & (b != 0)
        b = np.where(b == 0, 1, b)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
          "floordiv": np.floor_divide, "floormod": np.remainder,
          "div": lambda x, y: np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))}[e.op]
    return fn(a, b), ok


def grid(variables: list, ranges: list) -> dict:
    """Var -> int64 array of its values ``lo .. hi``, one broadcast axis per variable."""
    out = {}
    for n, (v, (lo, hi)) in enumerate(zip(variables, ranges)):
        shape = [1] * len(variables)
        shape[n] = hi - lo + 1
        out[v] = np.arange(lo, hi + 1, dtype=np.int64).reshape(shape)
    return out
