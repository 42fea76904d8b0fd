"""The loop nests of a lowering plan: TVM's ScheduleOps / MakeLoopNest.

    plan (attach tree, regions, buffers) --StmtEmitter(plan).emit_all()--> the loop program body

Each stage's loop nest goes over its leaf iterators (``For`` of the iterator's annotation:
serial, unrolled, vectorized, parallel, or a GPU tag), with the stages attached at each
loop placed at the start of that loop's body (their local buffers allocated around them),
reductions split into an init nest and an update nest (TVM's ``MakeReduction``), and
``likely`` guards for non-divisible splits and over-approximated regions.  Tensor reads
become flat ``BufferLoad``\\ s through the plan's buffers.  TVM's
``src/te/schedule/schedule_ops.cc`` (``MakePipeline``) and
``src/te/operation/op_utils.cc`` (``MakeLoopNest``).
"""

from __future__ import annotations

from typing import Any

from scheduler_core.arith.divmod_form import simplify_divmod
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag.tensor import Tensor
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import (
    BufferLoad,
    CheckedIndex,
    Expr,
    FloatImm,
    IntImm,
    Reduce,
    TensorLoad,
    Var,
    as_expr,
    binary,
)
from scheduler_core.ir.expr_functor import reduce_identity, substitute, transform, walk
from scheduler_core.ir.simplify import const_value, simplify

__all__ = ["StmtEmitter", "tensor_key", "const_of", "vars_of"]

_KIND = {"none": "serial", "unroll": "unrolled", "vectorize": "vectorized", "parallel": "parallel"}
_COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b,
            "max": lambda a, b: binary("max", a, b), "min": lambda a, b: binary("min", a, b)}


def tensor_key(t: Tensor) -> tuple:
    """The key of tensor ``t`` in a plan's buffer table: (its op, which output)."""
    return (id(t.op), t.value_index)


def const_of(e):
    """``const_value(e)`` with the common constant cases answered without simplifying."""
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, (int, float)):
        return e
    return const_value(e)


def vars_of(e) -> list:
    """The Vars of ``e`` (an Expr or a constant), pre-order."""
    return [n for n in walk(as_expr(e)) if isinstance(n, Var)]


def _has_load(e: Expr) -> bool:
    return any(type(n) is TensorLoad for n in walk(e))


def checked_gather(tensor: Tensor, indices: tuple) -> tuple:
    """``indices`` of a read of ``tensor`` (lowered: reads are BufferLoads) with each axis index
    that reads a tensor (a gather: the value comes from the data, no analysis can bound it)
    wrapped in ``CheckedIndex(index, extent of that axis)``: clamped to the axis and reported
    at run time when out of range (see ``ir.expr.CheckedIndex``)."""
    return tuple(CheckedIndex(i, as_expr(tensor.shape[d]), i.dtype)
                 if any(type(n) is BufferLoad for n in walk(i)) else i
                 for d, i in enumerate(indices))


def _has_nested_load(e: Expr) -> bool:
    """Whether a tensor read in ``e`` has a tensor read in its indices."""
    return any(type(n) is TensorLoad and any(_has_load(i) for i in n.indices) for n in walk(e))


class StmtEmitter:
    """Builds loop nests from a plan (``lower._Plan``: stages, where each is computed, their
    buffers, leaf loop variables and extents, guards, attached children)."""

    def __init__(self, plan: Any):
        self.p = plan
        self._tidy: tuple = (None, {}, {})  # range env, and the memos of _tidy_memo for it
        self._root_reads: dict = {}  # stage id -> whether its root values read a tensor
        self._pragmas: dict = {}  # stage id -> its pragma_dict()

    def lower_expr(self, e: Expr, k: int) -> Expr:
        """Stage ``k``'s expression with root vars bound and tensor reads as buffer loads."""
        p = self.p
        # Reads inside the indices of reads (a gather) come from e itself or from the root
        # values put in for its root vars; without any, the indices have nothing to rewrite.
        nested = _has_nested_load(e) or self._root_loads(k)
        e = substitute(e, p.root_sub(k))

        def fn(n):
            if isinstance(n, TensorLoad):
                info = p.buffers.get(tensor_key(n.tensor))
                if info is None:
                    raise LoweringError(f"no buffer for tensor {n.tensor.name}; is it an argument?")
                idx = checked_gather(n.tensor, tuple(self.lower_expr_plain(i) for i in n.indices)) \
                    if nested else n.indices
                return BufferLoad(info.buffer, self.tidy_flat(info.flat_index(idx, p.forms)), n.dtype)
            return None
        return self.tidy(simplify(transform(e, fn)))

    def tidy(self, e: Expr) -> Expr:
        """Drop floordiv/floormod that the loop bounds make trivial (``floordiv(j0*16 + j1, 16)``)."""
        return simplify_divmod(e, self.p.range_env(), memo=self._tidy_memo()[0])

    def _tidy_memo(self) -> tuple:
        """simplify_divmod's memo (``id -> (node, result)``) and ``id(atom) -> (atom, whether
        tidy leaves it as it is)``, for the current range env: the index expressions of a
        lowering share their atoms (``floormod(i.0.j.0, 16)``...), rewritten once for all."""
        env = self.p.range_env()
        if self._tidy[0] is not env:
            self._tidy = (env, {}, {})
        return self._tidy[1:]

    def tidy_flat(self, flat: Expr) -> Expr:
        """``tidy(flat)`` of a flat index made by ``BufferInfo.flat_index``.

        Only a floordiv/floormod node changes in ``tidy``; in a linear form (a sum of
        ``atom*coef``) those are inside the atoms, so when ``tidy`` leaves every atom as it
        is it leaves the sum as it is, which is then noted in its memo for the ``tidy`` of
        the whole expression around it.
        """
        form = self.p.forms.known(flat)
        if form is None:
            return self.tidy(flat)
        memo, fixed = self._tidy_memo()
        for atom, _ in form[0].values():
            if type(atom) is Var:
                continue
            hit = fixed.get(id(atom))
            if hit is None or hit[0] is not atom:
                hit = fixed[id(atom)] = (atom, self.tidy(atom) is atom)
            if not hit[1]:
                return self.tidy(flat)
        memo[id(flat)] = (flat, flat)
        return flat

    def _root_loads(self, k: int) -> bool:
        """Whether a root value of stage ``k`` reads a tensor (remembered per stage)."""
        hit = self._root_reads.get(k)
        if hit is None:
            hit = self._root_reads[k] = any(_has_load(v) for v in self.p.root_sub(k).values())
        return hit

    def lower_expr_plain(self, e: Expr) -> Expr:
        """``e`` with tensor reads as buffer loads (not tidied): an index of a read."""
        p = self.p

        def fn(n):
            if isinstance(n, TensorLoad):
                info = p.buffers[tensor_key(n.tensor)]
                idx = checked_gather(n.tensor, tuple(self.lower_expr_plain(i) for i in n.indices))
                return BufferLoad(info.buffer, info.flat_index(idx, p.forms), n.dtype)
            return None
        return transform(e, fn)

    def _loop(self, k: int, it, body: T.Stmt) -> T.Stmt:
        p = self.p
        st = p.stages[k]
        pragmas = self._pragmas.get(k)
        if pragmas is None:
            pragmas = self._pragmas[k] = st.pragma_dict()
        prag = pragmas.get(it.name, {})
        ann = {"auto_unroll_max_step": prag["auto_unroll_max_step"]} if "auto_unroll_max_step" in prag else {}
        kind = _KIND.get(it.annotation, it.annotation)
        var, ext = p.leaf_vars[k][it.name], p.leaf_ext[k][it.name]
        if const_of(ext) == 1 and not ann and kind in ("serial", "unrolled", "vectorized", "parallel"):
            return body  # a loop of one trip is its body (its variable was bound to 0)
        return T.For(var, IntImm(0), ext, kind, body, ann)

    def _attached(self, k: int, it_name: str, inner: T.Stmt) -> T.Stmt:
        """``inner`` preceded by the stages attached at ``k.it_name``, with their buffers."""
        kids = self.p.children.get((k, it_name), [])
        if not kids:
            return inner
        out = inner
        for c in reversed(kids):
            out = T.seq(self.emit(c), out)
            for info in reversed(self.p.allocs_at.get(c, [])):
                out = T.Allocate(info.buffer, out)
        return out

    def _nest(self, k: int, iters, innermost: T.Stmt, with_attached: bool = True) -> T.Stmt:
        body = innermost
        for it in reversed(iters):
            if with_attached:
                body = self._attached(k, it.name, body)
            body = self._loop(k, it, body)
        return body

    def _guarded(self, conds: list, s: T.Stmt) -> T.Stmt:
        conds = [c for c in conds if not (isinstance(c, IntImm) and c.value)]
        if not conds:
            return s
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return T.IfThenElse(simplify(cond), s, None, likely=True)

    def emit(self, k: int) -> T.Stmt:
        p = self.p
        st = p.stages[k]
        if p.where[k] == "scan":
            # The stages of one time step run in the innermost time loop, guarded
            # against the extra steps of a non-divisible split of the time axis.
            last = st.iters[-1]
            step = self._guarded(p.guards[k], self._attached(k, last.name, T.SeqStmt(())))
            return self._nest(k, st.iters[:-1], self._loop(k, last, step))
        spatial = [iv for iv in st.root if iv.kind != "reduce"]
        idx = [p.root_vals[k][iv.var.name] for iv in spatial]
        # One (buffer, flat index, body) per output: a multi-output compute stores each
        # output in the same loop nest (TVM's MakeComputeStmt: one Provide per output).
        outs = []
        for i in range(st.op.num_outputs):
            info = p.buffers[tensor_key(st.op.output(i))]
            outs.append((info, self.tidy_flat(info.flat_index(idx, p.forms)), p.body_of(k, i)))
        guards = [simplify(substitute(g, {})) for g in p.guards[k]]
        if not isinstance(outs[0][2], Reduce):
            stores = [T.Store(info.buffer, flat, self.lower_expr(body, k)) for info, flat, body in outs]
            return self._nest(k, st.iters, self._guarded(guards, T.seq(*stores)))
        return self._emit_reduce(k, st, outs, guards)

    def _emit_reduce(self, k, st, outs: list, guards) -> T.Stmt:
        """The init nest and the update nest of a reduction stage; ``outs``: (BufferInfo,
        flat index, Reduce body) per output, the Reduces sharing axes, combiner and condition."""
        p = self.p
        red_vars = {p.leaf_vars[k][it.name] for it in st.iters if it.kind == "reduce"}
        first_body: Reduce = outs[0][2]
        upd_conds = list(guards)
        if first_body.condition is not None:
            upd_conds.append(self.lower_expr(first_body.condition, k))
        updates, inits = [], []
        for info, flat, body in outs:
            cur = BufferLoad(info.buffer, flat, body.dtype)
            src = self.lower_expr(body.source, k)
            updates.append(T.Store(info.buffer, flat, _COMBINE[body.combiner](cur, src)))
            inits.append(T.Store(info.buffer, flat, reduce_identity(body.combiner, body.dtype)))
        update = self._guarded(upd_conds, T.seq(*updates))
        first = next(i for i, it in enumerate(st.iters) if it.kind == "reduce")
        outer, rest = st.iters[:first], st.iters[first:]
        init_iters = [it for it in rest if it.kind != "reduce"]
        init_guards = [g for g in guards if not (vars_of(g) and set(map(id, vars_of(g))) & set(map(id, red_vars)))]
        init = self._guarded(init_guards, T.seq(*inits))
        init_nest = self._nest(k, init_iters, init, with_attached=False)
        main = self._nest(k, rest, update)
        inner = T.seq(init_nest, main)
        return self._nest(k, outer, inner)

    def emit_all(self) -> T.Stmt:
        p = self.p
        parts = [self.emit(k) for k in range(p.n) if p.where[k] in ("root", "scan")]
        body = T.seq(*parts) if parts else T.SeqStmt(())
        for info in reversed(p.allocs_root):
            body = T.Allocate(info.buffer, body)
        return body
