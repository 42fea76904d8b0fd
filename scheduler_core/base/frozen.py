"""Cheaper construction of frozen dataclasses that are built in the hundreds of thousands.

    @fast_init                  an ``__init__`` that stores the fields straight into ``__dict__``
    evolve(obj, **changes)      ``dataclasses.replace`` without its per-call walk over the fields

Expression nodes (``ir/expr.py``) and the schedule's States, Stages and Iterators
(``schedule/loop_state.py``) are immutable dataclasses, and one evolution round of the search
makes several hundred thousand of them: the ``__init__`` that ``dataclass(frozen=True)``
generates calls ``object.__setattr__`` once per field, and ``replace`` looks every field up
again; both cost about twice what these do.  The classes stay frozen (``__setattr__`` still
refuses assignments); neither is for a class with ``__post_init__`` or ``field(init=False)``.
"""

from __future__ import annotations

from dataclasses import MISSING


def fast_init(cls):
    """Give the frozen dataclass ``cls`` an ``__init__`` with the same signature that stores
    the fields straight into the instance ``__dict__`` (the generated one calls
    ``object.__setattr__`` once per field, about twice as slow; nodes are built in the
    hundreds of thousands per search round).  The class stays frozen: ``__setattr__`` still
    refuses assignments."""
    names = list(cls.__dataclass_fields__)
    defaults = {n: f.default for n, f in cls.__dataclass_fields__.items() if f.default is not MISSING}
    params = ", ".join(f"{n}=_d_{n}" if n in defaults else n for n in names)
    body = "".join(f"    d[{n!r}] = {n}\n" for n in names)
    src = f"def __init__(self, {params}):\n    d = self.__dict__\n{body}"
    scope = {f"_d_{n}": v for n, v in defaults.items()}
    exec(src, scope)  # noqa: S102 - a fixed template over the dataclass's own field names
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


def evolve(obj, **changes):
    """``dataclasses.replace(obj, **changes)`` for a frozen dataclass with plain fields only
    and no ``__post_init__`` (the schedule's Iterator, Stage, State, relations and steps),
    without ``replace``'s per-call walk over the fields: a copy of the instance dict with
    ``changes`` applied.  ``changes`` must name fields of ``obj``."""
    new = object.__new__(type(obj))
    d = new.__dict__
    d.update(obj.__dict__)
    d.update(changes)
    return new


__all__ = ["fast_init", "evolve"]
