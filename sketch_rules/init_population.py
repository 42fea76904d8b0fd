"""Initial population: fill a sketch's unknowns with random annotations.

    CPU: sketch --InitFillTileSize--> --InitChangeComputeLocation--> --InitParallel-->
                --InitUnroll--> --InitVectorization--> complete State  (lowered to check)
    GPU: sketch --InitFillTileSize--> --InitThreadBind--> --InitUnroll--> complete State

Ansor, section 4.2 ("random annotation"), ``sketch_policy_rules.cc`` section
"Init Population", TVM's rule order for each target (:func:`default_init_rules`).
Every rule takes ``(policy, state, rng)`` and returns a new State or None (failed);
every random choice comes from the numpy Generator passed in.  Departures from Ansor:
InitChangeComputeLocation may inline any legal stage (Ansor only inlines stages that
were attached somewhere); InitParallel leaves loops of extent 1 serial; the stages a
scan computes inside its time loop keep their placement and their time loop is never
vectorized.  On a CPU, in half of the samples the register tile of a tiled stage is
drawn to fill whole vectors and fit the vector registers (``vector_tiles``), and
InitVectorization vectorizes a tiled stage's innermost loop up to 4 vector registers
(Ansor: up to ``max_vectorize_size`` lanes, and every length as likely).  On a GPU, no
InitVectorization: only the cooperative fetching of InitThreadBind vectorizes (a split of
length 1 the mutations grow).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.ir.simplify import const_value
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.dataflow_step import ComputeInlineStep
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    ComputeAtStep,
    ComputeRootStep,
    FollowFusedSplitStep,
    FuseStep,
    PragmaStep,
    SplitStep,
    check_compute_locations,
)

from .compute_location import get_compute_location_candidates
from .gpu_params import gpu_limits, within_limits
from .gpu_sketch_rules import has_cross_thread_reduction, spatial_split_step_ids
from .random_pick import pick
from .split_factors import factorization_schemes
from .state_queries import (
    attached_stages,
    derives_from,
    has_nested_parallel,
    has_reduce_iter,
    is_tiled,
    needs_multi_level_tiling,
    scan_body_ids,
)
from .step_history import replay_or_none, step_key
from .vector_tiles import register_tiles, sample_register_tile, vector_lanes

AUTO_UNROLL_CONFIGS_CPU = (0, 16, 64, 512)
AUTO_UNROLL_CONFIGS_GPU = (0, 16, 64, 512, 1024)


def auto_unroll_configs(policy) -> tuple:
    """The ``auto_unroll_max_step`` values to draw from for the policy's target."""
    return AUTO_UNROLL_CONFIGS_GPU if policy.task.target.is_gpu else AUTO_UNROLL_CONFIGS_CPU


class PopulationGenerationRule:
    """Base class: ``apply(policy, state, rng) -> State | None`` (None = failed)."""

    name = "PopulationGenerationRule"

    def apply(self, policy, state, rng):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class InitFillTileSize(PopulationGenerationRule):
    """Give every split with unknown lengths a random factorization of its extent (the
    product divides the extent; innermost <= ``params.max_innermost_split_factor``),
    then replay the steps.  On a CPU, the splits that make a tiled stage's register tile
    (its loops after the last reduction loop; the innermost one is what InitVectorization
    vectorizes) are drawn together in a share ``vector_tiles.VECTOR_TILE_PROB`` of the
    samples: a vectorized length that fills whole vectors and a tile whose vector
    accumulators fit the registers (:func:`vector_tiles.sample_register_tile`), with
    ``vector_tiles.TAIL_TILE_PROB`` > 0 in part of those with a row length that leaves a tail
    (``vector_tiles.tail_schemes``: 6 rows of 1024).  Fails on a symbolic extent or an illegal replay."""

    name = "InitFillTileSize"

    def apply(self, policy, state, rng):
        max_inner = policy.params.max_innermost_split_factor
        steps = list(state.transform_steps)
        unknown = [k for k, step in enumerate(steps)
                   if isinstance(step, SplitStep) and any(ln is None for ln in step.lengths)]
        if not unknown:
            return state
        if any(not isinstance(steps[k].extent, int) for k in unknown):
            return None
        chosen: dict = {}
        if not policy.task.target.is_gpu:
            vbytes = policy.task.hardware_params.vector_unit_bytes
            for tile in register_tiles(state):
                limit = tiled_vectorize_limit(policy, tile.dtype)
                chosen.update(sample_register_tile(tile, steps, vbytes, limit, max_inner, rng))
        for k in unknown:
            step = steps[k]
            scheme = chosen.get(k)
            if scheme is None:
                scheme = pick(rng, factorization_schemes(step.extent, len(step.lengths), max_inner))
            steps[k] = replace(step, lengths=tuple(int(x) for x in scheme))
        return replay_or_none(state, steps)


class InitChangeComputeLocation(PopulationGenerationRule):
    """From the last stage to the first, move each untiled stage that does not need
    multi-level tiling to a random place: inlined, root, or one of its compute-location
    candidates.  A move the compiler refuses (the step raises ScheduleError, or lowering
    would refuse the compute locations it leaves: ``check_compute_locations``) leaves
    the stage where it was (Ansor checks the whole state with InferBound at the end)."""

    name = "InitChangeComputeLocation"

    def apply(self, policy, state, rng):
        if policy.params.disable_change_compute_location:
            return state
        body = scan_body_ids(state)
        for sid in range(len(state.stages) - 1, -1, -1):
            st = state.stages[sid]
            if st.op_type != "compute" or st.compute_at == "inlined" or sid in body:
                continue
            if is_tiled(st) or needs_multi_level_tiling(state, sid):
                continue
            cands = get_compute_location_candidates(state, sid)
            choice = int(rng.integers(len(cands) + 2))
            if choice == 0:
                step = None if has_reduce_iter(st) else ComputeInlineStep(sid)
            elif choice == 1:
                step = None if st.compute_at == "root" else ComputeRootStep(sid)
            else:
                step = ComputeAtStep(sid, *cands[choice - 2])
            if step is not None:
                try:
                    state = check_compute_locations(step.apply(state))
                except (ScheduleError, LoweringError):
                    pass
        return state


class InitParallel(PopulationGenerationRule):
    """Fuse the outer spatial loops of each root stage and mark the fused loop parallel,
    stopping at a reduction or annotated loop, at a loop other stages are computed at,
    or once the parallel extent exceeds ``16 x num_cores``.  A stage whose outer loops
    have extent 1 passes the job to the stages computed at its first loop."""

    name = "InitParallel"

    def apply(self, policy, state, rng):
        limit = 16 * policy.task.hardware_params.num_cores
        body = scan_body_ids(state)
        for sid, st in enumerate(state.stages):
            if st.compute_at == "root" and st.op_type == "compute" and sid not in body:
                state = _annotate_parallel(state, sid, 0, limit)
        return state


def _annotate_parallel(state, sid: int, offset: int, limit: int):
    st = state.stages[sid]
    attach = attached_stages(state)
    to_fuse: list = []
    degree = 1
    i = offset
    while i < len(st.iters):
        it = st.iters[i]
        if it.kind != "spatial" or it.annotation != "none" or it.const_extent is None:
            break
        to_fuse.append(i)
        degree *= it.const_extent
        if degree > limit or (sid, i) in attach:
            break
        i += 1
    if degree == 1:
        if (sid, i) in attach:
            for child in attach[(sid, i)]:
                state = _annotate_parallel(state, child, 0, limit)
            state = _annotate_parallel(state, sid, i + 1, limit)
        return state
    if len(to_fuse) > 1:
        state = FuseStep(sid, tuple(to_fuse)).apply(state)
    return AnnotationStep(sid, to_fuse[0], "parallel").apply(state)


class InitUnroll(PopulationGenerationRule):
    """Put ``auto_unroll_max_step`` (0, 16, 64 or 512 on a CPU; 0, 16, 64, 512 or 1024 on a
    GPU; at random) on the outermost loop of every stage with a reduction loop."""

    name = "InitUnroll"

    def apply(self, policy, state, rng):
        configs = auto_unroll_configs(policy)
        for sid, st in enumerate(state.stages):
            if st.op_type == "placeholder" or st.compute_at == "inlined" or not has_reduce_iter(st):
                continue
            value = pick(rng, configs)
            state = PragmaStep(sid, 0, f"auto_unroll_max_step${value}").apply(state)
        return state


class InitVectorization(PopulationGenerationRule):
    """Vectorize the innermost spatial loop of every stage, fusing a random number of the
    innermost loops first when their extents' product stays <= ``params.max_vectorize_size``
    (a tiled stage vectorizes only its innermost loop, up to :func:`tiled_vectorize_limit`
    lanes: the vectorize pass cuts a long one into power-of-two vectors, a row of the
    register tile)."""

    name = "InitVectorization"

    def apply(self, policy, state, rng):
        max_size = policy.params.max_vectorize_size
        body = scan_body_ids(state)
        for sid, st in enumerate(state.stages):
            if st.op_type != "compute" or st.compute_at == "inlined":
                continue
            time = st.root[0].var.name if sid in body and st.root else None
            attach = attached_stages(state)
            if time is None:
                state, done = _split_vectorize_inner(state, sid, attach, max_size, rng)
                if done:
                    continue
            n_fusible, prod = 0, 1
            while n_fusible < len(st.iters):
                iter_id = len(st.iters) - 1 - n_fusible
                it = st.iters[iter_id]
                if (sid, iter_id) in attach or it.kind != "spatial" or it.annotation != "none":
                    break
                if time is not None and derives_from(it.name, time):
                    break
                if is_tiled(st) and n_fusible != 0:
                    break
                if it.const_extent is None:
                    break
                prod *= it.const_extent
                if prod > (tiled_vectorize_limit(policy, st.op.output(0).dtype) if is_tiled(st) else max_size):
                    break
                n_fusible += 1
            if n_fusible > 1:
                n_fusible = 1 + int(rng.integers(n_fusible - 1))
            if n_fusible == 1:
                state = AnnotationStep(sid, len(st.iters) - 1, "vectorize").apply(state)
            elif n_fusible > 1:
                ids = tuple(range(len(st.iters) - n_fusible, len(st.iters)))
                state = FuseStep(sid, ids).apply(state)
                state = AnnotationStep(sid, ids[0], "vectorize").apply(state)
        return state


TILED_VECTOR_REGISTERS = 4  # a tiled stage's innermost loop is vectorized up to this many registers


def tiled_vectorize_limit(policy, dtype: str) -> int:
    """The longest innermost loop of a tiled stage that InitVectorization vectorizes:
    ``params.max_vectorize_size`` lanes, or TILED_VECTOR_REGISTERS vector registers of
    ``dtype`` when that is more."""
    lanes = vector_lanes(policy.task.hardware_params.vector_unit_bytes, dtype)
    return max(policy.params.max_vectorize_size, TILED_VECTOR_REGISTERS * lanes)


SPLIT_VECTORIZE_PROB = 0.5  # share of eligible untiled stages whose long innermost loop is split and vectorized


def _split_vectorize_inner(state, sid: int, attach, max_size: int, rng) -> tuple:
    """Split the innermost loop of an untiled stage by a random power of two (4 ..
    ``max_size``, at most half its extent) and vectorize the inner part, when that loop is
    a reduce loop or a spatial loop longer than ``max_size``.  Ansor vectorizes only
    spatial loops whose (fused) extent is at most ``max_size``, without splitting: the
    plain reductions of softmax, layer norm or pooling stay scalar, and so does an
    elementwise stage over a long row (its ``exp`` then runs one lane at a time).  A
    vectorized reduce loop runs on a vector accumulator with one horizontal reduction at
    the end (the vectorize pass's reduction rewrite).  Applied to a share
    SPLIT_VECTORIZE_PROB of the eligible stages (the random generator is drawn only for
    those).  Returns ``(state, done)``.
    """
    st = state.stages[sid]
    iter_id = len(st.iters) - 1
    it = st.iters[iter_id] if st.iters else None
    if (it is None or it.annotation != "none" or (sid, iter_id) in attach or is_tiled(st)
            or it.const_extent is None):
        return state, False
    if not (it.kind == "reduce" or (it.kind == "spatial" and it.const_extent > max_size)):
        return state, False
    factors = [f for f in (4, 8, 16, 32, 64) if f <= max_size and 2 * f <= it.const_extent]
    if not factors or rng.random() >= SPLIT_VECTORIZE_PROB:
        return state, False
    factor = int(factors[int(rng.integers(len(factors)))])
    state = SplitStep(sid, iter_id, it.const_extent, (factor,), True).apply(state)
    state = AnnotationStep(sid, iter_id + 1, "vectorize").apply(state)
    return state, True


def fuse_all_outer_space_iters(state, sid: int) -> tuple:
    """``(state, index or None)``: the stage's outer spatial, unannotated loops fused into
    its loop 0, up to and including the first loop other stages are computed at (Ansor's
    FuseAllOuterSpaceIterators).  None when the stage has no such loop (a zero-rank
    output: Ansor fuses nothing into a new loop of extent 1, which FuseStep cannot)."""
    st = state.stages[sid]
    attach = attached_stages(state)
    ids: list = []
    for i, it in enumerate(st.iters):
        if it.kind != "spatial" or it.annotation != "none" or (i > 0 and (sid, i - 1) in attach):
            break
        ids.append(i)
    if not ids:
        return state, None
    if len(ids) > 1:
        state = FuseStep(sid, tuple(ids)).apply(state)
    return state, 0


class InitThreadBind(PopulationGenerationRule):
    """Bind the loops of every kernel to the GPU (Ansor's InitThreadBind), last stage first.

    * A root stage that reduces across threads (or holds such a stage): its fused outer
      spatial loops become ``blockIdx.x``.
    * A multi-level-tiled root stage (the output a tiled stage is fused into): the fused
      level-0 spatial tiles become ``blockIdx.x``, the level-1 tiles ``vthread`` (at most
      ``max_vthread_extent``), the level-2 tiles ``threadIdx.x`` (at least a warp, at most
      ``max_threads_per_block``; otherwise the state is dropped).  With a whole iteration
      space of at most a warp, its fused outer loops are ``threadIdx.x`` instead.
    * Any other root stage: the fused outer spatial loops are ``threadIdx.x`` when at most a
      warp long, else split by the warp size into ``blockIdx.x`` and ``threadIdx.x``.
    * A ``.shared`` cache stage (cooperative fetching): all its loops fused, split by 1
      for a vectorized inner loop (the mutations try other lengths), then split by the
      number of threads of the tiled stage it is computed in (the product of level 2 of
      its spatial splits, a FollowFusedSplitStep), whose inner piece is ``threadIdx.x``.
    Stages with a ``threadIdx.x`` loop already and stages computed inside others are left
    as they are.  Ansor's rule has one departure here: a multi-level-tiled stage tiled at
    the root (not fused into a consumer) is bound like the tiled root stages."""

    name = "InitThreadBind"

    def apply(self, policy, state, rng):
        lim = gpu_limits(policy.task)
        roots = set()
        for sid, st in enumerate(state.stages):
            if (st.op_type != "compute" or st.compute_at == "inlined"
                    or not needs_multi_level_tiling(state, sid)):
                continue
            if st.compute_at == "iter":
                roots.add(st.attach[0])
            elif is_tiled(st) and not has_cross_thread_reduction(state, sid):
                roots.add(sid)
        for sid in range(len(state.stages) - 1, -1, -1):
            st = state.stages[sid]
            if st.op_type != "compute" or st.compute_at == "inlined":
                continue
            if has_cross_thread_reduction(state, sid):
                if st.compute_at == "root":
                    state, fused = fuse_all_outer_space_iters(state, sid)
                    if fused is not None:
                        state = AnnotationStep(sid, fused, "blockIdx.x").apply(state)
                continue
            if any(it.annotation == "threadIdx.x" for it in st.iters):
                continue
            if st.compute_at == "root" and sid not in roots:
                state = _bind_plain(state, sid, lim)
            elif st.compute_at == "root":
                state = _bind_tiled(state, sid, lim)
            elif st.compute_at == "iter" and st.name.endswith(".shared"):
                state = _bind_cooperative_fetch(state, sid)
            if state is None:
                return None
        return state


def _bind_plain(state, sid: int, lim):
    state, fused = fuse_all_outer_space_iters(state, sid)
    if fused is None:
        return state
    ext = state.stages[sid].iters[fused].const_extent
    if ext is None:
        return None
    if ext <= lim.warp_size:
        return AnnotationStep(sid, fused, "threadIdx.x").apply(state)
    state = SplitStep(sid, fused, ext, (lim.warp_size,), True).apply(state)
    state = AnnotationStep(sid, fused, "blockIdx.x").apply(state)
    return AnnotationStep(sid, fused + 1, "threadIdx.x").apply(state)


def _bind_tiled(state, sid: int, lim):
    st = state.stages[sid]
    total = 1
    for iv in st.root:  # spatial and reduction axes, as Ansor's root_iter_vars
        v = const_value(iv.dom_extent)
        if not isinstance(v, int):
            return None
        total *= v
    if total <= lim.warp_size:
        state, fused = fuse_all_outer_space_iters(state, sid)
        return state if fused is None else AnnotationStep(sid, fused, "threadIdx.x").apply(state)
    n_axis = len(st.op.axis)
    for level, ann in ((0, "blockIdx.x"), (1, "vthread"), (2, "threadIdx.x")):
        iters = state.stages[sid].iters
        ids = []
        for i in range(level, min(level + n_axis, len(iters))):
            if not iters[i].name.endswith(f".{level}"):
                break
            ids.append(i)
        if not ids:
            if ann == "threadIdx.x":
                return None  # Ansor's fused loop of extent 1: fewer threads than a warp
            continue
        if len(ids) > 1:
            state = FuseStep(sid, tuple(ids)).apply(state)
        ext = state.stages[sid].iters[level].const_extent
        if ext is None:
            return None
        if ann == "vthread" and ext > lim.max_vthread_extent:
            return None
        if ann == "threadIdx.x" and not lim.warp_size <= ext <= lim.max_threads_per_block:
            return None
        state = AnnotationStep(sid, level, ann).apply(state)
    return state


def _bind_cooperative_fetch(state, sid: int):
    st = state.stages[sid]
    src = tuple(spatial_split_step_ids(state, st.attach[0]))
    if not src or not st.iters:
        return state
    if len(st.iters) > 1:
        state = FuseStep(sid, tuple(range(len(st.iters)))).apply(state)
    ext = state.stages[sid].iters[0].const_extent
    state = SplitStep(sid, 0, ext, (1,), True).apply(state)
    state = AnnotationStep(sid, 1, "vectorize").apply(state)
    state = FollowFusedSplitStep(sid, 0, src, 1, True).apply(state)
    return AnnotationStep(sid, 1, "threadIdx.x").apply(state)


def default_init_rules(policy=None) -> list:
    """Ansor's init-population rules in order for the policy's target: on a GPU
    InitFillTileSize, InitThreadBind, InitUnroll; otherwise (and without a policy) the CPU
    rules InitFillTileSize, InitChangeComputeLocation, InitParallel, InitUnroll,
    InitVectorization."""
    if policy is not None and policy.task.target.is_gpu:
        return [InitFillTileSize(), InitThreadBind(), InitUnroll()]
    return [InitFillTileSize(), InitChangeComputeLocation(), InitParallel(), InitUnroll(),
            InitVectorization()]


def apply_init_rules(policy, sketch, rng, rules=None):
    """Run the init rules (default: :func:`default_init_rules` of the policy's target) on
    ``sketch``; the complete State, or None when a rule fails.

    A step refused by the compiler (ScheduleError) inside a rule also counts as a
    failure.  Nothing is lowered here."""
    state = sketch
    for rule in (rules if rules is not None else default_init_rules(policy)):
        try:
            state = rule.apply(policy, state, rng)
        except ScheduleError:
            return None
        if state is None:
            return None
    return state


def lowers(state) -> bool:
    """Whether ``lower_state(state)`` succeeds: bound inference and loop
    emission, without the unroll/vectorize passes (ScheduleError / LoweringError -> False;
    any other exception is a compiler bug and propagates)."""
    try:
        lower_state(state)
    except (ScheduleError, LoweringError):
        return False
    return True


def sample_init_population(policy, sketches, n: int, rng, rules=None, max_tries: int | None = None,
                           check_lowering: bool = True, lowering_check=None) -> list:
    """Up to ``n`` distinct complete States sampled from ``sketches``.

    Parameters
    ----------
    policy : duck-typed search policy (see ``sketch_rule``)
    sketches : list of State, from ``generate_sketches``
    n : int, the number of states wanted
    rng : numpy.random.Generator, the only source of randomness
    rules : list of PopulationGenerationRule, default :func:`default_init_rules` of the
        policy's target
    max_tries : int, the number of attempts in all (default ``4 * n + 64``); sampling
        also stops after ``max(64, n)`` attempts in a row that gave nothing new
    check_lowering : bool, drop states that do not lower (ScheduleError/LoweringError)
    lowering_check : callable, list of States -> list of bool (whether each lowers), default
        :func:`lowers` on each; the search passes one that lowers a batch on worker processes
        and keeps the features it computes on the way (``cost_model.feature.lowering_flags``)

    The lowering check runs on batches: candidates that pass the cheap checks are collected
    until they would complete the population (or the attempts in a row that gave nothing
    new reach the patience), then checked together.  The batches depend only on ``rng``, so
    the states are the same with any ``lowering_check`` that agrees with :func:`lowers`.

    Returns the states in sampling order, de-duplicated by their steps, without
    nested parallel loops and, on a GPU, within the task's limits of threads, virtual
    threads and shared memory per block (:func:`gpu_params.within_limits`)
    (Ansor's SampleInitPopulation with PruneInvalidState).
    """
    if not sketches or n <= 0:
        return []
    max_tries = 4 * n + 64 if max_tries is None else max_tries
    patience = max(64, n)
    gpu = policy.task.target.is_gpu
    check = lowering_check if lowering_check is not None else (lambda states: [lowers(s) for s in states])
    out: list = []
    pending: list = []  # candidates that passed the cheap checks, not yet checked for lowering
    seen: set = set()
    tries = stale = 0

    def flush() -> None:
        nonlocal stale
        flags = check(pending) if check_lowering and pending else [True] * len(pending)
        for state, ok in zip(pending, flags):
            if ok and len(out) < n:
                out.append(state)
                stale = 0
        pending.clear()

    while len(out) < n and tries < max_tries and stale < patience:
        tries += 1
        stale += 1
        state = apply_init_rules(policy, pick(rng, sketches), rng, rules)
        if state is not None:
            key = step_key(state)
            if key not in seen:
                seen.add(key)
                if not (gpu and not within_limits(policy.task, state)) and not has_nested_parallel(state):
                    pending.append(state)
        if len(out) + len(pending) >= n or stale >= patience or tries >= max_tries:
            flush()
    flush()
    return out


__all__ = ["PopulationGenerationRule", "InitFillTileSize", "InitChangeComputeLocation",
           "InitParallel", "InitUnroll", "InitVectorization", "InitThreadBind",
           "default_init_rules", "apply_init_rules", "sample_init_population", "lowers",
           "fuse_all_outer_space_iters", "auto_unroll_configs", "AUTO_UNROLL_CONFIGS_CPU",
           "AUTO_UNROLL_CONFIGS_GPU"]
