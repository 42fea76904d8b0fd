"""Random legal schedules for property tests of the compiler layer.

    State --random_schedule(rng, n_steps)--> State with up to n_steps more transform steps

Each attempt picks a non-placeholder, non-inlined stage and one action among
split (random factor, often non-divisible), reorder (random permutation), fuse
(a random run of adjacent same-kind iterators), annotate (parallel on an outer
spatial iterator, vectorize on the innermost one, unroll on a small one),
pragma ``auto_unroll_max_step``, compute_inline (element-wise non-output
stages), compute_at (at an iterator of a consumer, sometimes of an indirect
one), compute_root, cache_read / cache_write (cache_write only succeeds on
untransformed stages), rfactor (after a reduce axis was split),
storage_align (on a spatial root axis) and, rarely, GPU bindings (vthread,
blockIdx/threadIdx, which a CPU build runs serially).  The steps themselves decide
legality: an attempt whose step raises ``ScheduleError`` is skipped, and so is one
that leaves compute locations lowering would refuse (``check_compute_locations``
raises ``LoweringError``: the steps, as TVM's, leave that check to the final state),
so every prefix of a schedule lowers.  Nothing else is caught, so any other
exception escapes to the test as a bug.

Every choice comes from the ``numpy.random.Generator`` passed in, so a
schedule is reproducible from its seed.
"""

from __future__ import annotations

import numpy as np

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.schedule.dataflow_step import CacheReadStep, CacheWriteStep, ComputeInlineStep, RfactorStep
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    ComputeAtStep,
    ComputeRootStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    SplitStep,
    StorageAlignStep,
    check_compute_locations,
)

# Relative weights of the actions (an attempt that does not apply is skipped).
ACTION_WEIGHTS = {
    "split": 6, "reorder": 3, "fuse": 3, "parallel": 2, "vectorize": 2, "unroll": 2,
    "pragma": 1, "compute_inline": 2, "compute_at": 4, "compute_root": 1,
    "cache_read": 1, "cache_write": 1, "rfactor": 2, "storage_align": 1, "gpu_bind": 1,
}
MAX_UNROLLED = 16  # at most this many copies of a body from unroll annotations per stage


def _schedulable(state: State) -> list:
    return [k for k, st in enumerate(state.stages)
            if st.op_type != "placeholder" and st.compute_at != "inlined"]


def _pick(rng: np.random.Generator, xs):
    return xs[int(rng.integers(len(xs)))]


def _split(state, sid, rng):
    st = state.stages[sid]
    cands = [k for k, it in enumerate(st.iters) if it.const_extent is not None and it.const_extent > 1]
    if not cands:
        return None
    k = _pick(rng, cands)
    ext = st.iters[k].const_extent
    divisors = [d for d in range(1, ext + 1) if ext % d == 0]
    n_parts = 1 if rng.random() < 0.7 else 2
    lengths = []
    for _ in range(n_parts):
        # Half the time a divisor, else any factor (often non-divisible).
        f = _pick(rng, divisors) if rng.random() < 0.5 else int(rng.integers(1, ext + 1))
        lengths.append(int(f))
    return SplitStep(sid, k, ext, tuple(lengths), bool(rng.random() < 0.8))


def _reorder(state, sid, rng):
    n = len(state.stages[sid].iters)
    if n < 2:
        return None
    return ReorderStep(sid, tuple(int(x) for x in rng.permutation(n)))


def _fuse(state, sid, rng):
    iters = state.stages[sid].iters
    runs = []  # (start, end) of maximal runs of one kind, length >= 2
    start = 0
    for k in range(1, len(iters) + 1):
        if k == len(iters) or iters[k].kind != iters[start].kind:
            if k - start >= 2:
                runs.append((start, k))
            start = k
    if not runs:
        return None
    lo, hi = _pick(rng, runs)
    a = int(rng.integers(lo, hi - 1))
    b = int(rng.integers(a + 2, hi + 1))
    return FuseStep(sid, tuple(range(a, b)))


def _parallel(state, sid, rng):
    iters = state.stages[sid].iters
    outer = []
    for k, it in enumerate(iters):
        if it.kind != "spatial":
            break
        outer.append(k)
    if not outer:
        return None
    return AnnotationStep(sid, _pick(rng, outer[:2]), "parallel")


def _vectorize(state, sid, rng):
    iters = state.stages[sid].iters
    if not iters:
        return None
    return AnnotationStep(sid, len(iters) - 1, "vectorize")


def _unroll(state, sid, rng):
    iters = state.stages[sid].iters
    # Nested unrolled loops multiply the code size (and LLVM's time): cap the product.
    done = 1
    for it in iters:
        if it.annotation == "unroll" and it.const_extent is not None:
            done *= it.const_extent
    cands = [k for k, it in enumerate(iters)
             if it.const_extent is not None and it.const_extent * done <= MAX_UNROLLED]
    if not cands:
        return None
    return AnnotationStep(sid, _pick(rng, cands), "unroll")


def _gpu_bind(state, sid, rng):
    # GPU axes and vthread: the CPU build runs them as serial loops.
    iters = state.stages[sid].iters
    if not iters:
        return None
    ann = _pick(rng, ["vthread", "blockIdx.x", "threadIdx.x", "threadIdx.y"])
    return AnnotationStep(sid, int(rng.integers(len(iters))), ann)


def _pragma(state, sid, rng):
    iters = state.stages[sid].iters
    if not iters:
        return None
    step = _pick(rng, [0, 4, 16, 64])
    return PragmaStep(sid, int(rng.integers(len(iters))), f"auto_unroll_max_step${step}")


def _compute_inline(state, sid, rng):
    return ComputeInlineStep(sid)


def _transitive_consumers(state, sid) -> list:
    out, frontier = set(), [sid]
    while frontier:
        for c in state.consumers(frontier.pop()):
            if c not in out:
                out.add(c)
                frontier.append(c)
    return sorted(out)


def _compute_at(state, sid, rng):
    # Mostly a direct consumer; sometimes any stage that reads it through others.
    pool = state.consumers(sid) if rng.random() < 0.75 else _transitive_consumers(state, sid)
    consumers = [c for c in pool
                 if state.stages[c].compute_at != "inlined" and state.stages[c].iters]
    if not consumers:
        return None
    tgt = _pick(rng, consumers)
    return ComputeAtStep(sid, tgt, int(rng.integers(len(state.stages[tgt].iters))))


def _compute_root(state, sid, rng):
    return ComputeRootStep(sid)


def _cache_read(state, sid, rng):
    # The producer may be a placeholder: pick among the stage's inputs.
    op = state.stages[sid].op
    producers = sorted({state.stage_index(t.op) for t in op.input_tensors()})
    if not producers:
        return None
    prod = _pick(rng, producers)
    readers = [r for r in state.consumers(prod) if state.stages[r].compute_at != "inlined"]
    if sid not in readers:
        return None
    # Usually for this stage only, sometimes for every reader of the producer.
    return CacheReadStep(prod, "local", (sid,) if rng.random() < 0.7 else tuple(readers))


def _cache_write(state, sid, rng):
    return CacheWriteStep(sid, "local")


def _storage_align(state, sid, rng):
    st = state.stages[sid]
    roots = {iv.var.name for iv in st.root if iv.kind != "reduce"}
    cands = [k for k, it in enumerate(st.iters) if it.name in roots]
    if not cands:
        return None
    factor = int(_pick(rng, [2, 4, 8, 16]))
    return StorageAlignStep(sid, _pick(rng, cands), factor, int(rng.integers(factor)))


def _rfactor(state, sid, rng):
    st = state.stages[sid]
    split_names = {c for rel in st.relations for c in getattr(rel, "children", ())}
    cands = [k for k, it in enumerate(st.iters) if it.kind == "reduce" and it.name in split_names]
    if not cands:
        return None
    n_spatial = sum(1 for iv in st.root if iv.kind != "reduce")
    return RfactorStep(sid, _pick(rng, cands), int(rng.integers(n_spatial + 1)))


_ACTIONS = {
    "split": _split, "reorder": _reorder, "fuse": _fuse, "parallel": _parallel,
    "vectorize": _vectorize, "unroll": _unroll, "pragma": _pragma,
    "compute_inline": _compute_inline, "compute_at": _compute_at, "compute_root": _compute_root,
    "cache_read": _cache_read, "cache_write": _cache_write, "rfactor": _rfactor,
    "storage_align": _storage_align, "gpu_bind": _gpu_bind,
}


def random_step(state: State, rng: np.random.Generator):
    """One random candidate step for ``state`` (possibly illegal), or None if none was found."""
    stages = _schedulable(state)
    if not stages:
        return None
    sid = _pick(rng, stages)
    names = list(ACTION_WEIGHTS)
    w = np.array([ACTION_WEIGHTS[n] for n in names], dtype=float)
    action = names[int(rng.choice(len(names), p=w / w.sum()))]
    return _ACTIONS[action](state, sid, rng)


def random_schedule(state: State, rng: np.random.Generator, n_steps: int,
                    max_attempts: int | None = None) -> State:
    """``state`` with up to ``n_steps`` random legal steps applied.

    Parameters
    ----------
    state : State, usually ``State.from_dag(dag)``
    rng : numpy.random.Generator, the only source of randomness
    n_steps : int, the number of steps to apply
    max_attempts : int, how many candidate steps to try in all (default ``4 * n_steps``)

    Candidates that raise ``ScheduleError``, or whose state ``check_compute_locations``
    refuses (``LoweringError``), are skipped; any other exception propagates.  Returns
    the new State (its ``transform_steps`` lists the steps).
    """
    applied = 0
    for _ in range(max_attempts if max_attempts is not None else 4 * n_steps):
        if applied >= n_steps:
            break
        step = random_step(state, rng)
        if step is None:
            continue
        try:
            state = check_compute_locations(step.apply(state))
        except (ScheduleError, LoweringError):
            continue
        applied += 1
    return state


__all__ = ["random_schedule", "random_step", "ACTION_WEIGHTS"]
