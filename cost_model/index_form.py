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

from dataclasses import dataclass, field

from scheduler_core.arith.const_int_bound import const_int_bound
from scheduler_core.arith.linear_form import linear_form
from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.ir.expr import BinaryOp, Broadcast, Cast, Expr, FloatImm, IntImm, Ramp, Var
from scheduler_core.ir.expr_functor import free_vars, walk

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
    # compound keys: term_range's answers, keyed by the extents of the loops that run (a
    # feature extraction asks at several levels, and shared_form reuses the Term across states)
    ranges: dict = field(default_factory=dict, repr=False, compare=False)


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

    The index is taken apart by ``arith.linear_form``; casts of integers and broadcasts are
    looked through, a ``Ramp`` adds its base and a lane term.  Variables that are not loop
    variables (symbolic shape parameters, let variables) are treated as constants 0.  Never
    raises: a sub-expression the analysis does not understand becomes one compound term.
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
            vm = {v: var_depth[v] for v in free_vars(key) if v in var_depth}
            out.append(Term(coef, key, tuple(sorted(set(vm.values()))), -1, lanes, vm))
    return AffineForm(int(const), out)


# shared_form's memo: the shape key of an index (see _shape_key) -> its AffineForm.  The forms
# are never mutated (their Terms' ``ranges`` only memoize a pure function of the key's
# structure and the loop extents), so one form serves every index of the same shape; it keeps
# the sub-expressions of the first such index alive, hence the bound on entries.
_SHARED_FORMS: BoundedCache = BoundedCache(8192)


def shared_form(e: Expr, var_depth: dict) -> AffineForm:
    """``affine_form(e, var_depth)``, shared between indices of the same shape.

    Two indices have the same shape when they are the same tree of ``Var``/``IntImm``/
    ``BinaryOp``/``Cast``/``Ramp``/``Broadcast`` nodes (same ops, constants, dtypes and
    lanes) whose variables (same names and dtypes) occur in the same pattern at the same
    loop depths (-1 for a variable that is not a loop).  Every number that ``access_range``,
    ``touched_elements``, ``coefficient``, ``contiguous_elements`` and ``level_counts``
    derive from the form is then the same, so the form made for the first index serves the
    others (the lowered programs of a search differ mostly in constants and loop extents,
    and repeat index shapes across states).  The returned form's compound term keys may
    therefore be nodes of that earlier index.  Indices holding other nodes (loads, calls,
    float constants) are not shared.
    """
    key = _shape_key(e, var_depth)
    if key is None:
        return affine_form(e, var_depth)
    form = _SHARED_FORMS.get(key)
    if form is None:
        form = _SHARED_FORMS.put(key, affine_form(e, var_depth))
    return form


def _shape_key(e: Expr, var_depth: dict) -> tuple | None:
    """The pre-order serialization of ``e`` for ``shared_form`` (a prefix code: each node
    is a tag and a fixed number of fields; a variable is its first-occurrence number, its
    loop depth, name and dtype), or None when ``e`` holds a node outside the shared shapes."""
    out: list = []
    numbers: dict = {}
    stack = [e]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is BinaryOp:
            out += ("b", n.op, n.dtype)
            stack.append(n.b)
            stack.append(n.a)
        elif t is Var:
            k = numbers.get(n)
            if k is None:
                k = numbers[n] = len(numbers)
            out += ("v", k, var_depth.get(n, -1), n.name, n.dtype)
        elif t is IntImm:
            out += ("i", n.value, n.dtype)
        elif t is Cast:
            out += ("c", n.dtype)
            stack.append(n.value)
        elif t is Ramp:
            out += ("r", n.lanes, n.dtype)
            stack.append(n.stride)
            stack.append(n.base)
        elif t is Broadcast:
            out += ("x", n.lanes, n.dtype)
            stack.append(n.value)
        else:
            return None
    return tuple(out)


def _collect(e: Expr, scale: int, terms: dict, var_depth: dict) -> int:
    """Add ``scale * e`` into ``terms`` (Expr -> (coef, lanes)); return its constant part."""
    atoms, const = linear_form(e)
    const *= scale
    for atom, coef in atoms.values():
        c = scale * coef
        if isinstance(atom, Var):
            if atom in var_depth:
                _add(terms, atom, c)
        elif isinstance(atom, Cast) and not isinstance(atom.value, FloatImm):
            const += _collect(atom.value, c, terms, var_depth)
        elif isinstance(atom, Ramp):
            const += _collect(atom.base, c, terms, var_depth)
            stride = atom.stride.value if isinstance(atom.stride, IntImm) else 1
            terms[atom] = (c * stride, atom.lanes)
        elif isinstance(atom, Broadcast):
            const += _collect(atom.value, c, terms, var_depth)
        elif any(v in var_depth for v in free_vars(atom)):
            _add(terms, atom, c)
        # else: no loop variable inside, a constant of unknown value, taken as 0
    return const


def _add(terms: dict, key, coef: int) -> None:
    old = terms.get(key)
    terms[key] = (coef + (old[0] if old else 0), 0)


# ---------------------------------------------------------------------------
# Ranges of terms when some loops run
# ---------------------------------------------------------------------------

_RANGES_KEPT = 256  # entries of one Term's ``ranges`` before they are dropped


def term_range(t: Term, level: int, extents: list) -> tuple:
    """``(lo, hi)`` of ``t.key`` when loops at depth >= ``level`` run and outer ones sit at 0.

    extents: the constant trip count of each loop in the stack.  Compound keys are bounded by
    ``arith.const_int_bound`` (a variable that is not a free loop is 0; a sub-expression it
    cannot bound spreads over the product of the free loops inside it).
    """
    if t.lanes:
        return (0, t.lanes - 1)
    if t.var_depth >= 0:
        return (0, extents[t.var_depth] - 1) if t.var_depth >= level else (0, 0)
    depth = t.var_map or {}
    key = tuple(extents[d] if d >= level else -1 for d in depth.values())
    ranges = t.ranges
    hit = ranges.get(key)
    if hit is None:
        if len(ranges) >= _RANGES_KEPT:  # a shared form lives across many states: stay bounded
            ranges.clear()
        hit = ranges[key] = _compound_range(t.key, depth, extents, level)
    return hit


def _compound_range(e: Expr, depth: dict, extents: list, level: int) -> tuple:
    """``term_range`` of a compound key ``e`` whose loop variables sit at ``depth``."""
    free = {v: (0, extents[d] - 1) for v, d in depth.items() if d >= level}

    def unknown(node: Expr) -> tuple:
        if isinstance(node, Var):
            return (0, 0)
        span = 1
        for v in walk(node):  # each use of a free loop multiplies (as the feature was defined)
            if isinstance(v, Var) and v in free:
                span *= free[v][1] + 1
        return (0, span - 1)

    b = const_int_bound(e, free, unknown)
    return (0, 0) if b is None else tuple(b)


def _term_sums(c: int, r0: int, r1: int, groups: dict) -> tuple:
    """``(low, high, span)`` contributions of a term ``c * [r0, r1]``; its width is added to
    ``groups[|c|]`` (the per-coefficient widths of :func:`access_range`'s box estimate)."""
    w = r1 - r0
    dspan = 0
    if w > 0:
        ac = abs(c)
        groups[ac] = groups.get(ac, 0) + w
        dspan = ac * w
    return (c * r0, c * r1, dspan) if c >= 0 else (c * r1, c * r0, dspan)


def access_range(form: AffineForm, level: int, extents: list) -> tuple:
    """``(lo, hi, touched)`` of one access when loops at depth >= ``level`` run.

    touched: the estimated number of distinct elements (see the module docstring).
    """
    lo = hi = form.const
    groups: dict = {}
    span = 1
    for t in form.terms:
        dlo, dhi, dspan = _term_sums(t.coef, *term_range(t, level, extents), groups)
        lo, hi, span = lo + dlo, hi + dhi, span + dspan
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


def level_counts(forms: list, extents: list) -> tuple:
    """``(touched, contiguous)``: lists over every level ``0 .. len(extents)`` of
    ``touched_elements(forms, level, extents)`` and ``contiguous_elements(forms, level, extents)``.

    One pass from the innermost level outwards (what a feature extraction asks of every
    access): a loop-variable term starts to run at its own depth, a compound term's range
    changes only at the depths of its loop variables, so each level updates the running
    sums (bounds, the width per coefficient, the span) of the terms that change there,
    and a level where none changes repeats the level inside it.  All quantities are
    integers, so the results are exactly those of the per-level functions.
    """
    n = len(extents)
    touched = [0] * (n + 1)
    contiguous = [1] * (n + 1)
    many = len(forms) > 1
    if many:
        los, his, totals = [_INF] * (n + 1), [-_INF] * (n + 1), [0] * (n + 1)
    for form in forms:
        terms = form.terms
        lo = hi = form.const
        groups: dict = {}     # |coef| -> sum of the positive widths of its terms
        span = 1
        changes: dict = {}    # level -> indices in terms of the terms whose range changes there
        cur = []              # the current (r0, r1) of each term
        for k, t in enumerate(terms):
            c = t.coef
            if t.lanes:
                r = (0, t.lanes - 1)
            elif t.var_depth >= 0:
                r = (0, 0)
                changes.setdefault(t.var_depth, []).append(k)
            else:
                r = term_range(t, n, extents)
                for d in t.depths:
                    changes.setdefault(d, []).append(k)
            cur.append(r)
            dlo, dhi, dspan = _term_sums(c, r[0], r[1], groups)
            lo, hi, span = lo + dlo, hi + dhi, span + dspan
        for level in range(n, -1, -1):
            ks = changes.get(level)
            if ks is not None:
                for k in ks:
                    t = terms[k]
                    r0, r1 = r = (0, extents[level] - 1) if t.var_depth >= 0 else term_range(t, level, extents)
                    o0, o1 = cur[k]
                    cur[k] = r
                    c = t.coef
                    if c >= 0:
                        lo += c * (r0 - o0)
                        hi += c * (r1 - o1)
                    else:
                        lo += c * (r1 - o1)
                        hi += c * (r0 - o0)
                    dw = max(r1 - r0, 0) - max(o1 - o0, 0)
                    if dw:
                        ac = abs(c)
                        g = groups.get(ac, 0) + dw
                        if g:
                            groups[ac] = g
                        else:
                            del groups[ac]
                        span += ac * dw
            if ks is not None or level == n:
                box = 1
                for w in groups.values():
                    box *= w + 1
                count = min(box, span)
                run = 1
                while run in groups:
                    run = run * (groups[run] + 1)
            if run > contiguous[level]:
                contiguous[level] = run
            if many:
                if lo < los[level]:
                    los[level] = lo
                if hi > his[level]:
                    his[level] = hi
                totals[level] += count
            else:
                touched[level] = count
    if many:
        for level in range(n + 1):
            touched[level] = int(min(totals[level], his[level] - los[level] + 1))
    return touched, contiguous


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
           "coefficient", "contiguous_elements", "term_range", "level_counts", "shared_form"]
