"""Knobs and configuration spaces of AutoTVM templates (TVM's ``autotvm/task/space.py``).

A template declares its tunable decisions on the config that ``autotvm.get_config()`` hands it:

    cfg.define_split("tile_y", y, num_outputs=2)        # SplitSpace: factors of y's extent
    cfg.define_knob("unroll", [0, 1])                    # OtherOptionSpace: any values
    cfg.define_reorder("order", [a, b, c], policy="all") # ReorderSpace: permutations
    cfg.define_annotate("ann", [yi], policy="try_vec")  # AnnotateSpace: unroll / vectorize
    yo, yi = cfg["tile_y"].apply(s, yuv, y)              # the chosen entity applied to s

The space is the cross product of the knobs' spaces.  Index ``i`` of the space picks, knob by
knob in definition order, entity ``i mod len(knob)`` and carries ``i // len(knob)`` on (TVM's
mixed-radix order, so the first knob varies fastest).  Three kinds of config exist, as in TVM:

- :class:`ConfigSpace` while a task is created: ``define_*`` collects knobs, and ``cfg[name]``
  gives the knob's first entity so the template still runs to its end;
- :class:`ConfigEntity` while a config is measured or applied: ``define_*`` does nothing and
  ``cfg[name]`` is the entity this config chose;
- :class:`FallbackConfigEntity` when no config is known (no task, no history): each knob's
  default (a split ``[-1, 1, ...]``, a knob's first value, the identity order, no annotation).

Entities print as TVM's do (``[-1, 540]``), and a config as ``[('tile_y', [-1, 540])],None,30``.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, ScheduleError
from scheduler_core.base.gpu_spec import GPU_LOOP_KINDS
from scheduler_core.ir.expr import IntImm, IterVar, Var

# TVM's short names of the entity kinds in a record's "entity" list.
KIND_SPLIT, KIND_REORDER, KIND_ANNOTATE, KIND_OTHER = "sp", "re", "an", "ot"
ANNOTATIONS = ("none", "unroll", "vec", "parallel") + GPU_LOOP_KINDS


class VirtualAxis:
    """An axis that exists only in the config space (``cfg.axis(n)``): a length to split.

    var: an int length, or an IterVar whose constant extent is taken.  Raises
    InvalidWorkloadError for a non-constant or non-positive length.
    """

    def __init__(self, var: Any, name: str = "axis"):
        self.name = name
        self.length = axis_length(var)

    def __repr__(self) -> str:
        return f"VirtualAxis({self.name}, {self.length})"


def axis_length(axis: Any) -> int:
    """The constant length of an axis: an int, a :class:`VirtualAxis` or an IterVar with a constant extent."""
    if isinstance(axis, VirtualAxis):
        return axis.length
    if isinstance(axis, bool):
        raise InvalidWorkloadError(f"an axis length must be an int, got {axis!r}")
    if isinstance(axis, int):
        n = axis
    elif isinstance(axis, IterVar):
        if not isinstance(axis.dom_extent, IntImm) or axis.dom_extent.value <= 0:
            raise InvalidWorkloadError(
                f"axis {axis.name!r} has no constant extent (a loop made by a schedule primitive carries none): "
                f"give define_split cfg.axis(length) instead")
        n = axis.dom_extent.value
    else:
        raise InvalidWorkloadError(f"expected an axis (IterVar, cfg.axis(n) or int), got {type(axis).__name__}")
    if n <= 0:
        raise InvalidWorkloadError(f"an axis length must be positive, got {n}")
    return int(n)


def get_factors(n: int) -> list:
    """Every divisor of ``n``, ascending (1080 has 32)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def get_pow2s(n: int) -> list:
    """The powers of two not above ``n``: 1, 2, 4, ..."""
    return [2 ** k for k in range(int(math.floor(math.log2(n))) + 1)]


# ---------------------------------------------------------------------------
# entities: one choice of one knob
# ---------------------------------------------------------------------------

class _ListEntity:
    """An entity whose choice is one list (``_choice()``): its ``value`` is a copy of that
    list, and it compares, hashes and prints as the list (TVM prints ``[-1, 540]``)."""

    def _choice(self) -> list:
        raise NotImplementedError

    @property
    def value(self) -> list:
        return list(self._choice())

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._choice() == other._choice()

    def __hash__(self) -> int:
        return hash(tuple(self._choice()))

    def __repr__(self) -> str:
        return str(self._choice())


class SplitEntity(_ListEntity):
    """A split's choice: ``size`` = ``[-1, f1, ..., fk]`` (outermost first; -1: what is left)."""

    kind = KIND_SPLIT

    def __init__(self, size: list):
        self.size = [int(x) for x in size]

    def apply(self, sch, op, axis) -> list:
        """Split ``axis`` of ``op``'s stage into ``len(size)`` loops; returns them, outermost first."""
        stage = sch[op]
        ret = []
        for i in range(len(self.size) - 1):
            outer, axis = stage.split(axis, factor=int(math.prod(self.size[i + 1:])))
            ret.append(outer)
        return ret + [axis]

    def _choice(self) -> list:
        return self.size


class ReorderEntity(_ListEntity):
    """A reorder's choice: ``perm``, indices into the knob's axes in their new order."""

    kind = KIND_REORDER

    def __init__(self, perm: list):
        self.perm = [int(x) for x in perm]

    def apply(self, sch, op, axes) -> list:
        """Reorder ``axes`` of ``op``'s stage as ``perm`` says; returns the axes in the new order."""
        if len(axes) != len(self.perm):
            raise ScheduleError(f"reorder entity {self.perm} needs {len(self.perm)} axes, got {len(axes)}")
        ordered = [axes[i] for i in self.perm]
        if self.perm != sorted(self.perm):
            sch[op].reorder(*ordered)
        return ordered

    def _choice(self) -> list:
        return self.perm


class AnnotateEntity(_ListEntity):
    """An annotation choice: ``anns``, one of :data:`ANNOTATIONS` per axis."""

    kind = KIND_ANNOTATE

    def __init__(self, anns: list):
        bad = [a for a in anns if a not in ANNOTATIONS]
        if bad:
            raise InvalidWorkloadError(f"unknown annotation(s) {bad}; the annotations are {list(ANNOTATIONS)}")
        self.anns = list(anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None, vec_size=None, cfg=None, source=None) -> list:
        """Annotate ``axes`` of ``op``'s stage (unroll, vectorize, parallel, bind); returns ``axes``."""
        if len(axes) != len(self.anns):
            raise ScheduleError(f"annotate entity {self.anns} needs {len(self.anns)} axes, got {len(axes)}")
        stage = sch[op]
        for ax, ann in zip(axes, self.anns):
            if ann == "unroll":
                stage.unroll(ax)
            elif ann == "vec":
                stage.vectorize(ax)
            elif ann == "parallel":
                stage.parallel(ax)
            elif ann != "none":
                stage.bind(ax, IterVar(Var(ann), IntImm(0), IntImm(0), "thread"))
        return list(axes)

    def _choice(self) -> list:
        return self.anns


class OtherOptionEntity:
    """A ``define_knob`` choice: ``val``, one of the values the template listed."""

    kind = KIND_OTHER

    def __init__(self, val: Any):
        self.val = val

    @property
    def value(self) -> Any:
        return self.val

    def __eq__(self, other) -> bool:
        return isinstance(other, OtherOptionEntity) and self.val == other.val

    def __hash__(self) -> int:
        return hash(repr(self.val))

    def __repr__(self) -> str:
        return str(self.val)


ENTITY_OF_KIND = {KIND_SPLIT: SplitEntity, KIND_REORDER: ReorderEntity, KIND_ANNOTATE: AnnotateEntity,
                  KIND_OTHER: OtherOptionEntity}


# ---------------------------------------------------------------------------
# spaces: all choices of one knob
# ---------------------------------------------------------------------------

class TransformSpace:
    """The entities of one knob, in a fixed order; ``space[i]`` is entity ``i``."""

    entities: list

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, index: int):
        return self.entities[index]

    @property
    def default(self):
        """The entity a :class:`FallbackConfigEntity` picks."""
        return self.entities[0]


SPLIT_POLICIES = ("factors", "power2", "verbose", "candidate")


class SplitSpace(TransformSpace):
    """Ways to split a loop of length ``product`` into ``num_outputs`` loops (TVM's SplitSpace).

    policy: "factors" (inner lengths whose product divides ``product``: no tail), "power2"
    (powers of two, a tail allowed), "verbose" (both), "candidate" (the ``candidate`` lists,
    each ``[-1, f1, ...]`` or ``[f0, f1, ...]``).  max_factor: largest inner length.
    filter: a predicate on a SplitEntity keeping the entities it accepts.
    Raises InvalidWorkloadError for an unknown policy, num_outputs < 1, or an empty space.
    """

    def __init__(self, axes, policy: str = "factors", num_outputs: int = 2, max_factor: int | None = None,
                 filter=None, candidate=None, name: str = ""):
        if policy not in SPLIT_POLICIES:
            raise InvalidWorkloadError(f"define_split {name!r}: unknown policy {policy!r}; "
                                       f"the policies are {list(SPLIT_POLICIES)}")
        if int(num_outputs) < 1:
            raise InvalidWorkloadError(f"define_split {name!r}: num_outputs must be >= 1, got {num_outputs}")
        self.policy, self.num_outputs = policy, int(num_outputs)
        self.product = axis_length(axes[0] if isinstance(axes, (list, tuple)) else axes)
        limit = self.product if max_factor is None else int(max_factor)
        if policy == "candidate":
            if not candidate:
                raise InvalidWorkloadError(f"define_split {name!r}: policy 'candidate' needs candidate=[[...], ...]")
            self.entities = [SplitEntity([-1] + [int(x) for x in c[1:]]) for c in candidate]
            bad = [c for c in candidate if len(c) != self.num_outputs]
            if bad:
                raise InvalidWorkloadError(f"define_split {name!r}: candidates {bad} do not have "
                                           f"{self.num_outputs} entries")
        else:
            factors = {"factors": get_factors, "power2": get_pow2s,
                       "verbose": lambda n: sorted(set(get_factors(n)) | set(get_pow2s(n)))}[policy](self.product)
            self.factors = [f for f in factors if f <= limit]
            self.entities = []
            self._generate(0, [0] * (self.num_outputs - 1), enforce_no_tail=policy == "factors")
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]
        if not self.entities:
            raise InvalidWorkloadError(f"define_split {name!r}: no way to split {self.product} with "
                                       f"policy={policy!r}, max_factor={max_factor} and the filter given")

    def _generate(self, now: int, stack: list, enforce_no_tail: bool) -> None:
        if now == self.num_outputs - 1:
            prod = functools.reduce(lambda a, b: a * b, stack, 1)
            if prod > self.product:
                return
            if self.product % prod == 0 or (not enforce_no_tail and prod < self.product):
                self.entities.append(SplitEntity([-1] + stack[::-1]))
            return
        for factor in self.factors:
            stack[now] = factor
            self._generate(now + 1, stack, enforce_no_tail)

    @property
    def default(self) -> SplitEntity:
        return SplitEntity([-1] + [1] * (self.num_outputs - 1))

    def __repr__(self) -> str:
        return (f"Split(policy={self.policy}, product={self.product}, num_outputs={self.num_outputs}) "
                f"len={len(self)}")


REORDER_POLICIES = ("identity", "all", "interval_all", "candidate")


class ReorderSpace(TransformSpace):
    """Orders of a list of axes (TVM's ReorderSpace).

    policy: "identity" (one entity), "all" (every permutation: n!), "interval_all" (every
    permutation of ``axes[l:r]`` for ``interval=(l, r)``, the rest in place), "candidate"
    (the ``candidate`` lists of axes, each a permutation of ``axes``).  Raises
    InvalidWorkloadError for an unknown policy, a bad interval or a candidate that is
    not a permutation.
    """

    def __init__(self, axes, policy: str = "all", interval=None, candidate=None, name: str = ""):
        if policy not in REORDER_POLICIES:
            raise InvalidWorkloadError(f"define_reorder {name!r}: unknown policy {policy!r}; "
                                       f"the policies are {list(REORDER_POLICIES)}")
        self.policy = policy
        n = len(axes)
        ids = list(range(n))
        if policy == "identity":
            perms = [ids]
        elif policy == "all":
            perms = [list(p) for p in itertools.permutations(ids)]
        elif policy == "interval_all":
            if not (isinstance(interval, (list, tuple)) and len(interval) == 2 and 0 <= interval[0] < interval[1] <= n):
                raise InvalidWorkloadError(f"define_reorder {name!r}: policy 'interval_all' needs interval=(l, r) "
                                           f"with 0 <= l < r <= {n}, got {interval!r}")
            lo, hi = interval
            perms = [ids[:lo] + list(p) + ids[hi:] for p in itertools.permutations(ids[lo:hi])]
        else:
            if not candidate:
                raise InvalidWorkloadError(f"define_reorder {name!r}: policy 'candidate' needs candidate=[[axes], ...]")
            names = [_axis_key(a) for a in axes]
            perms = []
            for cand in candidate:
                keys = [_axis_key(a) for a in cand]
                if sorted(keys) != sorted(names):
                    raise InvalidWorkloadError(f"define_reorder {name!r}: candidate {keys} is not an order of {names}")
                perms.append([names.index(k) for k in keys])
        self.entities = [ReorderEntity(p) for p in perms]

    def __repr__(self) -> str:
        return f"Reorder(policy={self.policy}) len={len(self)}"


ANNOTATE_POLICIES = ("none", "try_unroll", "try_vec", "try_unroll_vec", "candidate")


class AnnotateSpace(TransformSpace):
    """Annotations of a list of axes (TVM's AnnotateSpace).

    policy: "none" (no annotation), "try_unroll" (each axis unrolled or not: 2^n), "try_vec"
    (the last axis vectorized or not: 2), "try_unroll_vec" (each axis but the last unrolled
    or not, the last one none / unroll / vec: 3 * 2^(n-1)), "candidate" (the ``candidate``
    lists, one annotation of :data:`ANNOTATIONS` per axis).  Raises InvalidWorkloadError for
    an unknown policy or annotation.
    """

    def __init__(self, axes, policy: str = "none", candidate=None, name: str = ""):
        if policy not in ANNOTATE_POLICIES:
            raise InvalidWorkloadError(f"define_annotate {name!r}: unknown policy {policy!r}; "
                                       f"the policies are {list(ANNOTATE_POLICIES)}")
        self.policy = policy
        n = len(axes)
        if policy == "candidate":
            if not candidate or any(len(c) != n for c in candidate):
                raise InvalidWorkloadError(f"define_annotate {name!r}: policy 'candidate' needs candidate lists "
                                           f"of {n} annotations each")
            self.entities = [AnnotateEntity(list(c)) for c in candidate]
            return
        choices = {"none": [["none"]] * n,
                   "try_unroll": [["none", "unroll"]] * n,
                   "try_vec": [["none"]] * (n - 1) + [["none", "vec"]],
                   "try_unroll_vec": [["none", "unroll"]] * (n - 1) + [["none", "unroll", "vec"]]}[policy]
        # the first axis varies fastest, as in TVM's recursive generation
        self.entities = [AnnotateEntity(list(reversed(c))) for c in itertools.product(*reversed(choices))]

    def __repr__(self) -> str:
        return f"Annotate(policy={self.policy}) len={len(self)}"


class OtherOptionSpace(TransformSpace):
    """The values of a ``define_knob`` (TVM's OtherOptionSpace)."""

    def __init__(self, values, name: str = ""):
        values = list(values)
        if not values:
            raise InvalidWorkloadError(f"define_knob {name!r}: needs at least one value")
        self.entities = [OtherOptionEntity(v) for v in values]

    def __repr__(self) -> str:
        return f"OtherOption({self.entities}) len={len(self)}"


def _axis_key(a: Any) -> str:
    return a.name if isinstance(a, (IterVar, VirtualAxis)) else str(a)
