"""Linear forms of integer expressions: ``sum(coef * atom) + const``.

    linear_form(e)         -> (terms, const)   terms: {key: (atom, coef)}, coef != 0
    from_linear(terms, c)  -> Expr             (and canonical(e) = from_linear(*linear_form(e)))
    joined_linear_form(e)  -> (terms, const)   split/fuse pairs joined back into their argument

An atom is a maximal sub-expression that is not ``add``/``sub``/``mul`` by a constant: a
variable, a ``floordiv``/``floormod`` term, a load, a cast...  Atoms are keyed structurally
(two equal ``floordiv(i, 4)`` nodes are one atom; two ``Var("i")`` are two variables), so
``terms`` compare as dicts.  The idea is TVM's linear/canonical form (src/arith/canonical_simplify.cc
``SumExpr``), without its division normal form (see ``divmod_form`` for that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.ir.expr import BinaryOp, Expr, IntImm, Var, as_expr, expr_str
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.simplify import const_value, simplify

LinearForm = tuple  # (terms: {key: (atom, coef)}, const: int)


# atom_key of a compound atom, by node identity (the key holds the node, so its id and its
# variables' ids stay valid; nodes are immutable, so the printed form cannot change).  The
# same atoms come back many times: every linear form of an index meets its floordiv/floormod
# and load atoms again.
_ATOM_KEYS: BoundedCache[Expr, tuple] = BoundedCache(1 << 14)


def atom_key(e: Expr) -> tuple:
    """The key of atom ``e`` in a linear form: a variable by identity, anything else by its
    printed form and the identities of its variables."""
    if isinstance(e, Var):
        return ("v", id(e))
    key = _ATOM_KEYS.get(e)
    if key is None:
        ids = tuple(sorted(id(n) for n in walk(e) if isinstance(n, Var)))
        key = _ATOM_KEYS.put(e, ("a", expr_str(e), ids))
    return key


def linear_form(e: Any) -> LinearForm:
    """``(terms: {key: (atom, coef)}, const)`` of an integer expression (coefs never 0).

    ``add``, ``sub`` and ``mul`` by a constant are expanded; every other node is an atom.
    Never raises.
    """
    t = type(e)  # exact classes first (the node classes are final), then the general case
    if t is BinaryOp:
        op = e.op
        if op == "add" or op == "sub":
            a, b = e.a, e.b
            ta, tb = type(a), type(b)
            if ta is IntImm:  # leaf operands inline: a sum of a variable and a constant
                terms, k = {}, a.value
            elif ta is Var:
                terms, k = {("v", id(a)): (a, 1)}, 0
            else:
                terms, k = linear_form(a)
            if op == "add":
                if tb is IntImm:
                    return terms, k + b.value
                if tb is Var:
                    return _add_in_place(terms, {("v", id(b)): (b, 1)}, 1), k
                tb_terms, kb = linear_form(b)
                return _add_in_place(terms, tb_terms, 1), k + kb
            tb_terms, kb = linear_form(b)
            return _add_in_place(terms, tb_terms, -1), k - kb
        if op == "mul":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                c = y.value if type(y) is IntImm else const_value(y)
                if isinstance(c, int):
                    t0, k0 = linear_form(x)
                    out = {}
                    for key, (atom, v) in t0.items():
                        vc = v * c
                        if vc != 0:
                            out[key] = (atom, vc)
                    return out, k0 * c
        return {atom_key(e): (e, 1)}, 0
    if t is IntImm:
        return {}, e.value
    if t is Var:
        return {("v", id(e)): (e, 1)}, 0
    return _linear_form_general(as_expr(e))


def _linear_form_general(e: Expr) -> LinearForm:
    """:func:`linear_form` of an Expr by ``isinstance`` tests (for classes met rarely)."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, BinaryOp) and e.op in ("add", "sub"):
        ta, ca = linear_form(e.a)
        tb, cb = linear_form(e.b)
        sign = 1 if e.op == "add" else -1
        return add_terms(ta, tb, sign), ca + sign * cb
    if isinstance(e, BinaryOp) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            c = const_value(y)
            if isinstance(c, int):
                t, k0 = linear_form(x)
                return {k: (a, v * c) for k, (a, v) in t.items() if v * c != 0}, k0 * c
    return {atom_key(e): (e, 1)}, 0


def _add_in_place(terms: dict, more: dict, scale: int) -> dict:
    """:func:`add_terms` written into ``terms`` itself (a fresh dict the caller owns)."""
    for key, (atom, coef) in more.items():
        old = terms.get(key)
        total = scale * coef if old is None else old[1] + scale * coef
        if total:
            terms[key] = (atom, total)
        else:
            terms.pop(key, None)
    return terms


def add_terms(terms: dict, more: dict, scale: int = 1) -> dict:
    """``terms + scale * more`` (term dicts of linear forms), zero coefficients dropped."""
    out = dict(terms)
    for key, (atom, coef) in more.items():
        total = out.get(key, (atom, 0))[1] + scale * coef
        if total:
            out[key] = (atom, total)
        else:
            out.pop(key, None)
    return out


def from_linear(terms: dict, c: int) -> Expr:
    """The expression ``sum(coef * atom) + c`` (terms in their dict order)."""
    out: Expr | None = None
    for atom, coef in terms.values():
        # atom * IntImm(coef) and out + term, built directly when no dtype promotion is due
        if coef == 1:
            term = atom
        elif isinstance(atom, Expr) and atom.dtype == "int32":
            term = BinaryOp("mul", atom, IntImm(coef), "int32")
        else:
            term = atom * IntImm(coef)
        if out is None:
            out = term
        elif isinstance(out, Expr) and isinstance(term, Expr) and out.dtype == term.dtype:
            out = BinaryOp("add", out, term, out.dtype)
        else:
            out = out + term
    if out is None:
        return IntImm(c)
    return simplify(out + IntImm(c)) if c else out


def sorted_linear(terms: dict, c: int) -> Expr:
    """:func:`from_linear` with the terms in a fixed order, so that equal sums print equal."""
    return from_linear(dict(sorted(terms.items(), key=lambda kv: (expr_str(kv[1][0]), repr(kv[0])))), c)


def canonical(e: Expr) -> Expr:
    """``e`` rewritten as a tidy linear form (constants gathered)."""
    return from_linear(*linear_form(e))


def signature(terms: dict) -> frozenset:
    """The terms of a linear form as a hashable set of ``(key, coef)``."""
    return frozenset((key, c) for key, (_, c) in terms.items())


def const_diff(a: Expr, b: Expr) -> int | None:
    """``a - b`` if it is a constant (their linear forms differ only in the constant), else None."""
    ta, ca = linear_form(a)
    tb, cb = linear_form(b)
    if signature(ta) != signature(tb):
        return None
    return ca - cb


def joined_linear_form(e: Expr, linear: Callable[[Expr], LinearForm] = linear_form,
                       partner: Callable[[BinaryOp, int], Expr] | None = None) -> LinearForm:
    """The linear form of ``e`` with split/fuse pairs joined: ``floordiv(a, c)*c*m +
    floormod(a, c)*m`` becomes ``a*m`` (repeatedly, so nested splits of a fused loop give back
    the fused index).  This is the rejoin of TVM's canonical simplifier (``SplitExpr`` merge).

    ``linear`` computes the linear form of a sub-expression (e.g. a cached one);
    ``partner(floormod_atom, c)`` is the expression of ``floordiv(a, c)`` that the floormod
    pairs with (default: that node as written; a normal form may flatten it).
    """
    terms, k = linear(e)
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
            div = BinaryOp("floordiv", atom.a, atom.b, atom.dtype) if partner is None else partner(atom, c)
            p_terms, p_k = linear(div)
            if p_k or len(p_terms) != 1:
                continue
            (dkey, (_, dc)), = p_terms.items()
            if dc != 1 or dkey not in terms or terms[dkey][1] != m * c:
                continue
            del terms[key], terms[dkey]
            inner, k2 = linear(atom.a)
            k += m * k2
            terms = add_terms(terms, inner, m)
            changed = True
            break
    return terms, k


__all__ = ["LinearForm", "add_terms", "atom_key", "canonical", "const_diff", "from_linear",
           "joined_linear_form", "linear_form", "signature", "sorted_linear"]
