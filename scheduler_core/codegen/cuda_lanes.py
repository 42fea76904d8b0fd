"""Lane scalarisation: vector statements of the vectorize pass printed one lane at a time.

    lanes_of(e) -> lanes      scalarize(e, lane, hoisted) -> the scalar expression of one lane
    aligned_base(buf, index, lanes, dtype) -> the base of an aligned float2/float4 access
    hoistable_loads(e) -> the vector loads evaluated for every lane

CUDA C has no vector arithmetic of arbitrary width, so a vector store (``Ramp``/``Broadcast``
values after the vectorize pass) prints one scalar expression per lane, as TVM's
``CodeGenC`` does for vector types the target lacks (``PrintVecElemLoad`` /
``PrintVecElemStore``, ``src/target/source/codegen_c.cc``); a float32 access of 2 or 4
contiguous lanes at a provably aligned base becomes one ``float2``/``float4`` access.
"""

from __future__ import annotations

from scheduler_core.arith.linear_form import linear_form
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir.simplify import const_value, simplify

__all__ = ["LANE_NAMES", "lanes_of", "aligned_base", "hoistable_loads", "scalarize"]

LANE_NAMES = "xyzw"  # the fields of CUDA's vector types (float4.x ...)


def lanes_of(e: E.Expr) -> int:
    """The vector lanes of ``e`` (1: scalar): the widest Ramp, Broadcast or load in it."""
    best = 1
    for n in EF.walk(e):
        if isinstance(n, (E.Ramp, E.Broadcast)):
            best = max(best, n.lanes)
        elif isinstance(n, E.BufferLoad):
            best = max(best, n.lanes)
    return best


def aligned_base(buf, index: E.Expr, lanes: int, dtype: str) -> E.Expr | None:
    """The scalar base of a float32 access of 2 or 4 contiguous lanes whose base is provably a
    multiple of ``lanes`` (so ``float2``/``float4`` is aligned), else None."""
    if dtype != "float32" or lanes not in (2, 4) or buf.dtype != "float32":
        return None
    if isinstance(index, E.Ramp):
        if index.lanes != lanes or const_value(index.stride) != 1:
            return None
        base = index.base
    elif lanes_of(index) == 1:
        base = index
    else:
        return None
    if lanes_of(base) > 1:
        return None
    terms, c = linear_form(base)
    if c % lanes or any(coef % lanes for _, coef in terms.values()):
        return None
    return base


def hoistable_loads(e: E.Expr) -> list:
    """Vector loads of ``e`` evaluated for every lane: not inside a Select branch."""
    out: list = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, E.BufferLoad):
            if lanes_of(n) > 1:
                out.append(n)
            continue
        if isinstance(n, E.Select):
            stack.append(n.cond)
            continue
        stack.extend(EF.children(n))
    return out


def scalarize(e: E.Expr, lane: int, hoisted: dict, placeholders: dict | None = None) -> E.Expr:
    """Lane ``lane`` of the vector expression ``e`` as a scalar expression.  A hoisted vector
    load becomes a placeholder Var whose text is ``tmp.x`` (recorded in ``placeholders``)."""
    if lanes_of(e) == 1:
        return e
    if isinstance(e, E.Ramp):
        return simplify(e.base + e.stride * lane) if lane else e.base
    if isinstance(e, E.Broadcast):
        return e.value
    if isinstance(e, E.BufferLoad):
        tmp = hoisted.get(id(e))
        if tmp is not None:
            var = E.Var(f"{tmp}.{LANE_NAMES[lane]}", e.dtype)
            if placeholders is not None:
                placeholders[var] = f"{tmp}.{LANE_NAMES[lane]}"
            return var
        if lanes_of(e.index) > 1:
            idx = scalarize(e.index, lane, hoisted, placeholders)
        else:
            idx = simplify(e.index + lane) if lane else e.index
        return E.BufferLoad(e.buffer, idx, e.dtype, 1)
    kids = EF.children(e)
    return EF.rebuild(e, tuple(scalarize(k, lane, hoisted, placeholders) for k in kids))
