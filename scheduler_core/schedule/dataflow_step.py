"""Transform steps that change the dataflow: compute_inline (CI), cache_read
(CHR), cache_write (CHW) and rfactor (RF), plus record decoding of all steps.

Cache and rfactor steps add a stage and rewrite every op downstream so that
it reads the new tensors (TVM's ReplaceDataFlow); the stage of an op of the
original DAG keeps that op as ``origin_op`` so lowering can still bind it to
the function argument the user passed.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

from scheduler_core.base.errors import ScheduleError, check
from scheduler_core.dag.tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor
from scheduler_core.ir.expr import (
    Expr,
    IntImm,
    IterVar,
    Reduce,
    TensorLoad,
    Var,
    as_expr,
    select,
)
from scheduler_core.ir.expr_functor import depth, reduce_identity, substitute, transform
from scheduler_core.ir.simplify import simplify

from . import transform_step as ts
from .iter_index import root_values_with_guards
from .loop_state import ANNOTATIONS, State, make_stage


def _key(t: Tensor) -> tuple:
    return (id(t.op), t.value_index)


def _replace_loads(e, mapping: dict):
    def fn(n):
        if isinstance(n, TensorLoad) and _key(n.tensor) in mapping:
            new_idx = tuple(_replace_loads(i, mapping) for i in n.indices)
            t = mapping[_key(n.tensor)]
            return TensorLoad(t, new_idx, t.dtype)
        return None
    return transform(e, fn)


def rebuild_op(op, mapping: dict):
    """``op`` reading ``mapping[key(t)]`` instead of ``t``; ``op`` itself if unchanged."""
    if isinstance(op, ComputeOp):
        if not any(_key(t) in mapping for t in op.input_tensors()):
            return op
        attrs = dict(op.attrs)
        if "layout_free_placeholders" in attrs:
            attrs["layout_free_placeholders"] = [
                mapping.get(_key(t), t) for t in attrs["layout_free_placeholders"]]
        return ComputeOp(op.name, op.axis, _replace_loads(op.body, mapping), attrs, op.tag,
                         tuple(_replace_loads(b, mapping) for b in op.extra_bodies))
    if isinstance(op, ScanOp):
        sub = lambda ts_: tuple(mapping.get(_key(t), t) for t in ts_)  # noqa: E731
        new = ScanOp(op.name, op.scan_axis, sub(op.init), sub(op.update),
                     op.state_placeholder, op.inputs)
        changed = any(a is not b for a, b in zip(new.init + new.update, op.init + op.update))
        return new if changed else op
    return op


def rewrite_dataflow(state: State, mapping: dict, only: set | None = None) -> State:
    """Rebuild ops that read tensors in ``mapping`` (only stages in ``only`` for the
    first replacement), then propagate the new outputs to all later readers."""
    stages = list(state.stages)
    first = dict(mapping)
    downstream: dict = {}
    for k, st in enumerate(stages):
        if st.op_type == "placeholder":
            continue
        m = dict(downstream)
        if only is None or k in only:
            m.update(first)
        new_op = rebuild_op(st.op, m)
        if new_op is not st.op:
            for v in range(st.op.num_outputs):
                downstream[_key(st.op.output(v))] = new_op.output(v)
            stages[k] = replace(st, op=new_op)
    return replace(state, stages=tuple(stages))


def _fresh_axes(shape: tuple, prefix: str = "ax") -> tuple:
    return tuple(IterVar(Var(f"{prefix}{k}"), IntImm(0), as_expr(s), "spatial") for k, s in enumerate(shape))


def _is_output(state: State, stage_id: int) -> bool:
    st = state.stages[stage_id]
    return any(t.op is st.origin_op for t in state.dag.outputs)


def cache_stage_name(state: State, name: str, scope: str) -> str:
    """The name of a new cache stage of tensor ``name`` in ``scope``: ``<name>.<scope>``,
    with ``.d`` appended to ``name`` while a stage of that name exists (``A.shared``,
    ``A.d.shared``, ``A.d.d.shared``).

    This is te's ``Schedule::cache_read`` (``schedule_dataflow_rewrite.cc``: "when a
    schedule has multiple cache_read on the same tensor, we make sure their op names are
    unique"), which TVM's CacheReadStep replays.  te's cache_write does not do it (a
    second cache_write of ``C`` gives a second ``C.local``); here CacheWriteStep uses the
    same rule, so that stage names, which name buffers, printed schedules and
    ``State.stage_index`` lookups, stay unique.
    """
    taken = {st.name for st in state.stages}
    while f"{name}.{scope}" in taken:
        name += ".d"
    return f"{name}.{scope}"


MAX_INLINED_DEPTH = 96  # deepest expression an inline may build (a chain of elementwise stages)


_OP_SHAPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # op -> (body depth, input ops)


def _op_shape(op) -> tuple:
    """(depth of the op's deepest body (1 for a non-compute op), the ops it reads), cached per op:
    ops are immutable and the search replays the same ones in every state."""
    hit = _OP_SHAPES.get(op)
    if hit is None:
        own = max(depth(b) for b in op.bodies) if isinstance(op, ComputeOp) else 1
        hit = (own, tuple(t.op for t in op.input_tensors()))
        _OP_SHAPES[op] = hit
    return hit


def inlined_depth(state: State, stage_id: int) -> int:
    """The depth of the deepest expression that inlining ``stage_id`` would build: over the stages
    it would be inlined into (its readers, through stages already inlined), the depth of each
    one's body plus those of the inlined stages it reads, transitively (an upper bound: each
    inlined read is counted at its consumer's full depth).  Iterative; no recursion."""
    stages = state.stages
    index = {id(s.op): k for k, s in enumerate(stages)}
    reads: list = []
    readers: dict = {}
    owns: list = []
    for k, s in enumerate(stages):
        own, inputs = _op_shape(s.op)
        ids = sorted({index[id(t)] for t in inputs if id(t) in index})
        reads.append(ids)
        owns.append(own)
        for q in ids:
            readers.setdefault(q, []).append(k)

    def inlined(k: int) -> bool:
        return k == stage_id or stages[k].compute_at == "inlined"
    up = [0] * len(stages)  # a stage's expression with its inlined producers substituted
    for k in range(len(stages)):  # stages are in topological order
        up[k] = owns[k] + max((up[q] for q in reads[k] if inlined(q)), default=0)
    deepest, stack, seen = 0, [stage_id], {stage_id}
    while stack:
        for r in readers.get(stack.pop(), ()):
            if r in seen:
                continue
            seen.add(r)
            if inlined(r):
                stack.append(r)
            else:
                deepest = max(deepest, up[r])
    return deepest


@dataclass(frozen=True)
class ComputeInlineStep:
    """CI: inline an element-wise stage into its consumers.

    Raises ScheduleError for a bad stage id, a placeholder, a reduction, an output, a
    scan's init or update, (as TVM's ComputeInlineStep) a stage that other stages
    are computed at, and an inline that would build an expression deeper than
    MAX_INLINED_DEPTH (:func:`inlined_depth`: a long chain of element-wise stages is then
    computed in pieces; the sketch rules leave such a stage at root).  Where the stages it
    reads are computed is checked on the final state, at lowering (:func:`transform_step.check_compute_locations`).
    """

    stage_id: int

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        check(st.op_type == "compute", f"only compute stages can be inlined; {st.name} is a {st.op_type}")
        check(not isinstance(st.op.body, Reduce), f"cannot inline {st.name}: it is a reduction")
        check(st.op.num_outputs == 1, f"cannot inline {st.name}: it has {st.op.num_outputs} outputs")
        check(not _is_output(state, self.stage_id), f"cannot inline {st.name}: it is an output")
        check(not state.attached_to(self.stage_id),
              f"cannot inline {st.name}: other stages are computed at its loops")
        for sc in state.stages:
            if isinstance(sc.op, ScanOp):
                check(not any(t.op is st.op for t in sc.op.init + sc.op.update),
                      f"cannot inline {st.name}: it is a scan's init or update")
        deep = inlined_depth(state, self.stage_id)
        check(deep <= MAX_INLINED_DEPTH,
              f"cannot inline {st.name}: the expression it would be inlined into would be up to {deep} "
              f"levels deep (limit {MAX_INLINED_DEPTH}: lowering and code generation walk expressions "
              "recursively)")
        st = replace(st, compute_at="inlined", attach=None)
        return state.with_stage(self.stage_id, st).with_step(self)

    def to_record(self) -> list:
        return ["CI", self.stage_id]


@dataclass(frozen=True)
class CacheReadStep:
    """CHR: copy stage ``stage_id``'s output into ``<name>.<scope>`` for ``reader_stage_ids``.

    The cache stage is inserted right after ``stage_id`` and named by
    :func:`cache_stage_name` (a second cache of the same tensor in the same scope is
    ``<name>.d.<scope>``, as te's cache_read names it).  Raises ScheduleError for a bad
    stage id, a multi-output op, no readers or a reader that does not read the stage.
    Where the new stage is computed is checked at lowering, on the final state.
    """

    stage_id: int
    scope_name: str
    reader_stage_ids: tuple

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        check(st.op.num_outputs == 1, "cache_read of a multi-output op is not supported")
        t = st.op.output(0)
        readers = set(self.reader_stage_ids)
        check(bool(readers), "cache_read needs at least one reader")
        for r in readers:
            check(0 <= r < len(state.stages) and any(
                _key(x) == _key(t) for x in state.stages[r].op.input_tensors()),
                f"stage #{r} does not read {st.name}")
        axes = _fresh_axes(t.shape)
        cache = ComputeOp(cache_stage_name(state, st.name, self.scope_name), axes,
                          TensorLoad(t, tuple(a.var for a in axes), t.dtype))
        state = rewrite_dataflow(state, {_key(t): cache.output(0)}, only=readers)
        pos = self.stage_id + 1
        state = state.insert_stage(pos, make_stage(cache, origin_op=None))
        state = replace(state, stages=tuple(
            replace(s, origin_op=None) if s.op is cache else s for s in state.stages))
        return state.with_step(self)

    def to_record(self) -> list:
        return ["CHR", self.stage_id, self.scope_name, list(self.reader_stage_ids)]


def _replace_with_pair(state: State, stage_id: int, new_op, producer_op) -> State:
    """Stage ``stage_id`` now computes ``new_op`` (same output, same placement), which
    reads ``producer_op``; the producer gets a fresh stage inserted before it
    (cache_write, rfactor).  Readers downstream are rewritten to the new output."""
    st = state.stages[stage_id]
    new_stage = replace(make_stage(new_op, origin_op=st.origin_op), compute_at=st.compute_at,
                        attach=st.attach)
    state = state.with_stage(stage_id, new_stage)
    state = rewrite_dataflow(state, {_key(st.op.output(v)): new_op.output(v) for v in range(st.op.num_outputs)})
    return state.insert_stage(stage_id, replace(make_stage(producer_op), origin_op=None))


@dataclass(frozen=True)
class CacheWriteStep:
    """CHW: compute ``stage_id`` into ``<name>.<scope>``, then copy it to the real output.

    The new stage is named by :func:`cache_stage_name` (``<name>.d.<scope>`` when
    ``<name>.<scope>`` exists, e.g. after a first cache_write).

    The new stage holding the computation is inserted before ``stage_id``; the
    original stage becomes an element-wise copy with fresh, untransformed loops.  For a
    multi-output op the new stage computes every output and the copy stage copies each
    one, all in one loop nest (TVM's cache_write of a multi-output ComputeOp).
    """

    stage_id: int
    scope_name: str

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        check(isinstance(st.op, ComputeOp), f"cache_write needs a compute stage; {st.name} is a {st.op_type}")
        check(st.compute_at != "inlined", f"cannot cache_write the inlined stage {st.name}")
        check(not st.is_transformed(), f"cache_write on {st.name} must come before its loops are transformed")
        check(not state.attached_to(self.stage_id), f"cache_write on {st.name}: stages are attached to it")
        op = st.op
        local = ComputeOp(cache_stage_name(state, op.name, self.scope_name), op.axis, op.body, dict(op.attrs),
                          op.tag, op.extra_bodies)
        axes = tuple(IterVar(Var(a.var.name), a.dom_min, a.dom_extent, "spatial") for a in op.axis)
        # A multi-output op: one cache stage computes every output, the copy stage copies
        # each (TVM's CacheWrite of a multi-output ComputeOp).
        copies = [TensorLoad(local.output(v), tuple(a.var for a in axes), local.output(v).dtype)
                  for v in range(op.num_outputs)]
        copy = ComputeOp(op.name, axes, copies[0], extra_bodies=tuple(copies[1:]))
        return _replace_with_pair(state, self.stage_id, copy, local).with_step(self)

    def to_record(self) -> list:
        return ["CHW", self.stage_id, self.scope_name]


@dataclass(frozen=True)
class RfactorStep:
    """RF: factor the reduction over reduce iterator ``iter_id`` into a new stage.

    ``<name>.rf`` keeps iterator ``iter_id`` as a spatial axis inserted at
    position ``factor_iter_id`` and reduces over the other reduce iterators;
    the original stage then reduces ``<name>.rf`` over that axis.  Both stages
    restart from untransformed loops (as in Ansor).
    """

    stage_id: int
    iter_id: int
    factor_iter_id: int

    def apply(self, state: State) -> State:
        st, it = ts._stage_iter(state, self.stage_id, self.iter_id)
        op = st.op
        check(isinstance(op, ComputeOp) and isinstance(op.body, Reduce),
              f"rfactor needs a reduction stage; {st.name} is not one")
        check(op.num_outputs == 1, f"rfactor of {st.name}: a reduction with several outputs is not supported")
        check(it.kind == "reduce", f"rfactor needs a reduce iterator; {it.name} is {it.kind}")
        check(0 <= self.factor_iter_id <= len(op.axis), "factor_iter_id out of range")
        check(not state.attached_to(self.stage_id), f"rfactor on {st.name}: stages are attached to it")
        reduce_leaves = [i for i in st.iters if i.kind == "reduce"]
        for i in reduce_leaves:
            check(i.extent is not None, "rfactor needs known split lengths")
        # New variables: the chosen leaf becomes spatial, other reduce leaves stay reduce.
        leaf_vars = {i.name: Var(i.name.replace(".", "_").replace("@", "_")) for i in reduce_leaves}
        values, guards = _reduce_values(st, leaf_vars)
        body = op.body
        sub = {iv.var: values[iv.var.name] for iv in op.reduce_axis}
        src = substitute(body.source, sub)
        cond = None if body.condition is None else substitute(body.condition, sub)
        for g in guards:
            cond = g if cond is None else (cond & g)
        rf_axis = IterVar(leaf_vars[it.name], IntImm(0), as_expr(it.extent), "spatial")
        red = tuple(IterVar(leaf_vars[i.name], IntImm(0), as_expr(i.extent), "reduce")
                    for i in reduce_leaves if i.name != it.name)
        spatial = list(op.axis)
        spatial.insert(self.factor_iter_id, rf_axis)
        rf_body: Expr
        if red:
            rf_body = Reduce(body.combiner, src, red, cond, body.dtype)
        else:
            rf_body = src if cond is None else select(cond, src, reduce_identity(body.combiner, body.dtype))
        rf_op = ComputeOp(f"{op.name}.rf", tuple(spatial), rf_body, {}, op.tag)
        # The original stage now reduces rf over the factored axis.
        k = IterVar(Var(f"{it.name.replace('.', '_')}_v"), IntImm(0), as_expr(it.extent), "reduce")
        idx = [a.var for a in op.axis]
        idx.insert(self.factor_iter_id, k.var)
        final_body = Reduce(body.combiner, TensorLoad(rf_op.output(0), tuple(idx), rf_op.dtype), (k,),
                            None, body.dtype)
        final = ComputeOp(op.name, op.axis, final_body, dict(op.attrs), op.tag)
        return _replace_with_pair(state, self.stage_id, final, rf_op).with_step(self)

    def to_record(self) -> list:
        return ["RF", self.stage_id, self.iter_id, self.factor_iter_id]


def _reduce_values(stage, leaf_vars: dict):
    """Values of the stage's root reduce axes in terms of its reduce leaf vars, plus guards."""
    spatial = {i.name: IntImm(0) for i in stage.iters if i.kind != "reduce"}
    values, guards = root_values_with_guards(stage, {**spatial, **leaf_vars}, reduce_only=True)
    return values, guards


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------

def step_from_record(rec: list):
    """Decode one Ansor-style step record (``["SP", 2, 0, 1024, [4, 8], 1]`` ...).

    Raises ScheduleError on an unknown or malformed record.
    """
    try:
        kind = rec[0]
        if kind == "SP":
            return ts.SplitStep(int(rec[1]), int(rec[2]), rec[3], tuple(rec[4]), bool(rec[5]))
        if kind == "FSP":
            return ts.FollowSplitStep(int(rec[1]), int(rec[2]), int(rec[3]), int(rec[4]))
        if kind == "FFSP":
            return ts.FollowFusedSplitStep(int(rec[1]), int(rec[2]), tuple(rec[3]), int(rec[4]), bool(rec[5]))
        if kind == "FU":
            return ts.FuseStep(int(rec[1]), tuple(int(x) for x in rec[2]))
        if kind == "RE":
            return ts.ReorderStep(int(rec[1]), tuple(int(x) for x in rec[2]))
        if kind == "AN":  # the code is TVM's IteratorAnnotation (loop_state.ANNOTATIONS)
            code = int(rec[3])
            if not 0 <= code < len(ANNOTATIONS):
                raise ScheduleError(f"unknown annotation code {code} in step record {rec!r}; the codes are "
                                    + ", ".join(f"{k}={name}" for k, name in enumerate(ANNOTATIONS)))
            return ts.AnnotationStep(int(rec[1]), int(rec[2]), ANNOTATIONS[code])
        if kind == "PR":
            return ts.PragmaStep(int(rec[1]), int(rec[2]), str(rec[3]))
        if kind == "CA":
            return ts.ComputeAtStep(int(rec[1]), int(rec[2]), int(rec[3]))
        if kind == "CR":
            return ts.ComputeRootStep(int(rec[1]))
        if kind == "SA":
            return ts.StorageAlignStep(int(rec[1]), int(rec[2]), int(rec[3]), int(rec[4]))
        if kind == "CI":
            return ComputeInlineStep(int(rec[1]))
        if kind == "CHR":
            return CacheReadStep(int(rec[1]), str(rec[2]), tuple(int(x) for x in rec[3]))
        if kind == "CHW":
            return CacheWriteStep(int(rec[1]), str(rec[2]))
        if kind == "RF":
            return RfactorStep(int(rec[1]), int(rec[2]), int(rec[3]))
    except (IndexError, TypeError, ValueError, KeyError) as err:
        raise ScheduleError(f"malformed step record {rec!r}: {err}") from None
    raise ScheduleError(f"unknown step kind in record {rec!r}")


def replay_steps(dag, steps) -> State:
    """Apply ``steps`` (objects or records) to ``dag``'s initial state."""
    state = State.from_dag(dag)
    for s in steps:
        step = step_from_record(list(s)) if isinstance(s, (list, tuple)) else s
        state = step.apply(state)
    return state


__all__ = ["cache_stage_name", "ComputeInlineStep", "CacheReadStep", "CacheWriteStep", "RfactorStep",
           "step_from_record", "replay_steps", "rewrite_dataflow", "PlaceholderOp", "simplify"]
