"""ConfigSpace, ConfigEntity and FallbackConfigEntity: what ``autotvm.get_config()`` returns.

See :mod:`scheduler_core.autotvm.space` for the knobs and the index order (TVM's
``autotvm/task/space.py``).  A config's JSON form is TVM's log form:
``{"index": 26, "code_hash": null, "entity": [["tile_y", "sp", [-1, 180]]]}``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, ScheduleError

from .space import (
    ENTITY_OF_KIND,
    AnnotateSpace,
    OtherOptionSpace,
    ReorderSpace,
    SplitSpace,
    TransformSpace,
    VirtualAxis,
)


class InstantiationError(ScheduleError):
    """A config cannot be instantiated (``cfg.raise_error``, or the template rejects it):
    measured as INSTANTIATION_ERROR (TVM's ``InstantiationError``)."""


class ConfigSpace:
    """The knobs of a template while a task is created (TVM's ConfigSpace).

    ``define_split / define_knob / define_reorder / define_annotate`` add a knob (a second
    knob of one name raises InvalidWorkloadError); ``cfg[name]`` is the knob's first entity,
    so the template runs through.  ``len(space)`` is the product of the knobs' lengths,
    ``space.get(i)`` the ConfigEntity of index ``i`` (first knob varies fastest).
    """

    is_fallback = False

    def __init__(self):
        self.space_map: OrderedDict = OrderedDict()
        self._entity_map: OrderedDict = OrderedDict()
        self.flop = 0.0
        self.code_hash = None
        self.template_key = None

    # -- knobs -------------------------------------------------------------------
    @staticmethod
    def axis(var: Any) -> VirtualAxis:
        """A virtual axis of length ``var`` (an int or an IterVar) to split (``cfg.axis(n)``)."""
        return VirtualAxis(var)

    reduce_axis = axis

    def define_split(self, name: str, axis: Any, policy: str = "factors", **kwargs) -> None:
        """Split knob (:class:`~scheduler_core.autotvm.space.SplitSpace`): ``num_outputs=2``,
        ``max_factor=``, ``filter=``, ``candidate=``."""
        self._add(name, lambda: SplitSpace([axis], policy, name=name, **kwargs))

    def define_reorder(self, name: str, axes: list, policy: str = "all", **kwargs) -> None:
        """Reorder knob (:class:`~scheduler_core.autotvm.space.ReorderSpace`): ``interval=``, ``candidate=``."""
        self._add(name, lambda: ReorderSpace(list(axes), policy, name=name, **kwargs))

    def define_annotate(self, name: str, axes: list, policy: str = "none", **kwargs) -> None:
        """Annotation knob (:class:`~scheduler_core.autotvm.space.AnnotateSpace`): ``candidate=``."""
        self._add(name, lambda: AnnotateSpace(list(axes), policy, name=name, **kwargs))

    def define_knob(self, name: str, candidate: list) -> None:
        """A knob over arbitrary values (``cfg.define_knob("unroll", [0, 1])``); ``cfg[name].val``."""
        self._add(name, lambda: OtherOptionSpace(candidate, name=name))

    def _add(self, name: str, make) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidWorkloadError(f"a knob name must be a non-empty string, got {name!r}")
        if name in self.space_map:
            raise InvalidWorkloadError(f"knob {name!r} is defined twice in this template; each knob needs its own name")
        space = make()
        self.space_map[name] = space
        self._entity_map[name] = self._pick(space)

    def _pick(self, space: TransformSpace):
        return space[0]

    def add_flop(self, flop: float) -> None:
        """Add to the FLOP count of the task (GFLOP/s are reported against it)."""
        self.flop += float(flop)

    def raise_error(self, msg: str) -> None:
        """Reject this config: it is measured as INSTANTIATION_ERROR."""
        raise InstantiationError(str(msg))

    def valid(self) -> bool:
        return True

    # -- queries -------------------------------------------------------------------
    def __getitem__(self, name: str):
        if name not in self._entity_map:
            raise InvalidWorkloadError(f"the template's config has no knob {name!r}; its knobs are "
                                       f"{list(self._entity_map)}")
        return self._entity_map[name]

    def __contains__(self, name: str) -> bool:
        return name in self._entity_map

    def __len__(self) -> int:
        return math.prod(len(s) for s in self.space_map.values())

    @property
    def dims(self) -> list:
        """The length of each knob's space, in definition order."""
        return [len(s) for s in self.space_map.values()]

    def point2knob(self, index: int) -> list:
        """Index -> one entity index per knob (mixed radix, first knob fastest)."""
        out = []
        for d in self.dims:
            out.append(index % d)
            index //= d
        return out

    def knob2point(self, knob: list) -> int:
        """One entity index per knob -> index (inverse of :meth:`point2knob`)."""
        index, mul = 0, 1
        for k, d in zip(knob, self.dims):
            index += int(k) * mul
            mul *= d
        return index

    def get(self, index: int) -> ConfigEntity:
        """The ConfigEntity of ``index`` (0 <= index < len); raises IndexError naming the length."""
        if not 0 <= int(index) < len(self):
            raise IndexError(f"config index {index} is out of range for a space of length {len(self)}")
        entities = OrderedDict((name, space[k]) for (name, space), k
                               in zip(self.space_map.items(), self.point2knob(int(index))))
        return ConfigEntity(int(index), self.code_hash, entities)

    def __repr__(self) -> str:
        res = f"ConfigSpace (len={len(self)}, space_map=\n"
        for i, (name, space) in enumerate(self.space_map.items()):
            res += f"  {i:2d} {name}: {space}\n"
        return res + ")"


class ConfigEntity(ConfigSpace):
    """One point of a config space (TVM's ConfigEntity): ``cfg[name]`` is its choice for that knob.

    ``define_*`` calls do nothing (the knobs are known); ``index`` is its place in the space
    (-1 when unknown).  ``str(cfg)`` is TVM's ``[('tile_y', [-1, 540])],None,30``.
    """

    def __init__(self, index: int, code_hash: Any, entity_map: OrderedDict, constraints: Any = None):
        super().__init__()
        self.index = int(index)
        self.code_hash = code_hash
        self._entity_map = OrderedDict(entity_map)

    def _add(self, name: str, make) -> None:
        return None

    def __len__(self) -> int:
        return 1

    def get_flatten_feature(self) -> list:
        """The knob choices as numbers (split sizes, reorder perms, annotation codes, knob values)."""
        out: list = []
        for ent in self._entity_map.values():
            v = ent.value
            out.extend(v if isinstance(v, list) else [v])
        return out

    def to_json_dict(self) -> dict:
        """TVM's log form of this config."""
        return {"index": self.index, "code_hash": self.code_hash,
                "entity": [[name, ent.kind, ent.value] for name, ent in self._entity_map.items()]}

    @staticmethod
    def from_json_dict(obj: Any) -> ConfigEntity:
        """Rebuild a config from :meth:`to_json_dict`; raises InvalidWorkloadError on a malformed one."""
        if not (isinstance(obj, dict) and isinstance(obj.get("index"), int) and isinstance(obj.get("entity"), list)):
            raise InvalidWorkloadError(f"a config must be {{'index': int, 'entity': [[name, kind, value], ...]}}, "
                                       f"got {obj!r}", "config")
        entities = OrderedDict()
        for k, item in enumerate(obj["entity"]):
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and item[1] in ENTITY_OF_KIND):
                raise InvalidWorkloadError(f"config entity {k} must be [name, kind in {list(ENTITY_OF_KIND)}, value], "
                                           f"got {item!r}", f"config.entity[{k}]")
            entities[item[0]] = ENTITY_OF_KIND[item[1]](item[2])
        return ConfigEntity(obj["index"], obj.get("code_hash"), entities)

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigEntity) and list(self._entity_map.items()) == list(other._entity_map.items())

    def __hash__(self) -> int:
        return hash(tuple(self._entity_map.items()))

    def __repr__(self) -> str:
        return f"{str(list(self._entity_map.items()))},{self.template_key},{self.index}"


class FallbackConfigEntity(ConfigSpace):
    """The config used when none is known (TVM's FallbackConfigEntity): each knob's default.

    A split is ``[-1, 1, ...]``, a ``define_knob`` its first value, a reorder the identity,
    an annotation none; the template builds, untuned.
    """

    is_fallback = True

    def _pick(self, space: TransformSpace):
        return space.default

    @property
    def index(self) -> int:
        return -1

    def __repr__(self) -> str:
        return f"{str(list(self._entity_map.items()))},{self.template_key},-1"


__all__ = ["ConfigSpace", "ConfigEntity", "FallbackConfigEntity", "InstantiationError"]
