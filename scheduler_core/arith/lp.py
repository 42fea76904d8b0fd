"""Exact bounds of an integer linear form under linear constraints, by linear programming.

    relaxed_range(e, env, constraints, normal_form)  -> (lo, hi) | None   (raises Infeasible)
    lp_max(c, a_rows, b, lo, hi, n)                   -> Fraction          an upper bound of c.x

The integer problem (``floordiv``/``floormod`` terms, guards) is relaxed to a linear program
over integer columns (:class:`Relaxation`); every bound is a dual certificate evaluated in
exact rational arithmetic, so a floating-point simplex only picks the multipliers: rounding
can weaken a bound but never make it wrong.  The idea is the LP relaxation of integer
programs with Chvatal-Gomory style rounding at each division (as in Presburger/omega-test
deciders; TVM's src/arith/int_constraints.cc solves such systems exactly instead).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from scheduler_core.ir.expr import BinaryOp, Expr, Var

from .divmod_form import DivModNormalForm, const_divisor
from .int_set import Infeasible, const_range, intersect_bounds

LP_ITERATIONS = 200  # pivots of the simplex at most (any dual point gives a bound)


class NoRelaxation(Exception):
    """An atom without a constant range: the relaxation cannot be built."""


class Relaxation:
    """An expression and its constraints as a linear program over integer columns: the loop
    variables, each ``floordiv(a, c)`` (with ``0 <= a - c*floordiv(a, c) <= c - 1``) and any
    other atom with a constant range; ``floormod(a, c)`` is ``a - c*floordiv(a, c)``.  Every
    integer point of the variables' ranges satisfies the rows, so a bound of the relaxation
    holds for the integers."""

    def __init__(self, env: dict, normal_form: DivModNormalForm):
        self.env, self.nf = env, normal_form
        self.columns: dict = {}  # atom key -> (coefs, const)
        self.lo: list = []
        self.hi: list = []
        self.rows: list = []  # (coefs: column -> int, lo, hi): lo <= sum <= hi (None: unbounded)
        self.divs: list = []  # (column, argument (coefs, const), c) of each floordiv column
        self.mods: list = []  # (row index, argument (coefs, const), c, row constant) of each floormod row

    def form(self, terms: dict, k) -> tuple:
        """``sum(terms) + k`` over the columns: ``(coefs, const)``.  Raises NoRelaxation."""
        out: dict = {}
        for key, (atom, coef) in terms.items():
            a_coefs, a_k = self.atom(key, atom)
            for col, v in a_coefs.items():
                out[col] = out.get(col, 0) + coef * v
            k += coef * a_k
        return {col: v for col, v in out.items() if v}, k

    def box(self, coefs: dict, k) -> tuple:
        """The range of ``coefs.x + k`` over the columns' own ranges."""
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
        """The columns of one atom of a linear form (new columns and rows as needed)."""
        if key in self.columns:
            return self.columns[key]
        c = const_divisor(atom)
        if isinstance(atom, Var):
            rng = self.env[atom].const_bounds if atom in self.env else None
        else:
            rng = const_range(atom, self.env)
        if c is not None:
            assert isinstance(atom, BinaryOp)
            out = self._divmod(atom, c, rng)
        elif rng is None:
            raise NoRelaxation
        else:
            out = (self.column(*rng), 0)
        self.columns[key] = out
        return out

    def _divmod(self, atom: BinaryOp, c: int, rng: tuple | None) -> tuple:
        a = self.form(*self.nf.joined(atom.a))
        if atom.op == "floordiv":
            a_lo, a_hi = self.box(*a)
            lo, hi = intersect_bounds((a_lo // c, a_hi // c), rng or (None, None))
            out = (self.column(lo, hi), 0)
            self.rows.append(_row_sum(a, out, -c, 0, c - 1))
            self.divs.append((len(self.lo) - 1, a, c))
            return out
        div = self.nf.div("floordiv", atom.a, c, atom.dtype)
        d = self.form(*self.nf.linear(div))
        r = intersect_bounds((0, c - 1), rng or (None, None))
        out = _row_sum(a, d, -c, None, None)[0], a[1] - c * d[1]
        self.rows.append((out[0], r[0] - out[1], r[1] - out[1]))
        self.mods.append((len(self.rows) - 1, a, c, out[1]))
        return out

    def bounds(self, coefs: dict, k) -> tuple:
        """The integer range of ``coefs.x + k`` over the relaxation.  Raises Infeasible."""
        a_rows, b = [], []
        for row, lo, hi in self.rows:
            if hi is not None:
                a_rows.append(row)
                b.append(hi)
            if lo is not None:
                a_rows.append({col: -v for col, v in row.items()})
                b.append(-lo)
        n = len(self.lo)
        hi_bound = k + lp_max(coefs, a_rows, b, self.lo, self.hi, n)
        lo_bound = k - lp_max({col: -v for col, v in coefs.items()}, a_rows, b, self.lo, self.hi, n)
        if lo_bound > hi_bound:
            raise Infeasible
        g = math.gcd(*coefs.values()) if coefs else 1
        return k + g * math.ceil((lo_bound - k) / g), k + g * math.floor((hi_bound - k) / g)

    def round_divisions(self) -> None:
        """Cut each ``floordiv``/``floormod`` to the integer range of its argument over the
        relaxation (a cut that the relaxation alone lacks)."""
        for col, (a, a_k), c in self.divs:
            a_lo, a_hi = self.bounds(a, a_k)
            self.lo[col], self.hi[col] = intersect_bounds((self.lo[col], self.hi[col]), (a_lo // c, a_hi // c))
        for row, (a, a_k), c, m_k in self.mods:
            a_lo, a_hi = self.bounds(a, a_k)
            if a_lo // c == a_hi // c:  # one period: floormod(a, c) ranges over a_lo % c .. a_hi % c
                coefs, lo, hi = self.rows[row]
                lo, hi = intersect_bounds((lo, hi), (a_lo % c - m_k, a_hi % c - m_k))
                self.rows[row] = (coefs, lo, hi)


def _row_sum(a: tuple, d: tuple, f: int, lo, hi) -> tuple:
    """The row ``lo <= a + f*d <= hi`` (a, d as ``(coefs, const)``)."""
    coefs = dict(a[0])
    for col, v in d[0].items():
        coefs[col] = coefs.get(col, 0) + f * v
    k = a[1] + f * d[1]
    return ({col: v for col, v in coefs.items() if v},
            None if lo is None else lo - k, None if hi is None else hi - k)


def relaxed_range(e: Expr, env: dict, constraints: list, normal_form: DivModNormalForm,
                  good: Callable[[tuple], bool] = lambda rng: False) -> tuple | None:
    """The range of the integer expression ``e`` over its linear relaxation (:class:`Relaxation`)
    under ``constraints`` (``(terms, lo, hi)``: ``lo <= sum(terms) <= hi``, None unbounded),
    cut to the values the integer expression can take; None when an atom of ``e`` has no
    constant range (a constraint with such an atom is left out: the relaxation only grows).

    ``e`` and the constraints should be in the normal form of ``normal_form``.  ``good(rng)``
    True stops before the (costlier) rounding at each division.  Raises Infeasible when the
    constraints cannot hold.
    """
    lp = Relaxation(env, normal_form)
    try:
        obj, k = lp.form(*normal_form.joined(e))
    except NoRelaxation:
        return None
    for terms, lo, hi in constraints:
        try:
            coefs, gk = lp.form(terms, 0)
        except NoRelaxation:
            continue
        lp.rows.append((coefs, None if lo is None else lo - gk, None if hi is None else hi - gk))
    rng = lp.bounds(obj, k)
    if good(rng):
        return rng
    lp.round_divisions()
    return intersect_bounds(rng, lp.bounds(obj, k))


def lp_max(c: dict, a_rows: list, b: list, lo: list, hi: list, n: int) -> Fraction:
    """An upper bound of ``c.x`` over ``{x: a.x <= b for each row, lo <= x <= hi}``.

    c: column -> int coefficient; a_rows: one ``column -> int`` dict per row; b, lo, hi: ints;
    n: the number of columns.  Any ``y >= 0`` gives a bound, exactly: ``c.x = y.(A x) +
    (c - y A).x <= y.b + sum_j max over [lo_j, hi_j] of (c - y A)_j x_j``, computed here in
    integers.  ``y`` is the dual solution of a floating-point simplex (Bland's rule, at most
    LP_ITERATIONS pivots) on the dual ``min b.y + hi.s - lo.t  s.t.  A^T y + s - t = c,
    y, s, t >= 0`` (which has an obvious feasible basis), rounded down to multiples of 2**-30:
    rounding only makes the bound weaker, never wrong.
    """
    y = _dual(c, a_rows, b, lo, hi, n)
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


def _dual(c: dict, a_rows: list, b: list, lo: list, hi: list, n: int) -> np.ndarray:
    """The multipliers ``y >= 0`` of the rows (float; any point is valid for :func:`lp_max`)."""
    m = len(a_rows)
    y = np.zeros(m)
    if not (m and n):
        return y
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
    return y


__all__ = ["LP_ITERATIONS", "NoRelaxation", "Relaxation", "lp_max", "relaxed_range"]
