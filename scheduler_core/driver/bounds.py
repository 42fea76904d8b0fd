"""Belt and braces before a program is compiled: every load and store provably in bounds.

    check_bounds(func)   # raises LoweringError naming the buffer, the index and its range

The lowered program (``ir.tir``) is walked with an explicit stack, keeping

* the range of every loop variable with a constant extent (``For``: min .. min+extent-1),
* the conditions that guard the access: enclosing ``IfThenElse`` (the ``likely`` guards
  of non-divisible splits), ``Store`` predicates and the branches of ``Select``
  (code generation evaluates a guarded branch only where its condition holds),
* ``LetStmt`` bindings (substituted into the indices).

Each flat index of a ``BufferLoad`` / ``Store`` (each lane of a ``Ramp``: a lane variable
ranging over ``0 .. lanes-1`` stands for the lane) is evaluated with ``ir.bound.interval``.
When the plain loop ranges do not prove ``0 <= index <= prod(shape) - 1``, the guards
are used: a guard ``lo <= g <= hi`` on a single variable narrows its range; on a linear
combination ``g = v + rest`` (``v`` a loop variable of coefficient +-1) it eliminates
``v = g - rest`` in favour of a fresh variable ranging over the guard's bounds
(``(i.0*8 + i) < 30`` makes ``A[i.0*240 + i*30 + k]`` range over ``30*g + k``).  Guards
that are not understood (``or``, a non-linear term, a float comparison) are ignored, so
the unguarded range is used; a range that is then out of bounds is an error.

Indices and guards are compared as linear forms over atoms (loop variables and
``floordiv``/``floormod`` terms), with the split/fuse pairs ``floordiv(a, c)*c + floormod(a, c)``
joined back into ``a``; a guard on a whole sum also bounds ``floordiv``/``floormod`` of it.

An access that this does not prove goes through a refinement (:func:`_refined_range`; the
accesses proved above cost nothing more):

* guards on one variable narrow its range, and the ``floordiv``/``floormod`` terms that the
  narrowed ranges make exact are simplified away (``floordiv(254 + i, 33)`` is 7 under
  ``i < 10``);
* indices and guards are put in a normal form by identities of floor division by a positive
  constant (nested divisions flattened, multiples and common factors taken out), so that a
  quantity written in two decompositions of a fused loop is one atom, and the analysis
  above runs again;
* the linear relaxation: each ``floordiv(a, c)`` is an integer unknown with
  ``0 <= a - c*floordiv(a, c) <= c - 1``, ``floormod(a, c)`` is ``a - c*floordiv(a, c)``, the
  guards are constraints, and the index is bounded by linear programming, rounded down to
  integers at each ``floordiv``/``floormod`` and at the end.  This relates guards and indices
  written in any decompositions of a fused loop and bounds differences of ``floordiv`` terms
  (``floordiv(22*i + j, 33) - floordiv(22*i, 33)`` is 0 or 1).  Each bound is a dual
  certificate evaluated in exact rational arithmetic: a floating-point simplex only picks the
  multipliers, so rounding can weaken a bound but never make it wrong;
* failing that, when the variables of the index (with those of the guards tied to them)
  have at most ENUMERATION_LIMIT points, the index is evaluated at each point where the
  guards hold: the exact range.

Known limit: an index whose bound needs integer reasoning beyond the relaxation (a case split
on a variable) over more than ENUMERATION_LIMIT points is refused although it may be safe.

Not checked (accepted): a buffer whose size is not a constant (symbolic shapes), and an
index whose range is not a pair of constants (a loop of symbolic extent, an indirect
index, a product of loop variables).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from scheduler_core.base.errors import LoweringError
from scheduler_core.ir import tir as T
from scheduler_core.ir.bound import Interval, from_linear, interval, linear_form
from scheduler_core.ir.expr import (
    BinaryOp,
    Broadcast,
    BufferLoad,
    Cast,
    CmpOp,
    Expr,
    IntImm,
    LogicalOp,
    Not,
    Ramp,
    Select,
    Var,
    expr_str,
    is_float,
)
from scheduler_core.ir.expr_functor import children, free_vars, substitute, transform, walk
from scheduler_core.ir.simplify import const_value

_LANE_VARS: dict = {}  # lanes -> the Var that stands for the lane of a Ramp
_FLIP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def check_bounds(func: T.PrimFunc) -> None:
    """Raise LoweringError unless every load and store of ``func`` is provably in bounds.

    See the module docstring for what is proved, how guards are used and what is skipped.
    """
    # (stmt, env: Var -> Interval, guards: tuple of constraints, lets: Var -> Expr)
    stack: list = [(func.body, {}, (), {})]
    while stack:
        s, env, guards, lets = stack.pop()
        if isinstance(s, T.SeqStmt):
            stack.extend((c, env, guards, lets) for c in reversed(s.seq))
        elif isinstance(s, T.For):
            _check_expr(s.min, env, guards, lets)
            _check_expr(s.extent, env, guards, lets)
            ext = const_value(substitute(s.extent, lets))
            if isinstance(ext, int):
                if ext <= 0:
                    continue
                stack.append((s.body, {**env, s.loop_var: _loop_range(s.min, ext, env, lets)},
                              guards, lets))
            else:
                stack.append((s.body, env, guards, lets))
        elif isinstance(s, T.IfThenElse):
            _check_expr(s.cond, env, guards, lets)
            cond = _scalar(substitute(s.cond, lets))
            if const_value(cond) not in (0, False):  # a constant-false branch never runs
                stack.append((s.then_case, env, guards + _constraints(cond), lets))
            if s.else_case is not None:
                stack.append((s.else_case, env, guards + _constraints(Not(cond)), lets))
        elif isinstance(s, T.Store):
            g = guards
            if s.predicate is not None:
                _check_expr(s.predicate, env, guards, lets)
                g = guards + _constraints(_scalar(substitute(s.predicate, lets)))
            _check_access("store to", s.buffer, s.index, env, g, lets)
            _check_expr(s.index, env, g, lets)
            _check_expr(s.value, env, g, lets)
        elif isinstance(s, T.LetStmt):
            _check_expr(s.value, env, guards, lets)
            stack.append((s.body, env, guards, {**lets, s.var: substitute(s.value, lets)}))
        elif isinstance(s, T.Allocate):
            stack.append((s.body, env, guards, lets))
        elif isinstance(s, T.Evaluate):
            _check_expr(s.value, env, guards, lets)


def _loop_range(lo: Expr, ext: int, env: dict, lets: dict) -> Interval:
    lo = substitute(lo, lets)
    r = interval(lo, env)
    if r is not None and r.const_extent is not None and isinstance(const_value(r.lo), int):
        return Interval(r.lo, IntImm(r.const_extent + ext - 1))
    return Interval(lo, IntImm(ext))


def _check_expr(e: Expr, env: dict, guards: tuple, lets: dict) -> None:
    """Check every BufferLoad in ``e``; a Select's branches see its condition as a guard."""
    stack = [(e, guards)]
    while stack:
        n, g = stack.pop()
        if isinstance(n, BufferLoad):
            _check_access("load from", n.buffer, n.index, env, g, lets)
            stack.append((n.index, g))
        elif isinstance(n, Select):
            cond = _scalar(substitute(n.cond, lets))
            stack.append((n.cond, g))
            stack.append((n.true_value, g + _constraints(cond)))
            stack.append((n.false_value, g + _constraints(Not(cond))))
        else:
            stack.extend((c, g) for c in children(n))


def _scalar(e: Expr) -> Expr:
    """``e`` with each Ramp as ``base + stride * lane`` and each Broadcast as its value."""
    if not any(isinstance(n, (Ramp, Broadcast)) for n in walk(e)):
        return e

    def fn(n):
        if isinstance(n, Ramp):
            lane = _LANE_VARS.setdefault(n.lanes, Var(f"lane{n.lanes}"))
            return _scalar(n.base) + _scalar(n.stride) * lane
        if isinstance(n, Broadcast):
            return _scalar(n.value)
        return None

    return transform(e, fn)


def _constraints(cond: Expr) -> tuple:
    """The understood conjuncts of ``cond`` as ``(terms, lo, hi)``: ``lo <= sum(terms) <= hi``.

    ``terms`` is a linear form's term dict (ir.bound.linear_form); ``lo``/``hi`` may be None.
    """
    out = []
    stack = [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, LogicalOp) and c.op == "and":
            stack += [c.a, c.b]
            continue
        if isinstance(c, Not) and isinstance(c.a, Not):
            stack.append(c.a.a)
            continue
        op = None
        if isinstance(c, CmpOp):
            op, a, b = c.op, c.a, c.b
        elif isinstance(c, Not) and isinstance(c.a, CmpOp):
            op, a, b = _FLIP[c.a.op], c.a.a, c.a.b
        elif isinstance(c, Not) and isinstance(c.a, LogicalOp) and c.a.op == "or":
            stack += [Not(c.a.a), Not(c.a.b)]
            continue
        if op is None or op == "ne" or is_float(a.dtype) or is_float(b.dtype):
            continue
        terms, k = linear_form(a - b)  # a - b (op) 0  <=>  terms (op) -k
        if not terms:
            continue
        lo = hi = None
        if op in ("lt", "le", "eq"):
            hi = -k - (1 if op == "lt" else 0)
        if op in ("gt", "ge", "eq"):
            lo = -k + (1 if op == "gt" else 0)
        out.append((terms, lo, hi))
    return tuple(out)


def _const_size(buf: T.Buffer) -> int | None:
    size = 1
    for d in buf.shape:
        v = const_value(d)
        if not isinstance(v, int):
            return None
        size *= v
    return size


def _int_range(e: Expr, env: dict) -> tuple | None:
    """``(lo, hi)`` of ``e`` by integer interval arithmetic when every variable of ``e`` has a
    constant range in ``env``; None otherwise (the fast path of :func:`_const_range`)."""
    if isinstance(e, IntImm):
        return e.value, e.value
    if isinstance(e, Var):
        r = env.get(e)
        if r is None or not isinstance(r.lo, IntImm) or not isinstance(r.extent, IntImm):
            return None
        return r.lo.value, r.lo.value + r.extent.value - 1
    if isinstance(e, Cast):
        return None if is_float(e.dtype) else _int_range(e.value, env)
    if not isinstance(e, BinaryOp) or is_float(e.dtype):
        return None
    a = _int_range(e.a, env)
    if a is None:
        return None
    b = _int_range(e.b, env)
    if b is None:
        return None
    op = e.op
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        corners = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(corners), max(corners)
    if op in ("min", "max"):
        pick = min if op == "min" else max
        return pick(a[0], b[0]), pick(a[1], b[1])
    if op in ("floordiv", "floormod") and b[0] == b[1] and b[0] > 0:
        c = b[0]
        if op == "floordiv":
            return a[0] // c, a[1] // c
        if a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1
    return None


def _const_range(e: Expr, env: dict) -> tuple | None:
    """``(lo, hi)`` of ``e`` with the ranges of ``env``, None when not two constants."""
    fast = _int_range(e, env)
    if fast is not None:
        return fast
    r = interval(e, env)
    if r is None or r.const_extent is None:
        return None
    lo = const_value(r.lo)
    if not isinstance(lo, int):
        return None
    return lo, lo + r.const_extent - 1


def _violation(rng: tuple | None, size: int) -> float:
    if rng is None:
        return float("inf")
    return max(0, -rng[0]) + max(0, rng[1] - (size - 1))


def _check_access(what: str, buf: T.Buffer, index: Expr, env: dict, guards: tuple,
                  lets: dict) -> None:
    size = _const_size(buf)
    if size is None:
        return
    idx = _scalar(substitute(index, lets))
    env = {**env, **{v: Interval(IntImm(0), IntImm(n)) for n, v in _LANE_VARS.items()}}
    rng = _const_range(idx, env)
    if rng is not None and _violation(rng, size) == 0:
        return
    lrng = _guarded_range(idx, env, guards, size)
    if lrng == "unreachable":
        return
    if lrng is not None:
        if _violation(lrng, size) == 0:
            return
        rng = lrng if rng is None or _violation(lrng, size) < _violation(rng, size) else rng
    if rng is None:
        return  # not analysable (symbolic or non-linear): not checked
    rrng = _refined_range(idx, env, guards, size)
    if rrng == "unreachable":
        return
    if rrng is not None:
        if _violation(rrng, size) == 0:
            return
        rng = rrng if _violation(rrng, size) < _violation(rng, size) else rng
    raise LoweringError(
        f"{what} buffer {buf.name!r} out of bounds: index {expr_str(index)} ranges over "
        f"[{rng[0]}, {rng[1]}] but {buf.name} has {size} elements (0 .. {size - 1})")


# ---------------------------------------------------------------------------
# Linear forms over atoms (loop variables, floordiv/floormod terms, guard variables)
# ---------------------------------------------------------------------------

def _linear(e: Expr, memo: dict | None = None) -> tuple:
    """``(terms, const)`` of ``e`` (ir.bound.linear_form) with split/fuse pairs joined:
    ``floordiv(a, c)*c*m + floormod(a, c)*m`` becomes ``a*m`` (repeatedly, so nested
    splits of a fused loop give back the fused index).  With ``memo`` (for expressions in
    the normal form of :func:`_canon`), the partner of ``floormod(a, c)`` is the normal form
    of ``floordiv(a, c)`` (``floordiv(floordiv(x, 7), 5)`` is written ``floordiv(x, 35)``)."""
    lin = linear_form if memo is None else (lambda x: _cached_linear_form(x, memo))
    terms, k = lin(e)
    terms = dict(terms)
    changed = True
    while changed:
        changed = False
        for key, (atom, m) in list(terms.items()):
            if not (isinstance(atom, BinaryOp) and atom.op == "floormod" and isinstance(atom.b, IntImm)):
                continue
            c = atom.b.value
            if c <= 0:
                continue
            if memo is None:
                partner: Expr = BinaryOp("floordiv", atom.a, atom.b, atom.dtype)
            else:
                partner = _canon_div("floordiv", atom.a, c, atom.dtype, memo)
            p_terms, p_k = lin(partner)
            if p_k or len(p_terms) != 1:
                continue
            (dkey, (_, dc)), = p_terms.items()
            if dc != 1 or dkey not in terms or terms[dkey][1] != m * c:
                continue
            del terms[key], terms[dkey]
            inner, k2 = lin(atom.a)
            k += m * k2
            for ikey, (iatom, ic) in inner.items():
                total = terms.get(ikey, (iatom, 0))[1] + m * ic
                if total:
                    terms[ikey] = (iatom, total)
                else:
                    terms.pop(ikey, None)
            changed = True
            break
    return terms, k


def _lin_range(terms: dict, k: int, ranges: dict, env: dict, sums: dict | None = None) -> tuple | None:
    """``(lo, hi)`` of ``sum(coef * atom) + k``, each atom over its own range (``ranges``
    by key, else :func:`_atom_range`); None when an atom has no constant range.
    ``sums``: guard bounds of whole linear sums (:func:`_sig` -> (lo, hi)), also used."""
    lo = hi = k
    for key, (atom, c) in terms.items():
        r = ranges.get(key)
        if r is None:
            r = _atom_range(atom, ranges, env, sums or {})
            if r is None:
                return None
            ranges[key] = r
        lo += c * r[0] if c > 0 else c * r[1]
        hi += c * r[1] if c > 0 else c * r[0]
    bound = (sums or {}).get(_sig(terms))
    if bound is not None:
        lo = lo if bound[0] is None else max(lo, bound[0] + k)
        hi = hi if bound[1] is None else min(hi, bound[1] + k)
    return lo, hi


def _sig(terms: dict) -> frozenset:
    return frozenset((key, c) for key, (_, c) in terms.items())


def _atom_range(atom: Expr, ranges: dict, env: dict, sums: dict) -> tuple | None:
    """The range of one atom; ``floordiv``/``floormod`` by a constant of a guarded sum use
    the guard (``j.0*3 + j.1 < 14`` bounds ``floordiv(j.0*3 + j.1, 2)`` by 6)."""
    if isinstance(atom, BinaryOp) and atom.op in ("floordiv", "floormod") and \
            isinstance(atom.b, IntImm) and atom.b.value > 0 and sums:
        c = atom.b.value
        inner, k = _linear(atom.a)
        r = _lin_range(inner, k, dict(ranges), env, sums)
        if r is not None:
            if r[0] > r[1]:
                return None
            if atom.op == "floordiv":
                return r[0] // c, r[1] // c
            if r[0] // c == r[1] // c:
                return r[0] % c, r[1] % c
            return 0, c - 1
    return _const_range(atom, env)


def _guarded_range(idx: Expr, env: dict, guards: tuple, size: int):
    """The range of ``idx`` over the loop ranges narrowed by ``guards`` (see the module
    docstring); "unreachable" when the guards cannot all hold; None when not analysable.

    Works on linear forms: a guard on one atom narrows its range; a guard ``lo <= g*K + rest
    <= hi`` (``g`` dividing K's coefficient ``a`` in the index) replaces ``a*K`` by
    ``(a/g)*(t - rest)`` with a fresh atom ``t`` ranging over the guard's bounds, chosen
    where that narrows the index's range most.
    """
    ranges: dict = {}  # atom key -> (lo, hi)
    multi: list = []
    forms = []
    for gterms, lo, hi in guards:
        joined = _linear(from_linear(gterms, 0))  # split/fuse pairs joined here too
        forms.append((joined, lo, hi))
        if _sig(joined[0]) != _sig(gterms) or joined[1]:
            forms.append(((gterms, 0), lo, hi))
    for (g_terms, g_k), lo, hi in forms:
        lo = None if lo is None else lo - g_k
        hi = None if hi is None else hi - g_k
        if not g_terms:
            if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                return "unreachable"
            continue
        if len(g_terms) == 1:
            (key, (atom, c)), = g_terms.items()
            cur = ranges.get(key) or _const_range(atom, env)
            if cur is None:
                continue
            a, b = cur
            if c > 0:
                b = b if hi is None else min(b, hi // c)
                a = a if lo is None else max(a, -((-lo) // c))
            else:
                a = a if hi is None else max(a, -(hi // -c))
                b = b if lo is None else min(b, lo // c)
            if a > b:
                return "unreachable"
            ranges[key] = (a, b)
            continue
        multi.append((g_terms, lo, hi))
    sums: dict = {}
    for g_terms, lo, hi in multi:
        old_lo, old_hi = sums.get(_sig(g_terms), (None, None))
        lo = lo if old_lo is None else (old_lo if lo is None else max(lo, old_lo))
        hi = hi if old_hi is None else (old_hi if hi is None else min(hi, old_hi))
        sums[_sig(g_terms)] = (lo, hi)
    best = None
    # The index with split/fuse pairs joined, and as written (guards may bound the parts).
    joined, plain = _linear(idx), linear_form(idx)
    for terms, k in ([joined, plain] if _sig(joined[0]) != _sig(plain[0]) else [joined]):
        rng = _eliminate_guards(terms, k, dict(ranges), list(multi), sums, env, size)
        if rng == "unreachable" or _violation(rng, size) == 0:
            return rng
        if _violation(rng, size) < _violation(best, size):
            best = rng
    return best


def _eliminate_guards(terms: dict, k: int, ranges: dict, multi: list, sums: dict, env: dict, size: int):
    best = _lin_range(terms, k, dict(ranges), env, sums)
    n = 0
    while n < len(multi) and _violation(best, size) > 0:
        g_terms, lo, hi = multi[n]
        n += 1
        grng = _lin_range(g_terms, 0, dict(ranges), env)
        if grng is None and (lo is None or hi is None):
            continue
        t_lo = lo if grng is None else (grng[0] if lo is None else max(lo, grng[0]))
        t_hi = hi if grng is None else (grng[1] if hi is None else min(hi, grng[1]))
        if t_lo > t_hi:
            return "unreachable"
        t = Var(f"guard{n}")
        (tkey, _), = linear_form(t)[0].items()
        choice = None
        for key, (atom, g) in g_terms.items():
            a = terms.get(key, (atom, 0))[1]
            if not a or a % g:
                continue
            new = _eliminate(terms, key, a // g, g_terms, t, tkey)
            rng = _lin_range(new, k, {**ranges, tkey: (t_lo, t_hi)}, env, sums)
            if _violation(rng, size) < _violation(best, size):
                choice, best = (key, atom, g, new), rng
        if choice is None:
            continue
        key, atom, g, terms = choice
        old = ranges.get(key) or _const_range(atom, env)
        ranges[tkey] = (t_lo, t_hi)
        # Later guards on the eliminated atom, and what was known of it, now speak of t.
        rest = []
        for terms2, lo2, hi2 in multi[n:]:
            a2 = terms2.get(key, (atom, 0))[1]
            if a2 and a2 % g == 0:
                terms2 = _eliminate(terms2, key, a2 // g, g_terms, t, tkey)
            rest.append((terms2, lo2, hi2))
        if old is not None:  # K = (t - rest) / g, so g*K = t - rest lies in g*old
            rest.append((_eliminate({key: (atom, g)}, key, 1, g_terms, t, tkey),
                         min(g * old[0], g * old[1]), max(g * old[0], g * old[1])))
        multi[n:] = rest
    return best


def _eliminate(terms: dict, key, f: int, g_terms: dict, t: Var, tkey) -> dict:
    """``terms`` with ``f*g*K`` (K the atom ``key``, g its coefficient in ``g_terms``) written
    as ``f*(t - rest)``, where ``t = sum(g_terms) = g*K + rest``."""
    out = dict(terms)
    atom, a = out.pop(key)
    g = g_terms[key][1]
    if a != f * g:
        out[key] = (atom, a - f * g)
    out[tkey] = (t, out.get(tkey, (t, 0))[1] + f)
    for k2, (atom2, c2) in g_terms.items():
        if k2 == key:
            continue
        total = out.get(k2, (atom2, 0))[1] - f * c2
        if total:
            out[k2] = (atom2, total)
        else:
            out.pop(k2, None)
    return out


# ---------------------------------------------------------------------------
# Refinement, when the analysis above does not prove an access in bounds
# ---------------------------------------------------------------------------

ENUMERATION_LIMIT = 1 << 14  # the most points of an index's variables that are enumerated
LP_ITERATIONS = 200  # pivots of the simplex at most (any dual point gives a bound)


class _Unreachable(Exception):
    """The guards of an access cannot all hold."""


def _refined_range(idx: Expr, env: dict, guards: tuple, size: int):
    """The range of ``idx`` by a stronger (and slower) analysis than :func:`_guarded_range`,
    tried only when that fails; "unreachable" or None as there.

    1. Guards on one variable narrow its range, ``floordiv``/``floormod`` terms that the
       narrowed ranges make exact are simplified away (:func:`_simplify_divmod`), and the
       index and the guards are put in a normal form (:func:`_canon`) where one quantity
       written two ways is one atom; then :func:`_guarded_range` again.
    2. The linear relaxation of the index and its guards (:func:`_relaxed_range`).
    3. When the variables of the index (with those of the guards that share a variable
       with it) have at most ENUMERATION_LIMIT points: the exact range, from the index at
       every point where the guards hold (:func:`_enumerated_range`).
    """
    memo: dict = {}
    try:
        # Simplified before and after the normal form: the normal form flattens
        # floordiv(floordiv(x, 10), 2) into floordiv(x, 20), but the ranges may make the
        # inner one exact.
        forms = list(guards)
        for canon in (False, True, True):
            env = _narrow(env, forms)
            simplified: dict = {}
            idx = _simplify_divmod(idx, env, simplified)
            forms = [_simplified_guard(g, env, simplified) for g in forms]
            if canon:
                idx = _canon(idx, memo)
                forms = _canon_guards(forms, memo)
        rng = _guarded_range(idx, env, tuple(forms), size)
        if rng == "unreachable" or (rng is not None and _violation(rng, size) == 0):
            return rng
        relaxed = _relaxed_range(idx, env, forms, size, memo)
        if relaxed is not None:
            rng = relaxed if rng is None else _intersect(rng, relaxed)
            if _violation(rng, size) == 0:
                return rng
        exact_rng = _enumerated_range(idx, env, forms)
        return rng if exact_rng is None else exact_rng
    except _Unreachable:
        return "unreachable"


# Normal form -----------------------------------------------------------------

def _const_div(e: Expr) -> int | None:
    """``c`` when ``e`` is ``floordiv``/``floormod`` of an int by a constant ``c > 0``."""
    if isinstance(e, BinaryOp) and e.op in ("floordiv", "floormod") and not is_float(e.dtype):
        c = const_value(e.b)
        if isinstance(c, int) and c > 0:
            return c
    return None


def _sorted_linear(terms: dict, k) -> Expr:
    """``from_linear`` with the terms in a fixed order (equal sums print equal)."""
    return from_linear(dict(sorted(terms.items(), key=lambda kv: (expr_str(kv[1][0]), repr(kv[0])))), k)


def _plus(terms: dict, k: int, e: Expr, scale: int = 1) -> Expr:
    """``sum(terms) + k + scale*e`` as a sorted linear form."""
    out = dict(terms)
    e_terms, e_k = linear_form(e)  # e is new: nothing to cache
    for key, (atom, coef) in e_terms.items():
        total = out.get(key, (atom, 0))[1] + scale * coef
        if total:
            out[key] = (atom, total)
        else:
            out.pop(key, None)
    return _sorted_linear(out, k + scale * e_k)


def _cached_linear_form(e: Expr, memo: dict) -> tuple:
    """ir.bound.linear_form(e), remembered in ``memo`` (which keeps ``e`` alive)."""
    key = ("linear", id(e))
    hit = memo.get(key)
    if hit is None or hit[0] is not e:
        hit = memo[key] = (e, linear_form(e))
    return hit[1]


def _canon(e: Expr, memo: dict) -> Expr:
    """``e`` with every ``floordiv``/``floormod`` by a positive constant in a normal form, so
    that one quantity written two ways is one atom (:func:`_canon_div`).  ``memo`` is kept
    for the whole refinement of one access (it keeps the expressions it has seen alive)."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = e
    if isinstance(e, BinaryOp):
        a, b = _canon(e.a, memo), _canon(e.b, memo)
        if a is not e.a or b is not e.b:
            out = BinaryOp(e.op, a, b, e.dtype)
        c = _const_div(out)
        if c is not None:
            out = _canon_div(e.op, a, c, e.dtype, memo)
    elif isinstance(e, Cast):
        v = _canon(e.value, memo)
        out = e if v is e.value else Cast(v, e.dtype)
    memo[id(e)] = (e, out)
    return out


def _canon_div(op: str, a: Expr, c: int, dtype: str, memo: dict) -> Expr:
    """The normal form of ``op(a, c)`` (``a`` in normal form, ``c > 0``), by identities of
    floor division by a positive constant that hold whatever the ranges:

    * the argument is a sorted linear form with split/fuse pairs joined (:func:`_linear`);
    * multiples of ``c`` come out: ``floordiv(c*x + y, c) = x + floordiv(y, c)``,
      ``floormod(c*x + y, c) = floormod(y, c)`` (constants too: ``0 <= y's constant < c``);
    * a common factor goes: ``floordiv(g*y, g*c) = floordiv(y, c)``,
      ``floormod(g*y, g*c) = g*floormod(y, c)``;
    * nested divisions flatten: ``floordiv(floordiv(x, d), c) = floordiv(x, d*c)``, and for
      ``c`` dividing ``d``: ``floormod(floormod(x, d), c) = floormod(x, c)``,
      ``floordiv(floormod(x, d), c) = floormod(floordiv(x, c), d/c)``.
    """
    key = ("div", op, id(a), c)
    hit = memo.get(key)
    if hit is not None and hit[0] is a:
        return hit[1]
    terms, k = _linear(a, memo)
    q_terms = {t: (atom, coef // c) for t, (atom, coef) in terms.items() if coef % c == 0}
    r_terms = {t: v for t, v in terms.items() if v[1] % c != 0}
    kq, kr = divmod(k, c)
    out: Expr
    if not r_terms:
        out = _sorted_linear(q_terms, kq) if op == "floordiv" else IntImm(kr)
    else:
        g = math.gcd(c, kr, *(coef for _, coef in r_terms.values()))
        inner: Expr | None = None
        if g > 1:
            y = _sorted_linear({t: (atom, coef // g) for t, (atom, coef) in r_terms.items()}, kr // g)
            inner = _canon_div(op, y, c // g, dtype, memo)
            if op == "floormod":
                inner = _plus({}, 0, inner, g)
        else:
            inner = _flatten(op, r_terms, kr, c, dtype, memo)
        if inner is None:
            inner = BinaryOp(op, _sorted_linear(r_terms, kr), IntImm(c), dtype)
        out = inner if op == "floormod" or not (q_terms or kq) else _plus(q_terms, kq, inner)
    memo[key] = (a, out)
    return out


def _flatten(op: str, r_terms: dict, kr: int, c: int, dtype: str, memo: dict) -> Expr | None:
    """Nested divisions in ``op(sum(r_terms) + kr, c)`` taken apart, or None:
    ``floordiv(x + floordiv(y, d), c) = floordiv(d*x + y, d*c)`` (x an integer sum), and for
    ``c`` dividing ``d``: ``floormod(x + floormod(y, d), c) = floormod(x + y, c)`` and
    ``floordiv(floormod(y, d), c) = floormod(floordiv(y, c), d/c)``."""
    for key, (atom, coef) in r_terms.items():
        d = _const_div(atom) if coef == 1 else None
        if d is None:
            continue
        assert isinstance(atom, BinaryOp)
        rest = {k2: v for k2, v in r_terms.items() if k2 != key}
        if op == "floordiv" and atom.op == "floordiv":
            if sum(1 for a, _ in r_terms.values() if isinstance(a, BinaryOp) and a.op == "floordiv") > 1:
                return None
            scaled = {k2: (a, m * d) for k2, (a, m) in rest.items()}
            return _canon_div("floordiv", _plus(scaled, kr * d, atom.a), d * c, dtype, memo)
        if op == "floormod" and atom.op == "floormod" and d % c == 0:
            return _canon_div("floormod", _plus(rest, kr, atom.a), c, dtype, memo)
        if op == "floordiv" and atom.op == "floormod" and d % c == 0 and not rest and not kr:
            return _canon_div("floormod", _canon_div("floordiv", atom.a, c, dtype, memo), d // c, dtype, memo)
    return None


def _simplify_divmod(e: Expr, env: dict, memo: dict) -> Expr:
    """``e`` with each ``floordiv``/``floormod`` by a constant ``c`` whose argument
    ``c*q + r`` has ``r`` within one period over the ranges of ``env`` replaced by ``q + d``
    / ``r - d*c`` (``d = floordiv(r, c)``, a constant): ir.bound.simplify_divmod, with the
    ranges of :func:`_const_range`.  ``memo`` (id -> (node, result)) is shared by the
    expressions simplified over one ``env``."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = e
    if isinstance(e, BinaryOp):
        a, b = _simplify_divmod(e.a, env, memo), _simplify_divmod(e.b, env, memo)
        if a is not e.a or b is not e.b:
            out = BinaryOp(e.op, a, b, e.dtype)
        c = _const_div(out)
        if c is not None:
            terms, k = linear_form(a)
            q_terms = {key: (atom, coef // c) for key, (atom, coef) in terms.items() if coef % c == 0}
            r = from_linear({key: v for key, v in terms.items() if v[1] % c != 0}, k)
            rng = _const_range(r, env)
            if rng is not None and rng[0] // c == rng[1] // c:
                d = rng[0] // c
                out = from_linear(q_terms, d) if e.op == "floordiv" else (r - IntImm(d * c) if d else r)
    elif isinstance(e, Cast):
        v = _simplify_divmod(e.value, env, memo)
        out = e if v is e.value else Cast(v, e.dtype)
    memo[id(e)] = (e, out)
    return out


def _simplified_guard(guard: tuple, env: dict, memo: dict) -> tuple:
    terms, lo, hi = guard
    e = from_linear(terms, 0)
    e2 = _simplify_divmod(e, env, memo)
    if e2 is e:
        return guard
    terms, k = linear_form(e2)
    return terms, (None if lo is None else lo - k), (None if hi is None else hi - k)


def _canon_guards(guards, memo: dict) -> list:
    """The guards ``(terms, lo, hi)`` with their sums in normal form."""
    out = []
    for terms, lo, hi in guards:
        t, k = _linear(_canon(from_linear(terms, 0), memo), memo)
        out.append((t, None if lo is None else lo - k, None if hi is None else hi - k))
    return out


# Ranges ------------------------------------------------------------------------

def _var_range(v: Expr, env: dict) -> tuple | None:
    r = env.get(v) if isinstance(v, Var) else None
    if r is None or not isinstance(r.lo, IntImm) or not isinstance(r.extent, IntImm):
        return None
    return r.lo.value, r.lo.value + r.extent.value - 1


def _atom_bounds(c, lo, hi) -> tuple:
    """The bounds ``(a, b)`` (None: unbounded) of an integer x with ``lo <= c*x <= hi``."""
    if c < 0:
        c, lo, hi = -c, (None if hi is None else -hi), (None if lo is None else -lo)
    return (None if lo is None else math.ceil(Fraction(lo) / c),
            None if hi is None else math.floor(Fraction(hi) / c))


def _intersect(r: tuple, bounds: tuple) -> tuple:
    """``r`` cut to ``bounds`` (None: unbounded); raises _Unreachable when empty."""
    a = r[0] if bounds[0] is None else (bounds[0] if r[0] is None else max(r[0], bounds[0]))
    b = r[1] if bounds[1] is None else (bounds[1] if r[1] is None else min(r[1], bounds[1]))
    if a is not None and b is not None and a > b:
        raise _Unreachable
    return a, b


def _narrow(env: dict, forms: list) -> dict:
    """``env`` with each guard on a single variable applied to its range."""
    env = dict(env)
    for terms, lo, hi in forms:
        if len(terms) == 1:
            (atom, c), = terms.values()
            r = _var_range(atom, env)
            if r is not None:
                a, b = _intersect(r, _atom_bounds(c, lo, hi))
                env[atom] = Interval(IntImm(a), IntImm(b - a + 1))
    return env


# Linear relaxation -------------------------------------------------------------

class _NoRelaxation(Exception):
    """An atom without a constant range: the relaxation cannot be built."""


class _Relaxation:
    """The index and its guards as a linear program over integer columns: the loop variables,
    each ``floordiv(a, c)`` (with ``0 <= a - c*floordiv(a, c) <= c - 1``) and any other atom
    with a constant range; ``floormod(a, c)`` is ``a - c*floordiv(a, c)``.  Every integer point
    that the program reaches satisfies the rows, so a bound of the relaxation holds."""

    def __init__(self, env: dict, memo: dict):
        self.env, self.memo = env, memo
        self.columns: dict = {}  # atom key -> (coefs, const)
        self.lo: list = []
        self.hi: list = []
        self.rows: list = []  # (coefs: column -> int, lo, hi): lo <= sum <= hi (None: unbounded)
        self.divs: list = []  # (column, argument (coefs, const), c) of each floordiv column
        self.mods: list = []  # (row index, argument (coefs, const), c, row constant) of each floormod row

    def form(self, terms: dict, k) -> tuple:
        """``sum(terms) + k`` over the columns: ``(coefs, const)``."""
        out: dict = {}
        for key, (atom, coef) in terms.items():
            a_coefs, a_k = self.atom(key, atom)
            for col, v in a_coefs.items():
                out[col] = out.get(col, 0) + coef * v
            k += coef * a_k
        return {col: v for col, v in out.items() if v}, k

    def box(self, coefs: dict, k) -> tuple:
        lo = hi = k
        for col, v in coefs.items():
            lo += v * (self.lo[col] if v > 0 else self.hi[col])
            hi += v * (self.hi[col] if v > 0 else self.lo[col])
        return lo, hi

    def column(self, lo: int, hi: int) -> dict:
        self.lo.append(lo)
        self.hi.append(hi)
        return {len(self.lo) - 1: 1}

    def atom(self, key, atom: Expr) -> tuple:
        if key in self.columns:
            return self.columns[key]
        c = _const_div(atom)
        rng = _var_range(atom, self.env) if isinstance(atom, Var) else _const_range(atom, self.env)
        if c is not None:
            assert isinstance(atom, BinaryOp)
            a = self.form(*_linear(atom.a, self.memo))
            if atom.op == "floordiv":
                a_lo, a_hi = self.box(*a)
                lo, hi = _intersect((a_lo // c, a_hi // c), rng or (None, None))
                out = (self.column(lo, hi), 0)
                self.rows.append(_row_sum(a, out, -c, 0, c - 1))
                self.divs.append((len(self.lo) - 1, a, c))
            else:
                div = _canon_div("floordiv", atom.a, c, atom.dtype, self.memo)
                d = self.form(*_cached_linear_form(div, self.memo))
                r = _intersect((0, c - 1), rng or (None, None))
                out = _row_sum(a, d, -c, None, None)[0], a[1] - c * d[1]
                self.rows.append((out[0], r[0] - out[1], r[1] - out[1]))
                self.mods.append((len(self.rows) - 1, a, c, out[1]))
        elif rng is None:
            raise _NoRelaxation
        else:
            out = (self.column(*rng), 0)
        self.columns[key] = out
        return out


def _row_sum(a: tuple, d: tuple, f: int, lo, hi) -> tuple:
    """The row ``lo <= a + f*d <= hi`` (a, d as ``(coefs, const)``)."""
    coefs = dict(a[0])
    for col, v in d[0].items():
        coefs[col] = coefs.get(col, 0) + f * v
    k = a[1] + f * d[1]
    return ({col: v for col, v in coefs.items() if v},
            None if lo is None else lo - k, None if hi is None else hi - k)


def _relaxed_range(idx: Expr, env: dict, forms: list, size: int, memo: dict) -> tuple | None:
    """The range of ``idx`` over the linear relaxation (:class:`_Relaxation`) of the index
    and its guards, cut to the values the integer index can take; None when an atom has no
    constant range.  This relates any decompositions of the fused loops at once and bounds
    differences of ``floordiv`` terms."""
    lp = _Relaxation(env, memo)
    try:
        obj, k = lp.form(*_linear(idx, memo))
    except _NoRelaxation:
        return None
    for terms, lo, hi in forms:
        try:
            coefs, gk = lp.form(terms, 0)
        except _NoRelaxation:
            continue  # a guard left out: the relaxation only grows
        lp.rows.append((coefs, None if lo is None else lo - gk, None if hi is None else hi - gk))
    n = len(lp.lo)

    def bounds(coefs: dict, k) -> tuple:
        """The range of the integer form ``coefs.x + k`` over the relaxation."""
        a_rows, b = [], []
        for row, lo, hi in lp.rows:
            if hi is not None:
                a_rows.append(row)
                b.append(hi)
            if lo is not None:
                a_rows.append({col: -v for col, v in row.items()})
                b.append(-lo)
        hi_bound = k + _lp_max(coefs, a_rows, b, lp.lo, lp.hi, n)
        lo_bound = k - _lp_max({col: -v for col, v in coefs.items()}, a_rows, b, lp.lo, lp.hi, n)
        if lo_bound > hi_bound:
            raise _Unreachable
        g = 0
        for v in coefs.values():
            g = math.gcd(g, v)
        g = g or 1
        return k + g * math.ceil((lo_bound - k) / g), k + g * math.floor((hi_bound - k) / g)

    rng = bounds(obj, k)
    if _violation(rng, size) == 0:
        return rng
    # Round the relaxation at each floordiv/floormod: the integer range of its argument
    # over the relaxation gives its own range (a cut that the relaxation alone lacks).
    for col, (a, a_k), c in lp.divs:
        a_lo, a_hi = bounds(a, a_k)
        lp.lo[col], lp.hi[col] = _intersect((lp.lo[col], lp.hi[col]), (a_lo // c, a_hi // c))
    for row, (a, a_k), c, m_k in lp.mods:
        a_lo, a_hi = bounds(a, a_k)
        if a_lo // c == a_hi // c:  # one period: floormod(a, c) ranges over a_lo % c .. a_hi % c
            coefs, lo, hi = lp.rows[row]
            lo, hi = _intersect((lo, hi), (a_lo % c - m_k, a_hi % c - m_k))
            lp.rows[row] = (coefs, lo, hi)
    return _intersect(rng, bounds(obj, k))


def _lp_max(c: dict, a_rows: list, b: list, lo: list, hi: list, n: int) -> Fraction:
    """An upper bound of ``c.x`` over ``{x: a.x <= b for each row, lo <= x <= hi}``.

    Any ``y >= 0`` gives one, exactly: ``c.x = y.(A x) + (c - y A).x <= y.b + sum_j max over
    [lo_j, hi_j] of (c - y A)_j x_j``, computed here in integers.  ``y`` is the dual solution of
    a floating-point simplex on the dual ``min b.y + hi.s - lo.t  s.t.  A^T y + s - t = c,
    y, s, t >= 0`` (which has an obvious feasible basis), rounded down to multiples of 2**-30:
    rounding only makes the bound weaker, never wrong."""
    m = len(a_rows)
    y = np.zeros(m)
    if m and n:
        at = np.zeros((n, m))
        for i, row in enumerate(a_rows):
            for col, v in row.items():
                at[col, i] = v
        tab = np.hstack([at, np.eye(n), -np.eye(n), np.array([[float(c.get(j, 0))] for j in range(n)])])
        cost = np.concatenate([np.array(b, float), np.array(hi, float), -np.array(lo, float)])
        neg = tab[:, -1] < 0
        tab[neg] *= -1
        basis = np.where(neg, m + n + np.arange(n), m + np.arange(n))
        for _ in range(LP_ITERATIONS):
            reduced = cost - cost[basis] @ tab[:, :-1]
            entering = np.nonzero(reduced < -1e-9)[0]
            if not entering.size:
                break
            e = entering[0]  # Bland's rule: no cycling
            column = tab[:, e]
            rows = np.nonzero(column > 1e-9)[0]
            if not rows.size:
                break  # the dual is unbounded: keep the bound of the current point
            ratios = tab[rows, -1] / column[rows]
            best = ratios.min()
            ties = rows[ratios <= best + 1e-12]
            r = ties[np.argmin(basis[ties])]
            tab[r] /= tab[r, e]
            others = np.arange(n) != r
            tab[others] -= np.outer(tab[others, e], tab[r])
            basis[r] = e
        for j, v in enumerate(basis):
            if v < m:
                y[v] = max(tab[j, -1], 0.0)
    # The bound in integers, for y rounded down to multiples of 1/SCALE (every input is an int).
    scale = 1 << 30
    yq = [int(v * scale) if v > 0 else 0 for v in y]
    red = [c.get(j, 0) * scale for j in range(n)]
    bound = 0
    for i, row in enumerate(a_rows):
        if yq[i]:
            bound += yq[i] * b[i]
            for col, v in row.items():
                red[col] -= yq[i] * v
    for j in range(n):
        bound += max(red[j] * lo[j], red[j] * hi[j])
    return Fraction(bound, scale)


# Enumeration -------------------------------------------------------------------

def _enumerated_range(idx: Expr, env: dict, forms: list) -> tuple | None:
    """The exact range of ``idx`` where the guards ``forms`` hold, from its value at every
    point of its variables (and of the variables of the guards that share one with them,
    transitively); None when a variable has no constant range, there are more than
    ENUMERATION_LIMIT points, or the index is not integer arithmetic of the variables.
    Guards that cannot be evaluated are left out (more points: the range still holds)."""
    names = set(free_vars(idx))
    g_vars = [{v for atom, _ in terms.values() for v in free_vars(atom)} for terms, _, _ in forms]
    used = [False] * len(forms)
    grown = True
    while grown:
        grown = False
        for n, vs in enumerate(g_vars):
            if not used[n] and vs & names:
                used[n], grown = True, True
                names |= vs
    order = sorted(names, key=lambda v: v.name)
    points = 1
    values: dict = {}
    for n, v in enumerate(order):
        r = _var_range(v, env)
        if r is None:
            return None
        points *= r[1] - r[0] + 1
        if points > ENUMERATION_LIMIT:
            return None
        axis = [1] * len(order)
        axis[n] = r[1] - r[0] + 1
        values[id(v)] = np.arange(r[0], r[1] + 1, dtype=np.int64).reshape(axis)

    def ev(e: Expr):
        key = id(e)
        if key not in values:
            values[key] = _evaluate(e, ev)
        return values[key]

    x = ev(idx)
    if x is None:
        return None
    mask = np.ones([1] * len(order), dtype=bool)
    for n, (terms, lo, hi) in enumerate(forms):
        if not used[n]:
            continue
        parts = [ev(atom) for atom, _ in terms.values()]
        if any(p is None for p in parts) or \
                sum(abs(int(c)) * int(np.abs(p).max()) for (_, c), p in zip(terms.values(), parts)) >= 1 << 62:
            continue
        total = sum(int(c) * p for (_, c), p in zip(terms.values(), parts))
        if lo is not None:
            mask = mask & (total >= lo)
        if hi is not None:
            mask = mask & (total <= hi)
    shape = np.broadcast_shapes(np.shape(x), mask.shape)
    mask = np.broadcast_to(mask, shape)
    if not mask.any():
        raise _Unreachable
    picked = np.broadcast_to(x, shape)[mask]
    return int(picked.min()), int(picked.max())


def _evaluate(e: Expr, ev):
    """``e`` over numpy arrays of its variables' values (``ev`` evaluates a child); None
    for anything but integer arithmetic (``floordiv``/``floormod`` by positive constants)."""
    if isinstance(e, IntImm):
        return np.int64(e.value)
    if isinstance(e, Var):
        return None  # not among the enumerated variables
    if isinstance(e, Cast) and not is_float(e.dtype):
        return ev(e.value)
    if not isinstance(e, BinaryOp) or is_float(e.dtype):
        return None
    if e.op in ("floordiv", "floormod") and _const_div(e) is None:
        return None
    a, b = ev(e.a), ev(e.b)
    if a is None or b is None:
        return None
    big_a, big_b = int(np.abs(a).max()), int(np.abs(b).max())
    if (big_a * big_b if e.op == "mul" else big_a + big_b) >= 1 << 62:
        return None  # int64 could wrap around
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
          "floormod": np.remainder, "min": np.minimum, "max": np.maximum}.get(e.op)
    return None if fn is None else fn(a, b)
