"""Queries on a State that the sketch, init-population and mutation rules branch on.

    State --analyzer_of--> AccessAnalyzer of the state's *current* ops
          --needs_multi_level_tiling / get_consumers / ...--> stage ids and flags

These are Ansor's helpers of ``src/auto_scheduler/search_policy/utils.h``
(NeedsMultilevelTiling, GetConsumers, HasSingleElementwiseMatchedConsumer,
NeedsRfactor, IsTiled, HasReduceIter, GetSingleConsumerId, HasNestedParallel),
phrased over our immutable ``State``.  Ansor keeps a ``current_compute_dag`` in
every state whose dataflow was changed by cache_write / cache_read / rfactor;
here :func:`analyzer_of` rebuilds (and caches) the analysis from the state's ops
when they differ from the DAG's.

Scans get helpers of their own: the lowering computes a scan's update stages
(and the stages that read its state) inside the scan's time loop, whatever the
State says, so the rules must leave those placements alone.
"""

from __future__ import annotations

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.tensor import ComputeOp, ScanOp
from scheduler_core.schedule.loop_state import scan_body_stages

_ANALYZERS = BoundedCache(256)  # ids of a state's ops -> the AccessAnalyzer (the ops are kept)


# -- the access analysis of the state's current dataflow ----------------------
def analyzer_of(state):
    """The AccessAnalyzer of ``state``'s current ops (Ansor's ``current_compute_dag``).

    The DAG's own analyzer while the state has the DAG's ops; after a
    cache_write / cache_read / rfactor, the analyzer of a ComputeDAG rebuilt from the
    stages (cached, keyed by op identity, least recently used dropped first).
    """
    dag = state.dag
    ops = tuple(st.op for st in state.stages)
    if len(ops) == len(dag.ops) and all(a is b for a, b in zip(ops, dag.ops)):
        return dag.access_analyzer
    return _ANALYZERS.get_or_make(tuple(id(op) for op in ops), lambda: _rebuilt_analyzer(state), keep=ops)


def _rebuilt_analyzer(state):
    """The AccessAnalyzer of a ComputeDAG rebuilt from ``state``'s stages."""
    dag = state.dag
    outputs = []
    for st in state.stages:
        for t in dag.outputs:
            if st.origin_op is t.op:
                outputs.append(st.op.output(t.value_index))
    return ComputeDAG(list(dag.inputs) + outputs).access_analyzer


def stage_of_op(state, op) -> int:
    """The index of the stage whose op is ``op`` (identity)."""
    for k, st in enumerate(state.stages):
        if st.op is op:
            return k
    raise KeyError(f"no stage computes {getattr(op, 'name', op)!r}")


def needs_multi_level_tiling(state, stage_id: int) -> bool:
    """Ansor's NeedsMultilevelTiling of the stage's op (data reuse: matmul, conv2d)."""
    st = state.stages[stage_id]
    return isinstance(st.op, ComputeOp) and analyzer_of(state).needs_multi_level_tiling(st.op)


def is_output_stage(state, stage_id: int) -> bool:
    """Whether the stage computes a DAG output (Ansor's IsOutputOp)."""
    st = state.stages[stage_id]
    return st.op_type != "placeholder" and analyzer_of(state).is_output(st.op)


def is_strictly_inlineable(state, stage_id: int) -> bool:
    """Ansor's IsStrictlyInlineable: simple in-order reads, no branch, no expensive call."""
    st = state.stages[stage_id]
    return isinstance(st.op, ComputeOp) and analyzer_of(state).is_strictly_inlineable(st.op)


def get_consumers(state, stage_id: int) -> list:
    """Stage ids reading ``stage_id``, looking through inlined stages (Ansor's GetConsumers)."""
    op = state.stages[stage_id].op
    return sorted(stage_of_op(state, c) for c in analyzer_of(state).get_consumers(state, op))


def get_single_consumer_id(state, stage_id: int) -> int:
    """The one stage to compute ``stage_id`` at, or -1 (Ansor's GetSingleConsumerId).

    With several consumers, their common root stage (the stage they are all
    computed at, or the consumer itself when at root) if they share one.
    """
    consumers = get_consumers(state, stage_id)
    if not consumers:
        return -1
    if len(consumers) == 1:
        return consumers[0]
    roots = set()
    for c in consumers:
        st = state.stages[c]
        roots.add(st.attach[0] if st.compute_at == "iter" else c)
    return roots.pop() if len(roots) == 1 else -1


def single_elementwise_consumer(state, stage_id: int) -> int | None:
    """The consumer stage ``stage_id`` can be fused into as an output tile, or None
    (Ansor's HasSingleElementwiseMatchedConsumer: one consumer, element-wise matched,
    not both reducing)."""
    op = state.stages[stage_id].op
    target = analyzer_of(state).single_elementwise_consumer(state, op)
    return None if target is None else stage_of_op(state, target)


# -- stage shape -------------------------------------------------------------
def has_reduce_iter(stage) -> bool:
    """Whether the stage has a reduction loop (Ansor's HasReduceIter)."""
    return any(it.kind == "reduce" for it in stage.iters)


def is_tiled(stage) -> bool:
    """Whether the stage's loops were split or fused: its loop count differs from its
    root-axis count (Ansor's IsTiled)."""
    return len(stage.iters) != len(stage.root)


def cumulative_lengths(stage) -> tuple:
    """``(spatial, reduce)``: products of the stage's spatial and reduce extents
    (an unknown extent counts as -1, as Ansor's GetExtent)."""
    space = red = 1
    for it in stage.iters:
        ext = it.const_extent
        ext = -1 if ext is None else ext
        if it.kind == "spatial":
            space *= ext
        elif it.kind == "reduce":
            red *= ext
    return space, red


def needs_rfactor(task, state, stage_id: int) -> bool:
    """Ansor's NeedsRfactor (CPU), widened for matrix-vector products: a multi-level-tiled
    op whose spatial loops are at most as long as its reduction (Ansor also asks for at most
    ``16 x num_cores`` of them); any other reduction longer than ``num_cores``.

    The rfactor sketches come in addition to the tiled ones.  Without them a product such
    as 1x784 by 128x784 (batch-1 dense layers) only gets tilings whose vectorized loop is a
    spatial one, reading the weight with a stride of 784: measured 0.037 ms after 64 trials
    against 0.012 ms with the rfactor sketches (32 trials) on a shared 2-core machine."""
    st = state.stages[stage_id]
    if not isinstance(st.op, ComputeOp) or not has_reduce_iter(st):
        return False
    space, red = cumulative_lengths(st)
    num_cores = task.hardware_params.num_cores
    if needs_multi_level_tiling(state, stage_id):
        return space <= red
    return red > 1 and red > num_cores


def attached_stages(state) -> dict:
    """``{(target stage id, iterator index): [stage ids computed at it]}`` (Ansor's attach_map)."""
    out: dict = {}
    for k, st in enumerate(state.stages):
        if st.compute_at == "iter":
            tgt, name = st.attach
            out.setdefault((tgt, state.stages[tgt].iter_index(name)), []).append(k)
    return out


def _attached_in_parallel(state, k: int) -> bool:
    """Whether stage ``k`` is computed at (or inside) a parallel loop of another stage."""
    st = state.stages[k]
    if st.compute_at != "iter":
        return False
    tgt, name = st.attach
    tst = state.stages[tgt]
    upto = tst.iter_index(name)
    return any(it.annotation == "parallel" for it in tst.iters[:upto + 1]) or _attached_in_parallel(state, tgt)


def has_nested_parallel(state) -> bool:
    """Whether a parallel loop runs inside another parallel loop (Ansor's
    HasNestedParallel, made exact: two parallel loops side by side inside one serial
    loop are not nested).  Such states are pruned: the inner loop would run serially."""
    for k, st in enumerate(state.stages):
        if st.op_type == "placeholder" or st.compute_at == "inlined":
            continue
        n_par = sum(it.annotation == "parallel" for it in st.iters)
        if n_par >= 2 or (n_par and _attached_in_parallel(state, k)):
            return True
    return False


# -- scans -------------------------------------------------------------------
def _scan_tensor_stage_ids(state, field: str) -> set:
    """Ids of the stages that compute the tensors in ``op.<field>`` of every scan."""
    return {stage_of_op(state, t.op)
            for st in state.stages if isinstance(st.op, ScanOp)
            for t in getattr(st.op, field)}


def scan_update_ids(state) -> set:
    """Ids of the stages that compute a scan's update tensors."""
    return _scan_tensor_stage_ids(state, "update")


def scan_init_ids(state) -> set:
    """Ids of the stages that compute a scan's init tensors."""
    return _scan_tensor_stage_ids(state, "init")


def scan_body_ids(state) -> set:
    """Ids of the stages the lowering computes inside a scan's time loop: the update
    stages and every compute stage that reads the scan's state, directly or not
    (the compiler layer's own ``loop_state.scan_body_stages``)."""
    return set(scan_body_stages(state))


def derives_from(iter_name: str, root_name: str) -> bool:
    """Whether loop ``iter_name`` comes from root axis ``root_name`` by splits and fuses
    (``"t.0"``, ``"t@i@"`` derive from ``"t"``; Ansor's ExtractOriginalIterators)."""
    return any(p == root_name or p.startswith(root_name + ".")
               for p in iter_name.split("@") if p)


__all__ = [
    "analyzer_of", "stage_of_op", "needs_multi_level_tiling", "is_output_stage",
    "is_strictly_inlineable", "get_consumers", "get_single_consumer_id",
    "single_elementwise_consumer", "has_reduce_iter", "is_tiled", "cumulative_lengths",
    "needs_rfactor", "attached_stages", "has_nested_parallel", "scan_update_ids",
    "scan_init_ids", "scan_body_ids", "derives_from",
]
