"""The contract of a sketch generation rule (Ansor's ``SketchGenerationRule``).

    (state, stage_id) --meet_condition--> SKIP | APPLY | APPLY_AND_SKIP_REST
                      --apply--> [(new_state, next_stage_id), ...]

Sketch generation walks the stages of a state from the last to the first;
at each stage it asks the rules in order whether they apply.  ``APPLY`` adds
the rule's results and goes on with the next rule; ``APPLY_AND_SKIP_REST``
adds them and stops there.  Each result names the stage to work on next
(usually ``stage_id - 1``; a rule that inserts a stage before the current one,
such as cache_write, returns ``stage_id`` to visit it).  Ansor, section 4.1.
"""

from __future__ import annotations

import enum


class ConditionKind(enum.IntEnum):
    """What a rule says about a (state, stage) pair (Ansor's ``ConditionKind``)."""

    SKIP = 0
    APPLY = 1
    APPLY_AND_SKIP_REST = 2


class SketchRule:
    """Base class of sketch generation rules.

    Subclasses implement :meth:`meet_condition` and :meth:`apply`; both receive the
    duck-typed ``policy`` (``policy.task`` with ``compute_dag``, ``target`` and
    ``hardware_params``; ``policy.params``, a SketchPolicyParams), the current State
    and the index of the stage being worked on.
    """

    name = "SketchRule"

    def meet_condition(self, policy, state, stage_id: int) -> ConditionKind:
        raise NotImplementedError

    def apply(self, policy, state, stage_id: int) -> list:
        """``[(State, next_stage_id), ...]``; an empty list drops this branch."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CustomSketchRule(SketchRule):
    """A rule made of two functions (Ansor's ``PreloadCustomSketchRule``).

    meet_condition_func(policy, state, stage_id) -> ConditionKind (or its int value);
    apply_func(policy, state, stage_id) -> [(State, next_stage_id), ...].
    """

    def __init__(self, meet_condition_func, apply_func, name: str = "CustomSketchRule"):
        self.meet_condition_func = meet_condition_func
        self.apply_func = apply_func
        self.name = name

    def meet_condition(self, policy, state, stage_id: int) -> ConditionKind:
        return ConditionKind(int(self.meet_condition_func(policy, state, stage_id)))

    def apply(self, policy, state, stage_id: int) -> list:
        return [(s, int(k)) for s, k in self.apply_func(policy, state, stage_id)]

    def __repr__(self) -> str:
        return f"CustomSketchRule({self.name!r})"


__all__ = ["ConditionKind", "SketchRule", "CustomSketchRule"]
