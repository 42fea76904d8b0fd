"""Belt and braces before a program is compiled: every load and store provably in bounds.

    check_bounds(func)   # raises LoweringError naming the buffer, the index and its range

The lowered program (``ir.tir``) is walked with an explicit stack, keeping

* the range of every loop variable with a constant extent (``For``: min .. min+extent-1),
* the conditions that guard the access: enclosing ``IfThenElse`` (the ``likely`` guards
  of non-divisible splits), ``Store`` predicates and the branches of ``Select``
  (code generation evaluates a guarded branch only where its condition holds),
* ``LetStmt`` bindings (substituted into the indices).

Each flat index of a ``BufferLoad`` / ``Store`` (each lane of a ``Ramp``: a lane variable
ranging over ``0 .. lanes-1`` stands for the lane) is bounded with ``arith.int_set.const_range``
(``arith.const_int_bound``, then the symbolic interval): a narrowing integer cast of a range
that does not fit its dtype ranges over the whole dtype, and ``floormod`` by a negative
divisor ``d`` over ``(d, 0]``.  This module is the verifier only: every analysis it runs
(bounds, linear forms, the div/mod normal form, the LP, the enumerator) is ``scheduler_core.arith``.
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
  ``i < 10``; ``arith.divmod_form.simplify_divmod``);
* indices and guards are put in a normal form (``arith.divmod_form.DivModNormalForm``) by
  identities of floor division by a positive constant (nested divisions flattened, multiples
  and common factors taken out), so that a quantity written in two decompositions of a
  fused loop is one atom, and the analysis above runs again;
* the linear relaxation: each ``floordiv(a, c)`` is an integer unknown with
  ``0 <= a - c*floordiv(a, c) <= c - 1``, ``floormod(a, c)`` is ``a - c*floordiv(a, c)``, the
  guards are constraints, and the index is bounded by linear programming, rounded down to
  integers at each ``floordiv``/``floormod`` and at the end.  This relates guards and indices
  written in any decompositions of a fused loop and bounds differences of ``floordiv`` terms
  (``floordiv(22*i + j, 33) - floordiv(22*i, 33)`` is 0 or 1).  Each bound is a dual
  certificate evaluated in exact rational arithmetic: a floating-point simplex only picks the
  multipliers, so rounding can weaken a bound but never make it wrong (``arith.lp``);
* failing that, when the variables of the index (with those of the guards tied to them)
  have at most ENUMERATION_LIMIT points, the index is evaluated at each point where the
  guards hold: the exact range (``arith.enumeration``; casts wrap as in the compiled code).

Known limit: an index whose bound needs integer reasoning beyond the relaxation (a case split
on a variable) over more than ENUMERATION_LIMIT points is refused although it may be safe.

A gathered axis index is a ``CheckedIndex`` (lowering wraps it; clamped at run time), which
ranges over ``0 .. extent - 1`` here, so the accesses of gathers are proved like the others.
Not checked (accepted): a buffer whose size is not a constant (symbolic shapes), and an
index whose range is not a pair of constants (a loop of symbolic extent, a product of loop
variables).
"""

from __future__ import annotations

import math
from fractions import Fraction

from scheduler_core.arith.divmod_form import DivModNormalForm, simplify_divmod
from scheduler_core.arith.enumeration import enumerated_range
from scheduler_core.arith.int_set import (
    Infeasible,
    Interval,
    const_range,
    intersect_bounds,
    interval,
    range_interval,
)
from scheduler_core.arith.linear_form import from_linear, joined_linear_form, linear_form, signature
from scheduler_core.arith.lp import relaxed_range
from scheduler_core.base.errors import LoweringError
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import (
    BinaryOp,
    Broadcast,
    BufferLoad,
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
from scheduler_core.ir.expr_functor import children, substitute, transform, walk
from scheduler_core.ir.simplify import const_value

_LANE_VARS: dict = {}  # lanes -> the Var that stands for the lane of a Ramp
_LANE_RANGES: dict = {}  # that Var -> its range 0 .. lanes-1
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
            lane = _LANE_VARS.get(n.lanes)
            if lane is None:
                lane = _LANE_VARS[n.lanes] = Var(f"lane{n.lanes}")
                _LANE_RANGES[lane] = range_interval(0, n.lanes - 1)
            return _scalar(n.base) + _scalar(n.stride) * lane
        if isinstance(n, Broadcast):
            return _scalar(n.value)
        return None

    return transform(e, fn)


def _constraints(cond: Expr) -> tuple:
    """The understood conjuncts of ``cond`` as ``(terms, lo, hi)``: ``lo <= sum(terms) <= hi``.

    ``terms`` is a linear form's term dict (arith.linear_form.linear_form); ``lo``/``hi`` may be None.
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


def _violation(rng: tuple | None, size: int) -> float:
    if rng is None:
        return float("inf")
    return max(0, -rng[0]) + max(0, rng[1] - (size - 1))


def _check_access(what: str, buf: T.Buffer, index: Expr, env: dict, guards: tuple,
                  lets: dict) -> None:
    size = buf.num_elements
    if size is None:
        return
    idx = _scalar(substitute(index, lets))
    env = {**env, **_LANE_RANGES}
    rng = const_range(idx, env)
    if rng is not None and _violation(rng, size) == 0:
        return
    cases = _select_cases(idx) if any(isinstance(n, Select) for n in walk(idx)) else None
    if cases is not None:  # a select in the index: each branch under its condition
        for conds, branch in cases:
            _check_index(what, buf, index, branch, env, guards + conds, size)
        return
    _check_index(what, buf, index, idx, env, guards, size)


MAX_SELECT_CASES = 16  # branch combinations of the selects of one index checked apart


def _select_cases(e: Expr) -> list | None:
    """``[(constraints, e without selects)]``: ``e`` with each of its selects replaced by one
    branch, with the branch's condition (its negation for the false branch) as constraints
    (:func:`_constraints`); every value of ``e`` is the value of a case whose constraints
    hold.  None when there are more than :data:`MAX_SELECT_CASES` cases."""
    sel = next((n for n in walk(e) if isinstance(n, Select)), None)
    if sel is None:
        return [((), e)]
    out: list = []
    for branch, cond in ((sel.true_value, sel.cond), (sel.false_value, Not(sel.cond))):
        rest = _select_cases(transform(e, _replacing(sel, branch)))
        if rest is None:
            return None
        out += [(_constraints(cond) + conds, x) for conds, x in rest]
        if len(out) > MAX_SELECT_CASES:
            return None
    return out


def _replacing(old: Expr, new: Expr):
    """A :func:`transform` function that puts ``new`` in place of the node ``old``."""
    def fn(n: Expr) -> Expr | None:
        return new if n is old else None
    return fn


def _check_index(what: str, buf: T.Buffer, index: Expr, idx: Expr, env: dict, guards: tuple, size: int) -> None:
    """Prove ``idx`` (``index`` with lets and lanes substituted) within ``size`` under ``guards``,
    or raise LoweringError naming ``index``."""
    rng = const_range(idx, env)
    if rng is not None and _violation(rng, size) == 0:
        return
    for narrow in (_guarded_range, _refined_range):  # cheaper first; each may prove the access
        found = narrow(idx, env, guards, size)
        if found == "unreachable" or (found is not None and _violation(found, size) == 0):
            return
        if found is not None and (rng is None or _violation(found, size) < _violation(rng, size)):
            rng = found
        if rng is None:
            return  # not analysable (symbolic or non-linear): not checked
    assert rng is not None  # the loop above returns while no range is known
    raise LoweringError(
        f"{what} buffer {buf.name!r} out of bounds: index {expr_str(index)} ranges over "
        f"[{rng[0]}, {rng[1]}] but {buf.name} has {size} elements (0 .. {size - 1})")


# ---------------------------------------------------------------------------
# Guards over linear forms (atoms: loop variables, floordiv/floormod terms, guard variables)
# ---------------------------------------------------------------------------

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
    bound = (sums or {}).get(signature(terms))
    if bound is not None:
        lo = lo if bound[0] is None else max(lo, bound[0] + k)
        hi = hi if bound[1] is None else min(hi, bound[1] + k)
    return lo, hi


def _atom_range(atom: Expr, ranges: dict, env: dict, sums: dict) -> tuple | None:
    """The range of one atom; ``floordiv``/``floormod`` by a constant of a guarded sum use
    the guard (``j.0*3 + j.1 < 14`` bounds ``floordiv(j.0*3 + j.1, 2)`` by 6)."""
    if isinstance(atom, BinaryOp) and atom.op in ("floordiv", "floormod") and \
            isinstance(atom.b, IntImm) and atom.b.value > 0 and sums:
        c = atom.b.value
        inner, k = joined_linear_form(atom.a)
        r = _lin_range(inner, k, dict(ranges), env, sums)
        if r is not None:
            if r[0] > r[1]:
                return None
            if atom.op == "floordiv":
                return r[0] // c, r[1] // c
            if r[0] // c == r[1] // c:
                return r[0] % c, r[1] % c
            return 0, c - 1
    return const_range(atom, env)


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
        joined = joined_linear_form(from_linear(gterms, 0))  # split/fuse pairs joined here too
        forms.append((joined, lo, hi))
        if signature(joined[0]) != signature(gterms) or joined[1]:
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
            cur = ranges.get(key) or const_range(atom, env)
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
        old_lo, old_hi = sums.get(signature(g_terms), (None, None))
        lo = lo if old_lo is None else (old_lo if lo is None else max(lo, old_lo))
        hi = hi if old_hi is None else (old_hi if hi is None else min(hi, old_hi))
        sums[signature(g_terms)] = (lo, hi)
    best = None
    # The index with split/fuse pairs joined, and as written (guards may bound the parts).
    joined, plain = joined_linear_form(idx), linear_form(idx)
    for terms, k in ([joined, plain] if signature(joined[0]) != signature(plain[0]) else [joined]):
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
        old = ranges.get(key) or const_range(atom, env)
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


def _refined_range(idx: Expr, env: dict, guards: tuple, size: int):
    """The range of ``idx`` by a stronger (and slower) analysis than :func:`_guarded_range`,
    tried only when that fails; "unreachable" or None as there.

    1. Guards on one variable narrow its range, ``floordiv``/``floormod`` terms that the
       narrowed ranges make exact are simplified away (arith.divmod_form.simplify_divmod), and
       the index and the guards are put in a normal form (arith.divmod_form.DivModNormalForm)
       where one quantity written two ways is one atom; then :func:`_guarded_range` again.
    2. The linear relaxation of the index and its guards (arith.lp.relaxed_range).
    3. When the variables of the index (with those of the guards that share a variable
       with it) have at most ENUMERATION_LIMIT points: the exact range, from the index at
       every point where the guards hold (arith.enumeration.enumerated_range).
    """
    nf = DivModNormalForm()
    try:
        # Simplified before and after the normal form: the normal form flattens
        # floordiv(floordiv(x, 10), 2) into floordiv(x, 20), but the ranges may make the
        # inner one exact.
        forms = list(guards)
        for canon in (False, True, True):
            env = _narrow(env, forms)
            simplified: dict = {}
            idx = simplify_divmod(idx, env, const_range, simplified)
            forms = [_simplified_guard(g, env, simplified) for g in forms]
            if canon:
                idx = nf.normalize(idx)
                forms = _normal_guards(forms, nf)
        rng = _guarded_range(idx, env, tuple(forms), size)
        if rng == "unreachable" or (rng is not None and _violation(rng, size) == 0):
            return rng
        relaxed = relaxed_range(idx, env, forms, nf, lambda r: _violation(r, size) == 0)
        if relaxed is not None:
            rng = relaxed if rng is None else intersect_bounds(rng, relaxed)
            if _violation(rng, size) == 0:
                return rng
        exact_rng = enumerated_range(idx, env, forms, ENUMERATION_LIMIT)
        return rng if exact_rng is None else exact_rng
    except Infeasible:
        return "unreachable"


def _simplified_guard(guard: tuple, env: dict, memo: dict) -> tuple:
    terms, lo, hi = guard
    e = from_linear(terms, 0)
    e2 = simplify_divmod(e, env, const_range, memo)
    if e2 is e:
        return guard
    terms, k = linear_form(e2)
    return terms, (None if lo is None else lo - k), (None if hi is None else hi - k)


def _normal_guards(guards, nf: DivModNormalForm) -> list:
    """The guards ``(terms, lo, hi)`` with their sums in normal form."""
    out = []
    for terms, lo, hi in guards:
        t, k = nf.joined(nf.normalize(from_linear(terms, 0)))
        out.append((t, None if lo is None else lo - k, None if hi is None else hi - k))
    return out


def _var_range(v: Expr, env: dict) -> tuple | None:
    r = env.get(v) if isinstance(v, Var) else None
    return None if r is None else r.const_bounds


def _atom_bounds(c, lo, hi) -> tuple:
    """The bounds ``(a, b)`` (None: unbounded) of an integer x with ``lo <= c*x <= hi``."""
    if c < 0:
        c, lo, hi = -c, (None if hi is None else -hi), (None if lo is None else -lo)
    return (None if lo is None else math.ceil(Fraction(lo) / c),
            None if hi is None else math.floor(Fraction(hi) / c))


def _narrow(env: dict, forms: list) -> dict:
    """``env`` with each guard on a single variable applied to its range."""
    env = dict(env)
    for terms, lo, hi in forms:
        if len(terms) == 1:
            (atom, c), = terms.values()
            r = _var_range(atom, env)
            if r is not None:
                env[atom] = range_interval(*intersect_bounds(r, _atom_bounds(c, lo, hi)))
    return env
