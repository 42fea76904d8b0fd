"""Mutation rules of the evolutionary search (Ansor, section 5; ``sketch_policy_rules.cc``).

    State --edit one step of transform_steps--> steps --replay on State.from_dag(dag)--> State

Each rule has a ``weight`` (the probability the search picks it, Ansor's
defaults: on a CPU tile size .90, compute location .05, auto unroll .04, parallel .01;
on a GPU tile size .90, auto unroll .10: :func:`default_mutation_rules`)
and ``apply(policy, state, rng) -> State | None``; None means the rule found
nothing to mutate or the edited history is illegal.  Because a State is its
step history, a mutation edits the history and replays it (``replay_steps``).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    ComputeAtStep,
    FuseStep,
    PragmaStep,
    SplitStep,
    check_compute_locations,
)

from .compute_location import get_compute_location_candidates
from .gpu_params import within_limits
from .init_population import auto_unroll_configs
from .random_pick import pick
from .split_factors import factors_of
from .state_queries import attached_stages, is_tiled, needs_multi_level_tiling
from .step_history import (
    STAGE_INSERTING_STEPS,
    replay_or_none,
    stage_id_after,
    stage_id_before,
)


class MutationRule:
    """Base class: ``weight`` (float) and ``apply(policy, state, rng) -> State | None``."""

    name = "MutationRule"
    weight = 0.0

    def __init__(self, weight: float | None = None):
        if weight is not None:
            self.weight = float(weight)

    def apply(self, policy, state, rng):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight})"


# (id(dag), first steps) -> State after those steps.  A State is a pure function of its DAG
# and steps, so a mutant that keeps the first k steps of its parent starts from the replayed
# prefix instead of the DAG's initial state (the dag is kept so its id is not reused).
PREFIX_CACHE_SIZE = 4096
_PREFIXES = BoundedCache(PREFIX_CACHE_SIZE)

def replay_edited(state, steps: list, k: int):
    """``replay_or_none(state, steps)`` for ``steps`` that keep ``state``'s first ``k`` steps.

    The same State (same steps, same stages) as a replay from the DAG, or None when a step
    is illegal or the compute locations do not lower; the state after the first ``k`` steps
    comes from a cache of replayed prefixes (Ansor replays the whole history each time).
    """
    dag = state.dag
    key = (id(dag), tuple(steps[:k]))
    try:
        hash(key)
    except TypeError:  # a step holding an unhashable field
        return replay_or_none(state, steps)
    try:
        cur = _PREFIXES.get_or_make(key, lambda: replay_steps(dag, steps[:k]), keep=(dag,))
        for step in steps[k:]:
            cur = step.apply(cur)
        return check_compute_locations(cur)
    except (ScheduleError, LoweringError):
        return None


class MutateTileSize(MutationRule):
    """Move a random factor from one level of a split to another, keeping the product
    (so the outermost, implicit level may change too; for a split with a tail it counts
    ``ceil(extent / product)``, so the positions covered stay the same); the innermost length stays
    <= ``params.max_innermost_split_factor``.  On a GPU a result with more threads,
    virtual threads or shared memory per block than the task allows is refused (None),
    as Ansor's GPU code verification drops it."""

    name = "MutateTileSize"
    weight = 0.90

    def apply(self, policy, state, rng):
        max_inner = policy.params.max_innermost_split_factor
        steps = list(state.transform_steps)
        cands = [k for k, s in enumerate(steps)
                 if isinstance(s, SplitStep) and isinstance(s.extent, int) and s.extent > 1
                 and all(isinstance(x, int) for x in s.lengths) and s.lengths[-1] <= max_inner]
        if not cands:
            return None
        k = pick(rng, cands)
        step = steps[k]
        prod = 1
        for x in step.lengths:
            prod *= x
        lengths = [max(1, -(-step.extent // prod))] + list(step.lengths)  # ceil: a split with a tail
        perm = [int(x) for x in rng.permutation(len(lengths))]
        for i, src in enumerate(perm):
            if lengths[src] <= 1:
                continue
            dst = perm[(i + 1) % len(perm)]
            factors = factors_of(lengths[src])
            if dst == len(lengths) - 1:
                top = len(factors) - 1
                while top >= 1 and factors[top] * lengths[dst] > max_inner:
                    top -= 1
                if top == 0:
                    continue
                divide = factors[1 + int(rng.integers(top))]
            else:
                divide = factors[1 + int(rng.integers(len(factors) - 1))]
            new = list(lengths)
            new[src] //= divide
            new[dst] *= divide
            steps[k] = replace(step, lengths=tuple(new[1:]))
            out = replay_edited(state, steps, k)
            if out is not None and policy.task.target.is_gpu and not within_limits(policy.task, out):
                return None
            return out
        return None


class MutateAutoUnroll(MutationRule):
    """Give a random ``auto_unroll_max_step`` pragma a new random value from (0, 16, 64, 512),
    on a GPU from (0, 16, 64, 512, 1024)."""

    name = "MutateAutoUnroll"
    weight = 0.04

    def apply(self, policy, state, rng):
        steps = list(state.transform_steps)
        cands = [k for k, s in enumerate(steps)
                 if isinstance(s, PragmaStep) and s.pragma_type.startswith("auto_unroll_max_step")]
        if not cands:
            return None
        k = pick(rng, cands)
        value = pick(rng, auto_unroll_configs(policy))
        steps[k] = replace(steps[k], pragma_type=f"auto_unroll_max_step${value}")
        return replay_edited(state, steps, k)


class MutateComputeLocation(MutationRule):
    """Move a stage that a ComputeAtStep placed (untiled, not needing multi-level tiling)
    to another random compute-location candidate, and replay."""

    name = "MutateComputeLocation"
    weight = 0.05

    def apply(self, policy, state, rng):
        if policy.params.disable_change_compute_location:
            return None
        steps = list(state.transform_steps)
        cands = []
        for k, s in enumerate(steps):
            if not isinstance(s, ComputeAtStep):
                continue
            now = stage_id_after(steps, k, s.stage_id)
            if is_tiled(state.stages[now]) or needs_multi_level_tiling(state, now):
                continue
            cands.append((k, now))
        if not cands:
            return None
        k, now = pick(rng, cands)
        locations = get_compute_location_candidates(state, now)
        if not locations:
            return None
        target_now, iter_id = pick(rng, locations)
        target = stage_id_before(steps, k, target_now)
        if target is None:
            return None
        steps[k] = ComputeAtStep(steps[k].stage_id, target, iter_id)
        return replay_edited(state, steps, k)


class MutateParallel(MutationRule):
    """Change how many outer loops are fused into a parallel loop: pick a
    ``FuseStep(stage, (0..n))`` followed by ``parallel`` on loop 0, fuse a random other
    number of outer loops instead, and shift the loop ids of the stage's later steps."""

    name = "MutateParallel"
    weight = 0.01

    def apply(self, policy, state, rng):
        steps = list(state.transform_steps)
        cands = [k for k, s in enumerate(steps)
                 if isinstance(s, AnnotationStep) and s.annotation == "parallel" and s.iter_id == 0
                 and k > 0 and isinstance(steps[k - 1], FuseStep)
                 and steps[k - 1].stage_id == s.stage_id and steps[k - 1].iter_ids[0] == 0]
        if not cands:
            return None
        k = pick(rng, cands)
        fuse = steps[k - 1]
        sid = fuse.stage_id
        prefix = replay_edited(state, steps[:k - 1], k - 1)
        if prefix is None:
            return None
        st = prefix.stages[sid]
        attach = attached_stages(prefix)
        n_max = 0
        while n_max < len(st.iters):
            it = st.iters[n_max]
            if it.kind != "spatial" or it.annotation != "none" or (sid, n_max) in attach:
                break
            n_max += 1
        if n_max == 0:
            return None
        n_new = 1 + int(rng.integers(n_max))
        offset = fuse.iter_ids[-1] - (n_new - 1)
        if offset == 0:
            return None
        new_steps = steps[:k - 1] + [FuseStep(sid, tuple(range(n_new))), steps[k]]
        for s in steps[k + 1:]:
            if isinstance(s, STAGE_INSERTING_STEPS):
                return None
            if getattr(s, "target_stage_id", None) == sid:
                return None
            if getattr(s, "stage_id", None) == sid:
                s = _shift_iters(s, offset)
                if s is None:
                    return None
            new_steps.append(s)
        return replay_edited(state, new_steps, k - 1)


def _shift_iters(step, offset: int):
    """``step`` (on the re-fused stage) with loop ids past loop 0 moved by ``offset``."""
    def shift(i: int) -> int:
        return i if i == 0 else i + offset
    if isinstance(step, (AnnotationStep, PragmaStep)):
        return replace(step, iter_id=shift(step.iter_id))
    if isinstance(step, FuseStep) and 0 not in step.iter_ids:
        return replace(step, iter_ids=tuple(shift(i) for i in step.iter_ids))
    return None


DEFAULT_MUTATION_RULES = (MutateTileSize(), MutateComputeLocation(), MutateAutoUnroll(),
                          MutateParallel())
GPU_MUTATION_RULES = (MutateTileSize(0.90), MutateAutoUnroll(0.10))


def default_mutation_rules(policy=None) -> tuple:
    """Ansor's mutation rules and weights for the policy's target: on a GPU
    :data:`GPU_MUTATION_RULES` (tile size .90, auto unroll .10), otherwise (and without
    a policy) :data:`DEFAULT_MUTATION_RULES`."""
    if policy is not None and policy.task.target.is_gpu:
        return GPU_MUTATION_RULES
    return DEFAULT_MUTATION_RULES


def apply_mutation(policy, state, rng, rules=None):
    """Pick one rule (default: :func:`default_mutation_rules` of the policy's target) with
    probability proportional to its weight and apply it.

    Returns the mutated State, or None when the chosen rule could not apply (the
    search then keeps or resamples, as Ansor does)."""
    rules = default_mutation_rules(policy) if rules is None else rules
    weights = [max(0.0, r.weight) for r in rules]
    total = sum(weights)
    if total <= 0:
        return None
    x = float(rng.random()) * total
    for rule, w in zip(rules, weights):  # noqa: B007  (the rule at the break is used below)
        if x < w:
            break
        x -= w
    try:
        return rule.apply(policy, state, rng)
    except ScheduleError:
        return None


__all__ = ["MutationRule", "MutateTileSize", "MutateComputeLocation", "MutateAutoUnroll",
           "MutateParallel", "DEFAULT_MUTATION_RULES", "GPU_MUTATION_RULES",
           "default_mutation_rules", "apply_mutation", "replay_edited"]
