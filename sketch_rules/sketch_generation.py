"""Sketch generation: derive the high-level loop structures of a ComputeDAG by rules.

    State.from_dag(dag) --(rules, stage by stage, last to first)--> [sketch State, ...]

Ansor's ``SketchPolicyNode::GenerateSketches`` (OSDI'20, section 4.1): a search
over ``(state, stage_id)`` pairs that starts at the initial state and the last
stage.  At each pair the rules are asked in order; every result of an applying
rule becomes a new pair; a pair whose stage id is negative is a finished sketch.
Pairs are expanded round by round (Ansor's two ping-pong buffers), which fixes
the order of the sketches: e.g. for a matmul, plain multi-level tiling first,
then the two cache-write variants.

Sketches may hold split steps with unknown lengths (``None``); InitFillTileSize
fills them.  As in Ansor, the split right before an rfactor is made with length
1 (rfactor needs known lengths) and then reset to unknown in the final sketch,
so a sketch is a template: its ``transform_steps`` are what matters.

Users add rules with :func:`register_sketch_rule` (tried before the default
rules, like Ansor's PreloadCustomSketchRule) or pass a full ``rules`` list.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.base.errors import ScheduleError
from scheduler_core.schedule.dataflow_step import RfactorStep
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import SplitStep

from .const_tensor_rule import RuleSimplifyComputeWithConstTensor
from .cpu_sketch_rules import (
    RuleAddCacheWrite,
    RuleAddRfactor,
    RuleAlwaysInline,
    RuleMultiLevelTiling,
    RuleMultiLevelTilingWithFusion,
    RuleSkipStage,
)
from .gpu_sketch_rules import gpu_sketch_rules
from .scan_sketch_rule import RuleScanUpdate
from .sketch_rule import ConditionKind, SketchRule

MAX_SKETCHES = 4096  # a rule set that derives more is taken to be looping

_REGISTERED: list = []


def default_sketch_rules(policy=None) -> list:
    """The default rules for ``policy``'s target: on a GPU target Ansor's GPU rules
    (:func:`gpu_sketch_rules.gpu_sketch_rules`), otherwise (and without a policy) Ansor's
    CPU rules in TVM's order (RuleAlwaysInline, RuleSimplifyComputeWithConstTensor,
    RuleAddRfactor, RuleAddCacheWrite, RuleMultiLevelTilingWithFusion,
    RuleMultiLevelTiling), with the scan rule before RuleSkipStage."""
    if policy is not None and policy.task.target.is_gpu:
        return gpu_sketch_rules()
    return [RuleAlwaysInline(), RuleSimplifyComputeWithConstTensor(), RuleAddRfactor(),
            RuleAddCacheWrite(), RuleMultiLevelTilingWithFusion(), RuleMultiLevelTiling(),
            RuleScanUpdate(), RuleSkipStage()]


def register_sketch_rule(rule: SketchRule) -> SketchRule:
    """Add ``rule`` to the rules every later :func:`generate_sketches` call (without an
    explicit ``rules`` list) tries first, in registration order.  Returns ``rule``."""
    if not isinstance(rule, SketchRule):
        raise TypeError(f"a sketch rule must derive from SketchRule, got {type(rule).__name__}")
    _REGISTERED.append(rule)
    return rule


def unregister_sketch_rule(rule: SketchRule) -> None:
    """Remove a rule added by :func:`register_sketch_rule` (no error if absent)."""
    if rule in _REGISTERED:
        _REGISTERED.remove(rule)


def registered_sketch_rules() -> list:
    """The user rules now registered (a copy)."""
    return list(_REGISTERED)


def generate_sketches(policy, rules=None) -> list:
    """The sketches of ``policy.task.compute_dag``.

    Parameters
    ----------
    policy : duck-typed search policy (``task.compute_dag``, ``task.target``,
        ``task.hardware_params``, ``params``)
    rules : list of SketchRule, optional; default: the registered rules then
        :func:`default_sketch_rules` of the policy's target (CPU or GPU).  With an
        explicit list exactly those rules run.

    Returns a list of States, in Ansor's derivation order.  Raises ScheduleError
    when the rules derive more than MAX_SKETCHES pairs (a rule that never moves
    to an earlier stage).
    """
    rules = list(rules) if rules is not None else registered_sketch_rules() + default_sketch_rules(policy)
    init = State.from_dag(policy.task.compute_dag)
    now = [(init, len(init.stages) - 1)]
    out: list = []
    while now:
        nxt: list = []
        for state, stage_id in now:
            if stage_id < 0:
                out.append(state)
                continue
            for rule in rules:
                cond = rule.meet_condition(policy, state, stage_id)
                if cond == ConditionKind.SKIP:
                    continue
                nxt.extend(rule.apply(policy, state, stage_id))
                if cond == ConditionKind.APPLY_AND_SKIP_REST:
                    break
        if len(nxt) + len(out) > MAX_SKETCHES:
            raise ScheduleError(f"sketch generation derived more than {MAX_SKETCHES} states; "
                                "does some rule never move to an earlier stage?")
        now = nxt
    return [unknown_rfactor_split(s) for s in out]


def unknown_rfactor_split(state):
    """``state`` with the length of the split right before each rfactor set to unknown
    (Ansor's post-processing of sketches), so InitFillTileSize samples it."""
    steps = list(state.transform_steps)
    changed = False
    for k, step in enumerate(steps):
        if isinstance(step, RfactorStep) and k > 0 and isinstance(steps[k - 1], SplitStep):
            prev = steps[k - 1]
            steps[k - 1] = replace(prev, lengths=(None,) * len(prev.lengths))
            changed = True
    return replace(state, transform_steps=tuple(steps)) if changed else state


__all__ = ["default_sketch_rules", "register_sketch_rule", "unregister_sketch_rule",
           "registered_sketch_rules", "generate_sketches", "unknown_rfactor_split",
           "MAX_SKETCHES"]
