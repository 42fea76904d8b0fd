"""Property: the builder's bounds check refuses a lowered program exactly when it leaves a buffer.

    seed --random_schedule--> State --layout rewrite, lower (as program_from_state)--> PrimFunc
    oracle: run the program's control flow and index arithmetic (no data) at every point
            and record the range of every load and store index
    check_bounds(func) raises  <=>  the oracle sees an index outside its buffer
    a buffer cut to its largest index, or one access moved one below 0  -->  check_bounds raises

The check must never accept an out-of-bounds access (it guards the compiled code) and should
not refuse legal programs (each one is a lost search candidate).  The oracle evaluates a
condition it cannot compute (a data or float comparison) as "maybe": both branches run, so
its ranges then include accesses that may never happen; those programs only count for the
first direction.  Fast tier: a few examples per DAG; ``slow`` tier: many more.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.build_module import lower
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import (
    BinaryOp,
    Broadcast,
    BufferLoad,
    Cast,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    LogicalOp,
    Not,
    Ramp,
    Select,
    Var,
    is_float,
)
from scheduler_core.ir.expr_functor import children, transform, walk
from scheduler_core.ir.simplify import const_value
from scheduler_core.schedule.layout_rewrite import apply_layout_rewrite
from scheduler_core.schedule.loop_state import State
from tests.scheduler_core.random_schedule import random_schedule
from tests.scheduler_core.test_random_schedules import DAGS, EXTRA_DAGS, NO_SHRINK, get_dag

NAMES = sorted(DAGS) + sorted(EXTRA_DAGS)

# ---------------------------------------------------------------------------
# The oracle: the program's index arithmetic, compiled to Python and run
# ---------------------------------------------------------------------------


def _and(a, b):
    return False if a is False or b is False else (None if a is None or b is None else True)


def _or(a, b):
    return True if a is True or b is True else (None if a is None or b is None else False)


def _not(a):
    return None if a is None else not a


def _truth(a):
    return None if a is None else bool(a)


def _tdiv(a, b):  # C division of ints (truncation)
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ARITH = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "floordiv": "({} // {})",
          "floormod": "({} % {})", "div": "_tdiv({}, {})", "min": "min({}, {})", "max": "max({}, {})"}


@dataclasses.dataclass
class Access:
    what: str  # "load from" / "store to"
    buffer: T.Buffer
    index: Expr  # the index node of the program (identity matters: see _moved)
    lo: int | None = None  # None: never ran, or (with exact=False) an index not computed
    hi: int | None = None


class _Compiler:
    """PrimFunc -> Python source of ``run(rec)``, which calls ``rec(site, index)`` for each
    access that runs.  Integer expressions become Python source; anything else (data, floats)
    is None, and a condition that is None counts as "maybe" (both branches run)."""

    def __init__(self):
        self.lines: list = []
        self.names: dict = {}
        self.sites: list = []
        self.temps = 0

    def var(self, v: Var) -> str:
        return self.names.setdefault(v, f"v{len(self.names)}")

    def value(self, e: Expr, lane: str) -> str | None:
        if isinstance(e, IntImm):
            return str(bool(e.value)) if e.dtype == "bool" else str(int(e.value))
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, Ramp):
            base, stride = self.value(e.base, lane), self.value(e.stride, lane)
            return None if base is None or stride is None else f"({base} + {stride} * {lane})"
        if isinstance(e, Broadcast):
            return self.value(e.value, lane)
        if isinstance(e, Cast):
            return None if is_float(e.dtype) or is_float(e.value.dtype) else self.value(e.value, lane)
        if isinstance(e, BinaryOp) and not is_float(e.dtype) and e.op in _ARITH:
            a, b = self.value(e.a, lane), self.value(e.b, lane)
            return None if a is None or b is None else _ARITH[e.op].format(a, b)
        if isinstance(e, (CmpOp, LogicalOp, Not)):
            return self.cond(e, lane)
        return None  # FloatImm, loads, calls, selects: data

    def cond(self, e: Expr, lane: str) -> str:
        if isinstance(e, CmpOp):
            if is_float(e.a.dtype) or is_float(e.b.dtype):
                return "None"
            a, b = self.value(e.a, lane), self.value(e.b, lane)
            return "None" if a is None or b is None else f"({a} {_CMP[e.op]} {b})"
        if isinstance(e, LogicalOp):
            return f"_{e.op}({self.cond(e.a, lane)}, {self.cond(e.b, lane)})"
        if isinstance(e, Not):
            return f"_not({self.cond(e.a, lane)})"
        v = self.value(e, lane)
        return "None" if v is None else f"_truth({v})"

    def loads(self, e: Expr, conds: tuple, ind: str, lane: str) -> None:
        """A check of each BufferLoad of ``e``, under the conditions of the Selects around it."""
        stack = [(e, conds)]
        while stack:
            n, cs = stack.pop()
            if isinstance(n, BufferLoad):
                index = n.index
                if n.lanes > 1 and not any(isinstance(x, (Ramp, Broadcast)) for x in walk(index)):
                    index = Ramp(index, IntImm(1), n.lanes)  # codegen: a contiguous vector
                self.site("load from", n.buffer, n.index, index, cs, ind, lane)
                stack.append((n.index, cs))
            elif isinstance(n, Select):
                c = self.cond(n.cond, lane)
                stack += [(n.cond, cs), (n.true_value, cs + (c,)), (n.false_value, cs + (f"_not({c})",))]
            else:
                stack += [(k, cs) for k in children(n)]

    def site(self, what: str, buf: T.Buffer, node: Expr, index: Expr, conds: tuple, ind: str,
             lane: str) -> None:
        self.sites.append(Access(what, buf, node))
        when = " and ".join(f"{c} is not False" for c in conds) or "True"
        self.lines.append(f"{ind}if {when}: rec({len(self.sites) - 1}, {self.value(index, lane)})")

    def stmt(self, s: T.Stmt, ind: str) -> None:
        if isinstance(s, T.SeqStmt):
            for c in s.seq:
                self.stmt(c, ind)
        elif isinstance(s, T.For):
            lo, ext = self.value(s.min, "0"), self.value(s.extent, "0")
            if lo is None or ext is None:
                raise NotImplementedError("a loop bound that is not integer arithmetic")
            self.lines += [f"{ind}for {self.var(s.loop_var)} in range({lo}, {lo} + {ext}):", f"{ind} pass"]
            self.stmt(s.body, ind + " ")
        elif isinstance(s, T.IfThenElse):
            self.temps += 1
            c = f"c{self.temps}"
            self.loads(s.cond, (), ind, "0")
            self.lines += [f"{ind}{c} = {self.cond(s.cond, '0')}", f"{ind}if {c} is not False:", f"{ind} pass"]
            self.stmt(s.then_case, ind + " ")
            if s.else_case is not None:
                self.lines += [f"{ind}if {c} is not True:", f"{ind} pass"]
                self.stmt(s.else_case, ind + " ")
        elif isinstance(s, T.LetStmt):
            self.loads(s.value, (), ind, "0")
            self.lines.append(f"{ind}{self.var(s.var)} = {self.value(s.value, '0')}")
            self.stmt(s.body, ind)
        elif isinstance(s, T.Allocate):
            self.stmt(s.body, ind)
        elif isinstance(s, T.Evaluate):
            self.loads(s.value, (), ind, "0")
        elif isinstance(s, T.Store):
            lanes = max([1] + [n.lanes for e in (s.index, s.value, s.predicate) if e is not None
                               for n in walk(e) if isinstance(n, (Ramp, Broadcast, BufferLoad))])
            self.temps += 1
            lane = f"lane{self.temps}"
            self.lines += [f"{ind}for {lane} in range({lanes}):", f"{ind} pass"]
            conds: tuple = ()
            if s.predicate is not None:
                self.loads(s.predicate, (), ind + " ", lane)
                conds = (self.cond(s.predicate, lane),)
            self.site("store to", s.buffer, s.index, s.index, conds, ind + " ", lane)
            self.loads(s.index, conds, ind + " ", lane)
            self.loads(s.value, conds, ind + " ", lane)


def access_ranges(func: T.PrimFunc) -> tuple:
    """``(accesses, exact)``: the range of each access site's index over the points where it
    runs, and whether every condition and index could be computed (else some ranges may
    include points that never run, and an index that is not computed has lo = hi = None)."""
    comp = _Compiler()
    comp.stmt(func.body, " ")
    source = "def run(rec):\n pass\n" + "\n".join(comp.lines) + "\n"
    scope = {"_and": _and, "_or": _or, "_not": _not, "_truth": _truth, "_tdiv": _tdiv}
    exec(compile(source, "<oracle>", "exec"), scope)
    sites = comp.sites
    unknown: set = set()

    def rec(k: int, v) -> None:
        a = sites[k]
        if v is None:
            unknown.add(k)
        elif a.lo is None:
            a.lo = a.hi = v
        elif v < a.lo:
            a.lo = v
        elif v > a.hi:
            a.hi = v

    scope["run"](rec)
    exact = not unknown and "None" not in source
    return [a for k, a in enumerate(sites) if a.lo is not None and k not in unknown], exact


def _size(buf: T.Buffer) -> int | None:
    n = 1
    for d in buf.shape:
        v = const_value(d)
        if not isinstance(v, int):
            return None
        n *= v
    return n


def _outside(accesses: list) -> list:
    return [a for a in accesses if _size(a.buffer) is not None and (a.lo < 0 or a.hi > _size(a.buffer) - 1)]


# ---------------------------------------------------------------------------
# Mutations: a buffer one element too small, an access one below its buffer
# ---------------------------------------------------------------------------

def _rewrite(func: T.PrimFunc, buffers: dict, indices: dict) -> T.PrimFunc:
    """``func`` with the Buffers of ``buffers`` and the index nodes of ``indices`` (by
    identity) replaced."""

    def fix(n):
        if isinstance(n, BufferLoad) and (n.buffer in buffers or n.index in indices):
            return BufferLoad(buffers.get(n.buffer, n.buffer), transform(indices.get(n.index, n.index), fix),
                              n.dtype, n.lanes)
        return None

    def ex(e):
        return None if e is None else transform(e, fix)

    def go(s):
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(go(c) for c in s.seq))
        if isinstance(s, T.For):
            return dataclasses.replace(s, body=go(s.body))
        if isinstance(s, T.IfThenElse):
            return dataclasses.replace(s, cond=ex(s.cond), then_case=go(s.then_case),
                                       else_case=None if s.else_case is None else go(s.else_case))
        if isinstance(s, T.LetStmt):
            return dataclasses.replace(s, value=ex(s.value), body=go(s.body))
        if isinstance(s, T.Allocate):
            return dataclasses.replace(s, buffer=buffers.get(s.buffer, s.buffer), body=go(s.body))
        if isinstance(s, T.Evaluate):
            return dataclasses.replace(s, value=ex(s.value))
        if isinstance(s, T.Store):
            return T.Store(buffers.get(s.buffer, s.buffer), ex(indices.get(s.index, s.index)), ex(s.value),
                           ex(s.predicate))
        return s  # a statement without expressions (Barrier)

    return dataclasses.replace(func, params=tuple(buffers.get(p, p) for p in func.params), body=go(func.body))


def _refuses(func: T.PrimFunc) -> bool:
    try:
        check_bounds(func)
    except LoweringError:
        return True
    return False


# ---------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------

def _program(name: str, seed: int, n_steps: int):
    """``(state, func)`` of a random legal schedule, lowered as program_from_state lowers it
    (without the bounds check); None when the schedule does not lower."""
    dag = get_dag(name)
    state = random_schedule(State.from_dag(dag), np.random.default_rng(seed), n_steps)
    try:
        return state, lower(apply_layout_rewrite(state), list(dag.tensors), name="f")
    except (ScheduleError, LoweringError):
        return None


def _steps(state) -> str:
    return json.dumps([s.to_record() for s in state.transform_steps])


def check_refused_iff_out_of_bounds(name: str, seed: int, n_steps: int) -> None:
    got = _program(name, seed, n_steps)
    if got is None:
        return
    state, func = got
    accesses, exact = access_ranges(func)
    outside = _outside(accesses)
    if not outside:
        try:
            check_bounds(func)
        except LoweringError as err:
            raise AssertionError(f"{name} seed={seed}: a legal program is refused: {err}\n"
                                 f"steps: {_steps(state)}\n{func}") from err
    elif exact:
        assert _refuses(func), (f"{name} seed={seed}: out-of-bounds accesses accepted: "
                                f"{[(a.what, a.buffer.name, str(a.index), a.lo, a.hi) for a in outside]}\n"
                                f"steps: {_steps(state)}")


def check_mutants_refused(name: str, seed: int, n_steps: int) -> None:
    got = _program(name, seed, n_steps)
    if got is None:
        return
    state, func = got
    accesses, exact = access_ranges(func)
    if not exact or _outside(accesses):
        return
    by_buffer: dict = {}
    for a in accesses:
        by_buffer.setdefault(a.buffer, []).append(a)
    for buf, sites in by_buffer.items():
        top = max(a.hi for a in sites)
        if top >= 1:  # the buffer cut to its largest index: that access is one past the end
            cut = T.Buffer(buf.name, buf.dtype, (IntImm(top),), buf.scope)
            assert _refuses(_rewrite(func, {buf: cut}, {})), \
                f"{name} seed={seed}: {buf.name} cut to {top} elements is accepted\nsteps: {_steps(state)}"
        low = min(sites, key=lambda a: a.lo)  # that access moved to start at -1
        moved = _rewrite(func, {}, {low.index: low.index - IntImm(low.lo + 1)})
        assert _refuses(moved), (f"{name} seed={seed}: {low.what} {buf.name}[{low.index} - {low.lo + 1}] "
                                 f"is accepted\nsteps: {_steps(state)}")


FAST = settings(max_examples=5, deadline=None, derandomize=True, database=None, phases=NO_SHRINK,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=100, deadline=None, database=None, phases=NO_SHRINK,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=st.integers(0, 2 ** 32 - 1), n_steps=st.integers(4, 25))
def test_random_schedules_are_refused_exactly_when_out_of_bounds(name, seed, n_steps):
    check_refused_iff_out_of_bounds(name, seed, n_steps)


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=st.integers(0, 2 ** 32 - 1), n_steps=st.integers(4, 25))
def test_buffers_cut_by_one_and_accesses_moved_below_zero_are_refused(name, seed, n_steps):
    check_mutants_refused(name, seed, n_steps)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@SLOW
@given(seed=st.integers(0, 2 ** 32 - 1), n_steps=st.integers(1, 25))
def test_random_schedules_are_refused_exactly_when_out_of_bounds_slow(name, seed, n_steps):
    check_refused_iff_out_of_bounds(name, seed, n_steps)
    check_mutants_refused(name, seed, n_steps)


def test_the_oracle_sees_what_runs():
    """The oracle itself: guards, lanes of a Ramp, Select branches, a data-dependent branch."""
    i = Var("i")
    a = T.Buffer("A", "float32", (IntImm(10),))
    b = T.Buffer("B", "float32", (IntImm(16),))
    body = T.For(i, IntImm(0), IntImm(4), "serial", T.SeqStmt((
        T.IfThenElse(i * 4 < 10, T.Store(a, i * 4, FloatImm(0.0))),
        T.Store(b, Ramp(i * 4, IntImm(1), 4), BufferLoad(b, Ramp(i * 4, IntImm(1), 4), lanes=4)),
        T.Store(a, IntImm(0), Select(i < 2, BufferLoad(a, i + 8), FloatImm(0.0))),
    )))
    func = T.PrimFunc("f", (a, b), (), body)
    accesses, exact = access_ranges(func)
    assert exact
    assert [(x.what, x.buffer.name, x.lo, x.hi) for x in accesses] == [
        ("store to", "A", 0, 8), ("store to", "B", 0, 15), ("load from", "B", 0, 15),
        ("store to", "A", 0, 0), ("load from", "A", 8, 9)]
    data = T.IfThenElse(CmpOp("lt", BufferLoad(b, i), FloatImm(0.0)), T.Store(a, i + 6, FloatImm(0.0)))
    accesses, exact = access_ranges(T.PrimFunc("f", (a, b), (), T.For(i, IntImm(0), IntImm(4), "serial", data)))
    assert not exact and [(x.buffer.name, x.lo, x.hi) for x in accesses] == [("B", 0, 3), ("A", 6, 9)]
