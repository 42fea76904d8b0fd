"""fast_init and evolve (scheduler_core.base.frozen): the same objects as the dataclass's own
__init__ and dataclasses.replace, and still frozen."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler_core.base.frozen import evolve, fast_init


@fast_init
@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 7
    tag: str = "p"


def test_fast_init_keeps_the_signature_defaults_and_frozenness():
    assert Point(1) == Point(1, 7, "p") and Point(x=2, tag="q") == Point(2, 7, "q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Point(1).x = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_evolve_is_replace():
    p = Point(1, 2, "a")
    assert evolve(p, y=5) == dataclasses.replace(p, y=5) and p == Point(1, 2, "a")
    assert evolve(p, y=5) is not p and type(evolve(p)) is Point
