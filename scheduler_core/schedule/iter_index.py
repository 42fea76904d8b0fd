"""From leaf loops back to root axes: extents down, index values up.

Given a stage's split/fuse relations (``loop_state.SplitRel``/``FuseRel``):
``leaf_extents`` pushes root extents down to the leaf iterators (TVM's
PassDownDomain) and ``root_values_with_guards`` expresses every root axis as
an expression of the leaf loop variables, with the guards that keep a
non-divisible split inside its parent's extent (TVM's PassUpIndex plus the
``likely`` conditions of MakeBoundCheck).
"""

from __future__ import annotations

from scheduler_core.ir.expr import Expr, IntImm, as_expr
from scheduler_core.ir.simplify import ceildiv as _ceildiv
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.ir.simplify import product as _prod

from .loop_state import FuseRel, SplitRel, Stage


def _cv(e):
    """``const_value(e)``, answering constants without simplifying them."""
    if isinstance(e, IntImm):
        return e.value
    return const_value(e)


def _clamp(length: int, extent: Expr) -> Expr:
    """``min(length, extent)`` when the extent is a constant (TVM tightens split extents)."""
    e = _cv(extent)
    return IntImm(min(length, e)) if isinstance(e, int) and e > 0 else IntImm(length)


def split_child_extents(rel: SplitRel, parent_extent: Expr) -> list:
    """Trip counts of ``rel.children`` when the parent has ``parent_extent``.

    A multi-length split is a chain of single splits (Ansor's DoSplitCommon):
    inner_to_outer peels factors from the inside, otherwise nparts from the
    outside.  As in TVM's PassDownDomain, a piece never gets a larger trip count
    than what remains of the parent, so a tile larger than its region (a stage
    computed at a small tile of its consumer) does not loop over empty space.
    """
    rest = as_expr(parent_extent)
    if rel.inner_to_outer:
        inner = []
        for ln in reversed(rel.lengths):
            inner.append(_clamp(ln, rest))
            rest = _ceildiv(rest, ln)
        return [rest] + list(reversed(inner))
    outer = []
    for ln in rel.lengths:
        piece = _clamp(ln, rest)
        outer.append(piece)
        rest = _ceildiv(rest, piece)
    return outer + [rest]


def leaf_extents(stage: Stage, root_extents: dict) -> dict:
    """Extents of every iterator name (root, intermediate, leaf) from root extents."""
    ext = dict(root_extents)
    for rel in stage.relations:
        if isinstance(rel, SplitRel):
            if rel.parent not in ext:
                continue
            for name, e in zip(rel.children, split_child_extents(rel, ext[rel.parent])):
                ext[name] = e
        else:
            if all(c in ext for c in rel.children):
                ext[rel.fused] = _prod(ext[c] for c in rel.children)
    return ext


def _needs_guard(parent_ext: Expr, child_exts: list) -> bool:
    p = _cv(parent_ext)
    if all(isinstance(e, IntImm) for e in child_exts):
        n = 1
        for e in child_exts:
            n *= e.value
        return not (p is not None and p == n)
    c = const_value(_prod(child_exts))
    return not (p is not None and c is not None and p == c)


def root_values_with_guards(stage: Stage, leaf_vals: dict, root_extents: dict | None = None,
                            reduce_only: bool = False, extents: dict | None = None):
    """Root axis name -> value Expr of the leaf loop vars, and a list of guard Exprs.

    leaf_vals: iterator name -> Expr (usually the loop Var) for every leaf.
    root_extents: root name -> extent (defaults to the op's full domain).
    reduce_only: only follow relations among reduce iterators.
    extents: ``leaf_extents(stage, root_extents)`` when the caller has it (not changed).
    """
    if extents is not None:
        ext = extents
    else:
        if root_extents is None:
            root_extents = {iv.var.name: simplify(as_expr(iv.dom_extent)) for iv in stage.root}
        ext = leaf_extents(stage, root_extents)
    vals = dict(leaf_vals)
    guards = []
    for rel in reversed(stage.relations):
        if isinstance(rel, SplitRel):
            if not all(c in vals for c in rel.children):
                if reduce_only:
                    continue
                raise KeyError(f"no value for split children {rel.children}")
            exts = [ext[c] for c in rel.children]
            value = vals[rel.children[0]]
            for c, e in zip(rel.children[1:], exts[1:]):
                value = value * e + vals[c]
            vals[rel.parent] = simplify(value)
            if _needs_guard(ext[rel.parent], exts):
                guards.append(simplify(vals[rel.parent] < ext[rel.parent]))
        elif isinstance(rel, FuseRel):
            if rel.fused not in vals:
                if reduce_only:
                    continue
                raise KeyError(f"no value for fused iterator {rel.fused}")
            f = vals[rel.fused]
            inner: Expr = IntImm(1)
            for c in reversed(rel.children):
                e = ext[c]
                v = f // inner if _cv(inner) != 1 else f
                if c != rel.children[0]:
                    v = v % e
                vals[c] = simplify(v)
                inner = simplify(inner * e)
    roots = {iv.var.name: vals[iv.var.name] for iv in stage.root if iv.var.name in vals}
    return roots, guards


def root_values(stage: Stage, leaf_vals: dict) -> dict:
    return root_values_with_guards(stage, leaf_vals)[0]
