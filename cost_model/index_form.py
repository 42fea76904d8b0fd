"""Affine forms of flat buffer indices, for the access features of ``feature``.

    BufferLoad/Store index (Expr) --affine_form--> AffineForm(const, terms)
    AffineForm + the loops that are free at one loop level --touched_elements--> int

Our lowered programs index every buffer with one flat element offset
(``A[i*512 + k]``), where TVM's feature extractor (src/auto_scheduler/feature.cc,
``ComputeRegion``/``ComputeStride``) sees multi-dimensional indices and bounds each
dimension.  Bounding a flat index by an interval would count the whole span
between rows (``i*512 + k`` with 8 x 4 iterations spans 3588 elements but touches
32), so instead the index is split into terms ``coef * key`` where ``key`` is a
loop variable or a compound sub-expression (``floordiv(f, 4)``, ``floormod(f, 4)``
of a fused loop ``f``), and the number of distinct elements touched when a set of
loops runs is estimated as::

    min(prod over coefficient groups g of (1 + sum_{t in g} (ext_t - 1)),
        1 + sum_t |coef_t| * (ext_t - 1))

i.e. terms with equal coefficients overlap on one line (``(y + ry) * W``), terms
with different coefficients form a box, and the box never exceeds the span.
The estimate is exact for row-major tiles, fused-loop div/mod pairs and
convolution windows; it over-counts only for unusual interleavings.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.ir.expr import (
    BinaryOp,
    Broadcast,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Ramp,
    Select,
    Var,
)
from scheduler_core.ir.expr_functor import children

_INF = float("inf")


@dataclass
class Term:
    """``coef * key``: ``key`` is a loop ``Var`` or a compound index expression.

    depths: loop-stack depths of the loop variables inside ``key`` (outermost
    loop = depth 0); ``var_depth`` is the depth when ``key`` is itself a loop
    variable, else -1.  lanes: for a vector ``Ramp`` term, its lane count.
    """

    coef: int
    key: Expr
    depths: tuple
    var_depth: int = -1
    lanes: int = 0
    var_map: dict | None = None  # compound keys: their loop Var -> depth


@dataclass
class AffineForm:
    """``const + sum(term.coef * term.key)`` of one flat index."""

    const: int
    terms: list

    def depths(self) -> set:
        """Depths of every loop variable used by this index."""
        out: set = set()
        for t in self.terms:
            out.update(t.depths)
        return out


# ---------------------------------------------------------------------------
# Building affine forms
# ---------------------------------------------------------------------------

def affine_form(e: Expr, var_depth: dict) -> AffineForm:
    """Split a flat index ``e`` into a constant and ``coef * key`` terms.

    Parameters
    ----------
    e : Expr, an int index expression of the lowered program
    var_depth : dict, loop ``Var`` -> its depth in the loop stack (0 = outermost)

    Variables that are not loop variables (symbolic shape parameters, let
    variables) are treated as constants 0.  Never raises: a sub-expression the
    analysis does not understand becomes one compound term.
    """
    terms: dict = {}
    const = _collect(e, 1, terms, var_depth)
    out = []
    for key, (coef, lanes) in terms.items():
        if coef == 0:
            continue
        if isinstance(key, Var):
            d = var_depth.get(key, -1)
            out.append(Term(coef, key, (d,) if d >= 0 else (), d, lanes))
        else:
            vm = {v: var_depth[v] for v in _vars(key) if v in var_depth}
            out.append(Term(coef, key, tuple(sorted(set(vm.values()))), -1, lanes, vm))
    return AffineForm(int(const), out)


def _collect(e: Expr, scale: int, terms: dict, var_depth: dict) -> int:
    """Add ``scale * e`` into ``terms``; return its constant part."""
    if isinstance(e, IntImm):
        return scale * e.value
    if isinstance(e, Var):
        if e not in var_depth:
            return 0
        _add(terms, e, scale)
        return 0
    if isinstance(e, BinaryOp):
        if e.op == "add":
            return _collect(e.a, scale, terms, var_depth) + _collect(e.b, scale, terms, var_depth)
        if e.op == "sub":
            return _collect(e.a, scale, terms, var_depth) + _collect(e.b, -scale, terms, var_depth)
        if e.op == "mul":
            if isinstance(e.b, IntImm):
                return _collect(e.a, scale * e.b.value, terms, var_depth)
            if isinstance(e.a, IntImm):
                return _collect(e.b, scale * e.a.value, terms, var_depth)
    if isinstance(e, Cast) and not isinstance(e.value, FloatImm):
        return _collect(e.value, scale, terms, var_depth)
    if isinstance(e, Ramp):
        c = _collect(e.base, scale, terms, var_depth)
        stride = e.stride.value if isinstance(e.stride, IntImm) else 1
        terms[e] = (scale * stride, e.lanes)
        return c
    if isinstance(e, Broadcast):
        return _collect(e.value, scale, terms, var_depth)
    if not any(v in var_depth for v in _vars(e)):
        return 0  # no loop variable inside: a constant of unknown value, taken as 0
    _add(terms, e, scale)
    return 0


def _add(terms: dict, key, coef: int) -> None:
    old = terms.get(key)
    terms[key] = (coef + (old[0] if old else 0), 0)


def _vars(e: Expr) -> list:
    out = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.append(n)
        else:
            stack.extend(children(n))
    return out


# ---------------------------------------------------------------------------
# Ranges of terms when some loops run
# ---------------------------------------------------------------------------

def term_range(t: Term, level: int, extents: list) -> tuple:
    """``(lo, hi)`` of ``t.key`` when loops at depth >= ``level`` run and outer ones sit at 0.

    extents: the constant trip count of each loop in the stack.
    """
    if t.lanes:
        return (0, t.lanes - 1)
    if t.var_depth >= 0:
        return (0, extents[t.var_depth] - 1) if t.var_depth >= level else (0, 0)
    return _interval(t.key, t.var_map or {}, extents, level)


def _interval(e: Expr, depth: dict, extents: list, level: int) -> tuple:
    """A conservative integer interval of ``e`` (loop vars in [0, ext-1] if free, else 0)."""
    if isinstance(e, IntImm):
        return (e.value, e.value)
    if isinstance(e, Var):
        d = depth.get(e)
        if d is None or d < level:
            return (0, 0)
        return (0, extents[d] - 1)
    if isinstance(e, BinaryOp):
        a = _interval(e.a, depth, extents, level)
        b = _interval(e.b, depth, extents, level)
        op = e.op
        if op == "add":
            return (a[0] + b[0], a[1] + b[1])
        if op == "sub":
            return (a[0] - b[1], a[1] - b[0])
        if op == "mul":
            ps = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
            return (min(ps), max(ps))
        if op in ("floordiv", "div") and b[0] == b[1] and b[0] > 0:
            return (a[0] // b[0], a[1] // b[0])
        if op == "floormod" and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:
                return (0, c - 1)
            return (a[0] % c, a[1] % c)
        if op == "min":
            return (min(a[0], b[0]), min(a[1], b[1]))
        if op == "max":
            return (max(a[0], b[0]), max(a[1], b[1]))
    if isinstance(e, Cast):
        return _interval(e.value, depth, extents, level)
    if isinstance(e, Select):
        a = _interval(e.true_value, depth, extents, level)
        b = _interval(e.false_value, depth, extents, level)
        return (min(a[0], b[0]), max(a[1], b[1]))
    # Unknown: spread over the product of the free loops inside.
    span = 1
    for v in _vars(e):
        d = depth.get(v)
        if d is not None and d >= level:
            span *= extents[d]
    return (0, span - 1)


def access_range(form: AffineForm, level: int, extents: list) -> tuple:
    """``(lo, hi, touched)`` of one access when loops at depth >= ``level`` run.

    touched: the estimated number of distinct elements (see the module docstring).
    """
    lo = hi = form.const
    groups: dict = {}
    span = 1
    for t in form.terms:
        r0, r1 = term_range(t, level, extents)
        c = t.coef
        if c >= 0:
            lo += c * r0
            hi += c * r1
        else:
            lo += c * r1
            hi += c * r0
        w = r1 - r0
        if w > 0:
            ac = abs(c)
            groups[ac] = groups.get(ac, 0) + w
            span += ac * w
    box = 1
    for w in groups.values():
        box *= w + 1
    return lo, hi, min(box, span)


def touched_elements(forms: list, level: int, extents: list) -> int:
    """Distinct elements touched by all ``forms`` (accesses of one buffer) at ``level``."""
    if len(forms) == 1:
        return access_range(forms[0], level, extents)[2]
    lo, hi, total = _INF, -_INF, 0
    for f in forms:
        a, b, n = access_range(f, level, extents)
        lo, hi, total = min(lo, a), max(hi, b), total + n
    return int(min(total, hi - lo + 1))


def coefficient(forms: list, depth: int) -> int:
    """The smallest |stride| (in elements) of the loop at ``depth`` over ``forms``; 0 if unused.

    A loop variable inside a compound term (``floormod(f, 4) * 128``) takes that
    term's coefficient, as TVM's CoefficientExtractor approximates.
    """
    best = 0
    for f in forms:
        for t in f.terms:
            if t.var_depth == depth or (t.var_depth < 0 and depth in t.depths):
                c = abs(t.coef)
                if best == 0 or c < best:
                    best = c
    return best


def contiguous_elements(forms: list, level: int, extents: list) -> int:
    """Length of the contiguous run (in elements) that the loops from ``level`` sweep.

    Starts from the unit-stride term and multiplies while the next coefficient
    equals the run so far (row-major tiles that cover whole rows).
    """
    best = 1
    for f in forms:
        widths: dict = {}
        for t in f.terms:
            r0, r1 = term_range(t, level, extents)
            if r1 > r0:
                ac = abs(t.coef)
                widths[ac] = widths.get(ac, 0) + (r1 - r0)
        run = 1
        while run in widths:
            run = run * (widths[run] + 1)
        best = max(best, run)
    return best


__all__ = ["Term", "AffineForm", "affine_form", "access_range", "touched_elements",
           "coefficient", "contiguous_elements", "term_range"]
