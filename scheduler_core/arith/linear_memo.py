"""Linear forms and intervals of one lowering's index expressions, remembered by node.

    LinearForms().of(e)             linear_form(e), remembered for e and its add/sub/mul nodes
    LinearForms().interval(e, env)  int_set.interval(e, env), on linear forms where it is the same
    LinearForms().flat_index(...)   canonical(simplify(sum((i - o) * s))), from the forms

A lowering reads the same root values, offsets and strides in every index it builds, and
each index was built, simplified and read back as a linear form again; this object keeps
each node's form (by identity, holding the node so its id is not reused; Exprs are
immutable) and evaluates intervals and flat indices on the forms directly.  Every fast path
says why its result equals the general one; where it cannot tell, the general tool runs.
It lives as long as one lowering (the plan holds it), so nothing outlives the states.
"""

from __future__ import annotations

from typing import Any

from scheduler_core.ir.expr import BinaryOp, Expr, IntImm, Var, as_expr
from scheduler_core.ir.simplify import const_value as const_of
from scheduler_core.ir.simplify import simplify

from .int_set import Interval, interval
from .linear_form import add_terms, canonical, from_linear, linear_form


class LinearForms:
    """The linear forms (``arith.linear_form``) of the index expressions of one lowering,
    remembered by node identity (``id -> (node, form)``: the node is kept, so its id is not
    reused; Exprs are immutable, so a node's form never changes).  Dies with the plan."""

    def __init__(self) -> None:
        self.memo: dict = {}
        self.fixed: dict = {}  # id(atom) -> (atom, whether simplify leaves it as it is)
        self.consts: dict = {}  # id(e) -> (e, const_of(e))
        self.flats: dict = {}  # id(flat index) -> (flat index, the form it was made from)

    def of(self, e: Expr) -> tuple:
        """``linear_form(e)``, remembered for ``e`` and for its ``add``/``sub``/``mul`` sub-nodes
        (the same recursion: an index built on a root value reads that value's form once).
        The forms are shared: never change them."""
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        form = None
        if type(e) is BinaryOp:
            if e.op == "add" or e.op == "sub":
                (ta, ca), (tb, cb) = self.of(e.a), self.of(e.b)
                sign = 1 if e.op == "add" else -1
                form = add_terms(ta, tb, sign), ca + sign * cb
            elif e.op == "mul":
                for x, y in ((e.a, e.b), (e.b, e.a)):
                    c = const_of(y)
                    if isinstance(c, int):
                        t, k0 = self.of(x)
                        form = {k: (a, v * c) for k, (a, v) in t.items() if v * c != 0}, k0 * c
                        break
        if form is None:  # a constant or an atom
            form = linear_form(e)
        self.memo[id(e)] = (e, form)
        return form

    def const(self, e) -> int | float | None:
        """``const_of(e)``, remembered for a compound ``e`` (a buffer's offsets and strides
        come back for every access)."""
        if type(e) is IntImm:
            return e.value
        hit = self.consts.get(id(e))
        if hit is None or hit[0] is not e:
            hit = self.consts[id(e)] = (e, const_of(e))
        return hit[1]

    def _simplified(self, terms: dict) -> bool:
        """Whether every atom of ``terms`` is int32 and left as it is by ``simplify`` (a
        variable always is)."""
        for atom, _ in terms.values():
            if type(atom) is Var:
                if atom.dtype != "int32":
                    return False
                continue
            hit = self.fixed.get(id(atom))
            if hit is None or hit[0] is not atom:
                hit = self.fixed[id(atom)] = (atom, atom.dtype == "int32" and simplify(atom) is atom)
            if not hit[1]:
                return False
        return True

    def _form_of(self, e: Expr) -> tuple | None:
        """The linear form of int32 ``e`` if ``simplify`` leaves its atoms as they are (then
        ``canonical`` of an expression with ``e`` in it reads ``e``'s terms back), else None."""
        if e.dtype != "int32":
            return None
        form = self.of(e)
        return form if self._simplified(form[0]) else None

    def interval(self, e: Expr, env: dict) -> Interval | None:
        """``arith.int_set.interval(e, env)``, computed on linear forms where that is the same.

        ``interval`` evaluates ``add``/``sub``/``mul`` nodes bottom-up, each low end
        ``canonical(...)`` of its operands' low ends (``_add``, ``_scale``, points); that is
        the ``from_linear`` of the ``add_terms`` of their linear forms, so :meth:`_walk_interval`
        does the same evaluation on (terms, constant, extent) without building and re-reading
        the expressions, asking ``interval`` only for the atoms (``floordiv(i.0.j.0, 8)``...).
        Where a step is not of that kind (a symbolic extent, another dtype, an atom that
        ``simplify`` would change...) the whole of ``e`` goes to ``interval``.
        """
        r = self.walk_interval(e, env)
        if r is None:
            return interval(e, env)
        terms, c, ext = r
        return Interval(from_linear(terms, c), IntImm(ext))

    def walk_interval(self, e: Expr, env: dict) -> tuple | None:
        """``(terms, const, extent)`` of ``interval(e, env)`` (its low end is ``from_linear(terms,
        const)``) for an ``add``/``sub``/``mul`` node where :meth:`interval` can tell, else None."""
        if type(e) is not BinaryOp or e.op not in ("add", "sub", "mul"):
            return None
        return self._walk_interval(e, env)

    def _walk_interval(self, e: Any, env: dict) -> tuple | None:
        """``(terms, const, extent)``: the linear form of ``interval(e, env).lo`` and its
        constant extent, or None where that takes ``interval`` itself (see :meth:`interval`)."""
        t = type(e)
        if t is IntImm:
            return ({}, e.value, 1) if e.dtype == "int32" else None
        if t is BinaryOp and e.op in ("add", "sub", "mul"):
            if e.dtype != "int32":
                return None
            a = self._walk_interval(e.a, env)
            b = self._walk_interval(e.b, env) if a is not None else None
            if a is None or b is None:
                return None
            (ta, ca, ea), (tb, cb, eb) = a, b
            if e.op == "mul":
                # _mul: scale by the constant side (points: canonical(a.lo*b.lo) reads the same)
                if eb == 1 and not tb:
                    return _scaled(ta, ca, ea, cb)
                if ea == 1 and not ta:
                    return _scaled(tb, cb, eb, ca)
                return None
            if e.op == "sub":  # _add(a, _scale(b, -1)); two points: canonical(a.lo - b.lo)
                tb, cb, eb = _scaled(tb, cb, eb, -1)
            return add_terms(ta, tb), ca + cb, ea + eb - 1
        if t is Var:
            r = env.get(e)
            if r is None:  # a fixed variable: the point e
                return ({("v", id(e)): (e, 1)}, 0, 1) if e.dtype == "int32" else None
        else:
            r = interval(e, env)
            if r is None:
                return None
        ext = r.extent
        if type(ext) is not IntImm or ext.dtype != "int32":
            return None
        form = self._form_of(r.lo)
        return None if form is None else (form[0], form[1], ext.value)

    def flat_index(self, indices, offsets, strides) -> Expr | None:
        """``BufferInfo.flat_index`` on linear forms, or None where it does not apply.

        ``canonical(simplify(out))`` is ``from_linear(*linear_form(simplify(out)))``, and for
        ``out = ((0 + t0) + t1) + ...`` with ``t = (i - o)*s`` (``- o`` left out when ``o``
        is 0, ``*s`` when ``s`` is 1) the linear form is the same fold of ``add_terms`` that
        ``linear_form`` does over that tree, with the forms of ``i`` and ``o`` taken as they
        are.  ``simplify`` does not change that form (it folds constants and drops ``+0``,
        ``*1``, ``*0``, ``x - x``, all of which the form already does) as long as it leaves
        every atom as it is, which is checked; with int32 throughout no casts come in.
        """
        terms: dict = {}
        c = 0
        for i, o, s in zip(indices, offsets, strides):
            i = as_expr(i)
            sv = self.const(s)
            if i.dtype != "int32" or not isinstance(sv, int) or (sv != 1 and as_expr(s).dtype != "int32"):
                return None
            ti, ci = self.of(i)
            if not self._simplified(ti):
                return None
            if self.const(o) != 0:
                o = as_expr(o)
                if o.dtype != "int32":
                    return None
                to, co = self.of(o)
                if not self._simplified(to):
                    return None
                ti, ci = add_terms(ti, to, -1), ci - co
            if sv != 1:
                ti, ci = {key: (a, v * sv) for key, (a, v) in ti.items() if v * sv != 0}, ci * sv
            terms, c = add_terms(terms, ti), c + ci
        out = from_linear(terms, c)
        # from_linear of int32 atoms that simplify leaves alone reads back as these terms
        self.memo[id(out)] = self.flats[id(out)] = (out, (terms, c))
        return out

    def canonical_add(self, a: Expr, b: Expr) -> Expr:
        """``canonical(a + b)``: the ``from_linear`` of the sum of the (remembered) forms."""
        if a.dtype != "int32" or b.dtype != "int32":
            return canonical(a + b)
        (ta, ca), (tb, cb) = self.of(a), self.of(b)
        terms, c = add_terms(ta, tb), ca + cb
        out = from_linear(terms, c)
        if self._simplified(terms):  # then out reads back as these terms
            self.memo[id(out)] = (out, (terms, c))
        return out

    def const_diff(self, a: Expr, b: Expr) -> int | None:
        """``arith.linear_form.const_diff(a, b)`` on the remembered forms."""
        (ta, ca), (tb, cb) = self.of(a), self.of(b)
        if len(ta) != len(tb):
            return None
        for key, (_, v) in ta.items():
            hit = tb.get(key)
            if hit is None or hit[1] != v:
                return None
        return ca - cb

    def known(self, flat: Expr) -> tuple | None:
        """The linear form that :meth:`flat_index` made ``flat`` from (``from_linear`` of it:
        a sum of ``atom*coef`` and a constant), else None."""
        hit = self.flats.get(id(flat))
        return hit[1] if hit is not None and hit[0] is flat else None


def _scaled(terms: dict, c: int, ext: int, k: int) -> tuple:
    """``int_set._scale`` on (terms, constant, extent) of an interval: times ``k``."""
    if k < 0:
        c += ext - 1  # the low end of the product is the high end times k
    return {key: (a, v * k) for key, (a, v) in terms.items() if v * k != 0}, c * k, (ext - 1) * abs(k) + 1


__all__ = ["LinearForms"]
