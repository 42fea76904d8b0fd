"""Layout rewrite of layout-free placeholders (Ansor's LayoutRewriteOption).

A compute may mark inputs as ``attrs={"layout_free_placeholders": [B]}`` (seed
000): their layout is the searcher's to choose, typically because they are
constant weights.  After a state is fully scheduled, :func:`apply_layout_rewrite`
adds a transform stage ``<B>.layout`` that stores B in the order of the
consumer's own tile loops (one dimension per leaf iterator that indexes B,
outer to inner), and makes the consumer read that buffer instead.  The inner
loops of the tile then walk the rewritten buffer contiguously.  A fused iterator
(the outer tiles fused for ``parallel``) counts as the iterators it fused, as in
TVM's ComputeDAG::RewriteLayout; one that was split again stops the rewrite.  The rewrite is
not a transform step: it is re-applied deterministically whenever a tuned
state is built, so records stay plain step lists (as in Ansor).

With ``pre_transformed=True`` (TVM's ``LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED``)
the transform stage is left out: the consumer reads a new placeholder ``<B>.layout`` of
the tile-ordered shape, which the caller fills once (a model's constant weights, packed at
build time: ``graph.build``); :func:`layout_transforms` says which placeholder replaces which
and gives the transform as a compute of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from scheduler_core.arith.linear_form import linear_form
from scheduler_core.dag.tensor import ComputeOp, PlaceholderOp, Tensor
from scheduler_core.ir.expr import Expr, IntImm, IterVar, TensorLoad, Var, as_expr
from scheduler_core.ir.expr_functor import transform, walk
from scheduler_core.ir.simplify import const_value

from .dataflow_step import rewrite_dataflow
from .iter_index import leaf_extents, root_values_with_guards
from .loop_state import FuseRel, SplitRel, State, make_stage
from .transform_step import AnnotationStep


def _layout_free(op) -> list:
    return list(getattr(op, "attrs", {}).get("layout_free_placeholders", []) or [])


def _unfused_leaves(stage) -> list[str] | None:
    """The stage's leaf iterator names, outer to inner, with every fused iterator replaced by
    the iterators it fused (recursively), as TVM's layout rewrite expands fused iterators.

    None when a fused iterator was split again: its parts are then not plain leaves.
    """
    fuses = {rel.fused: rel.children for rel in stage.relations if isinstance(rel, FuseRel)}
    split_parents = {rel.parent for rel in stage.relations if isinstance(rel, SplitRel)}
    if split_parents & fuses.keys():
        return None

    def expand(name: str) -> list[str]:
        return [x for c in fuses[name] for x in expand(c)] if name in fuses else [name]
    return [x for it in stage.iters for x in expand(it.name)]


def _leaf_strides(stage) -> tuple[dict, list[str]] | None:
    """(root name -> [(leaf name, stride, extent)], the leaves outer to inner) when every root
    is a mixed-radix number of the stage's leaves, fused iterators counted as their parts."""
    leaves = _unfused_leaves(stage)
    if leaves is None:
        return None
    unfused = replace(stage, relations=tuple(r for r in stage.relations if not isinstance(r, FuseRel)))
    root_ext = {iv.var.name: as_expr(iv.dom_extent) for iv in stage.root}
    ext = leaf_extents(unfused, root_ext)
    leaf_vars = {name: Var(name) for name in leaves}
    vals, guards = root_values_with_guards(unfused, leaf_vars, root_ext)
    if guards:
        return None  # a non-divisible split: the rewritten layout would need padding
    by_var = {id(v): name for name, v in leaf_vars.items()}
    out = {}
    for iv in stage.root:
        if iv.var.name not in vals:
            return None
        terms, c0 = linear_form(vals[iv.var.name])
        if c0 != 0:
            return None
        parts = []
        for atom, coef in terms.values():
            if not isinstance(atom, Var) or id(atom) not in by_var:
                return None
            name = by_var[id(atom)]
            e = const_value(ext[name])
            if not isinstance(e, int):
                return None
            parts.append((name, coef, e))
        out[iv.var.name] = parts
    return out, leaves


def _rewrite_one(state: State, k: int, tensor) -> State:
    st = state.stages[k]
    op = st.op
    loads = [n for b in op.bodies for n in _walk_loads(b) if n.tensor == tensor]
    root_vars = {id(iv.var): iv for iv in st.root}
    if not loads:
        return state
    pattern = [tuple(id(i) if isinstance(i, Var) else None for i in ld.indices) for ld in loads]
    if any(p != pattern[0] or None in p for p in pattern) or any(i not in root_vars for i in pattern[0]):
        return state  # only plain axis indexing, the same at every read
    found = _leaf_strides(st)
    if found is None:
        return state
    strides, leaves = found
    index_roots = [root_vars[i] for i in pattern[0] if i is not None]  # (no None: checked above)
    used = {iv.var.name for iv in index_roots}
    leaf_info = {name: (root, coef, e) for root, parts in strides.items() if root in used
                 for name, coef, e in parts}
    dims = [name for name in leaves if name in leaf_info]
    if not dims:
        return state
    shape = tuple(IntImm(leaf_info[d][2]) for d in dims)
    axes = tuple(IterVar(Var(f"ax{n}"), IntImm(0), s, "spatial") for n, s in enumerate(shape))
    # The transform stage: layout[ax...] = B[root values composed from the leaves].
    root_expr: dict[str, Expr] = {}
    for d, ax in zip(dims, axes):
        root, coef, _ = leaf_info[d]
        term = ax.var * coef if coef != 1 else ax.var
        root_expr[root] = term if root not in root_expr else root_expr[root] + term
    src_idx = tuple(root_expr.get(iv.var.name, IntImm(0)) for iv in index_roots)
    layout = ComputeOp(f"{tensor.name}.layout", axes, TensorLoad(tensor, src_idx, tensor.dtype))
    # The consumer reads layout[leaf values], each a floordiv/floormod of its root axis.
    def leaf_index(d):
        root, coef, e = leaf_info[d]
        v = next(iv.var for iv in index_roots if iv.var.name == root)
        total = sum(1 for x in leaf_info.values() if x[0] == root)
        outer = coef * e >= _root_extent(st, root)
        x = v // coef if coef != 1 else v
        return x if (outer or total == 1) else x % e
    new_idx = tuple(leaf_index(d) for d in dims)

    def fn(n):
        if isinstance(n, TensorLoad) and n.tensor == tensor:
            return TensorLoad(layout.output(0), new_idx, n.dtype)
        return None
    new_bodies = [transform(b, fn) for b in op.bodies]
    attrs = {a: v for a, v in op.attrs.items() if a != "layout_free_placeholders"}
    consumer = ComputeOp(op.name, op.axis, new_bodies[0], attrs, op.tag, tuple(new_bodies[1:]))
    state = state.with_stage(k, replace(st, op=consumer))
    state = rewrite_dataflow(state, {(id(op), v): consumer.output(v) for v in range(op.num_outputs)})
    pos = state.stage_index(tensor.op) + 1
    lay = make_stage(layout, origin_op=None)
    lay = replace(lay, origin_op=None)
    return _parallelize_layout(state.insert_stage(pos, lay), pos)


def _root_extent(stage, root: str) -> int:
    for iv in stage.root:
        if iv.var.name == root:
            ext = const_value(iv.dom_extent)
            assert isinstance(ext, int)  # _leaf_strides accepted the stage: every extent is constant
            return ext
    raise KeyError(root)


def _parallelize_layout(state: State, k: int) -> State:
    """Parallel outer loop, vectorized inner loop for the transform stage (as the seed's IR).

    These annotations belong to the rewrite, not to the searched schedule, so they
    are not kept in ``transform_steps``.
    """
    steps = state.transform_steps
    st = state.stages[k]
    if len(st.iters) >= 2:
        state = AnnotationStep(k, 0, "parallel").apply(state)
    inner = st.iters[-1]
    if isinstance(inner.const_extent, int) and 1 < inner.const_extent <= 64:
        state = AnnotationStep(k, len(st.iters) - 1, "vectorize").apply(state)
    return replace(state, transform_steps=steps)


def _walk_loads(e):
    return [n for n in walk(e) if isinstance(n, TensorLoad)]


def apply_layout_rewrite(state: State, pre_transformed: bool = False) -> State:
    """``state`` with every layout-free placeholder read through a tile-ordered copy.

    A no-op for DAGs without ``layout_free_placeholders`` or when the consumer's
    loops do not allow it (non-divisible splits, a fused iterator split again, non-plain
    indexing).  Fused iterators count as the iterators they fused (TVM does the same).
    pre_transformed : bool, read a placeholder ``<B>.layout`` holding the copy instead of
        computing it (module docstring); a placeholder that another stage also reads keeps
        its transform stage.
    """
    for k in range(len(state.stages)):
        st = state.stages[k]
        if not isinstance(st.op, ComputeOp):
            continue
        for t in _layout_free(st.op):
            if isinstance(t.op, PlaceholderOp) and st.compute_at != "inlined":
                state = _rewrite_one(state, state.stage_index(st.op), t)
    return pre_transform(state) if pre_transformed else state


def pre_transform(rewritten: State) -> State:
    """``rewritten`` (a state after :func:`apply_layout_rewrite`) with each transform stage
    whose source no other stage reads replaced by a placeholder of its name and shape."""
    for k in range(len(rewritten.stages)):
        if _transform_source(rewritten, k) is not None:
            rewritten = _pre_transform(rewritten, k)
    return rewritten


@dataclass(frozen=True)
class LayoutTransform:
    """One placeholder a pre-transformed program reads in its tuned layout.

    source : Tensor, the layout-free placeholder of the DAG (its own shape, e.g. OIHW weights)
    packed : Tensor, the placeholder the program reads instead (shape: one dimension per tile
        loop that indexes ``source``, outer to inner; same dtype)
    layout : Tensor, ``packed``'s contents as a compute on ``source`` (``layout[ax...] =
        source[...]``): build ``ComputeDAG([source, layout])`` and run it once to fill ``packed``
    """

    source: Tensor
    packed: Tensor
    layout: Tensor


def _transform_source(state: State, k: int) -> Any:
    """The placeholder tensor that stage ``k`` copies, when it is a layout transform stage
    (``<B>.layout``, added by the rewrite) whose source no other stage reads; else None."""
    st = state.stages[k]
    op = st.op
    if st.origin_op is not None or not isinstance(op, ComputeOp) or not op.name.endswith(".layout"):
        return None
    loads = _walk_loads(op.bodies[0])
    if len(loads) != 1 or not isinstance(loads[0].tensor.op, PlaceholderOp):
        return None
    source = loads[0].tensor
    src = state.stage_index(source.op)
    if state.consumers(src) != [k]:
        return None
    return source


def _pre_transform(state: State, k: int) -> State:
    """Stage ``k`` (a transform stage) replaced by a placeholder of the same name and shape."""
    op = state.stages[k].op
    packed = PlaceholderOp(op.name, tuple(as_expr(iv.dom_extent) for iv in op.axis), op.output(0).dtype).output(0)
    state = state.with_stage(k, make_stage(packed.op))
    return rewrite_dataflow(state, {(id(op), 0): packed})


def layout_transforms(state: State, pre_transformed_state: State) -> list[LayoutTransform]:
    """The :class:`LayoutTransform` of every placeholder that ``pre_transformed_state``
    (``apply_layout_rewrite(state, pre_transformed=True)``) reads pre-transformed, in the order
    of ``state.dag.tensors``; ``state`` is the same schedule rewritten without it
    (``apply_layout_rewrite(state)``), whose transform stages give the layouts."""
    computed = {}
    for k in range(len(state.stages)):
        source = _transform_source(state, k)
        if source is not None:
            computed[state.stages[k].op.name] = (source, state.stages[k].op.output(0))
    packed = {st.op.name: st.op.output(0) for st in pre_transformed_state.stages
              if isinstance(st.op, PlaceholderOp) and st.op.name in computed}
    out = [LayoutTransform(source, packed[name], layout) for name, (source, layout) in computed.items()
           if name in packed]
    order = {id(t.op): n for n, t in enumerate(state.dag.tensors)}
    return sorted(out, key=lambda lt: order.get(id(lt.source.op), len(order)))


def has_layout_free_placeholders(dag) -> bool:
    return any(_layout_free(op) for op in dag.ops)
