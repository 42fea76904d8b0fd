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
from scheduler_core.ir.expr import Broadcast, Cast, Expr, FloatImm, IntImm, Ramp, Var
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
    # compound keys: term_range's answers, keyed by the extents of the loops that run
    # (a feature extraction asks for every level, twice per level)
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
    hit = t.ranges.get(key)
    if hit is None:
        hit = t.ranges[key] = _compound_range(t.key, depth, extents, level)
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
