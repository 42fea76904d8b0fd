"""``tvm.target``: targets as ``with`` contexts (TVM's ``tvm.target.create`` / ``Target.current``).

    with sc.target.create("llvm"):
        s, args = template(...)        # a template asks sc.target.current() for its target

:func:`create` parses a target string exactly as :meth:`Target.parse` does (same errors,
same canonical text) and returns a :class:`ScopedTarget`: a Target that can also be
entered.  Inside the block :func:`current` returns it; blocks nest, and leaving a block
restores the enclosing target.  The stack is per thread, as TVM's target scope
(``base.context_stack``).
"""

from __future__ import annotations

from dataclasses import fields

from scheduler_core.base.context_stack import ContextStack
from scheduler_core.base.target import Target

_SCOPES: ContextStack[ScopedTarget] = ContextStack("autosched_target")


class ScopedTarget(Target):
    """A :class:`Target` that is also a ``with`` context (entering makes it :func:`current`).

    It compares and hashes as the plain Target with the same fields, so records, tasks and
    caches keyed by targets do not tell the two apart.
    """

    def __enter__(self) -> ScopedTarget:
        _SCOPES.push(self)
        return self

    def __exit__(self, *exc) -> None:
        _SCOPES.pop(self)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Target):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Target))

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(Target)))


def create(target: str | Target) -> ScopedTarget:
    """A target from its string (``"llvm"``, ``"llvm -mcpu=skylake-avx512"``, ``"cuda"``) that can
    be used as ``with sc.target.create(t): ...`` (TVM's ``tvm.target.create``, later ``Target(t)``).

    Raises InvalidTargetError (a BuildError and a ValueError) for a string :meth:`Target.parse`
    rejects; the message names the allowed values.
    """
    parsed = Target.parse(target)
    if isinstance(parsed, ScopedTarget):
        return parsed
    return ScopedTarget(**{f.name: getattr(parsed, f.name) for f in fields(Target)})


def current(allow_none: bool = True) -> ScopedTarget | None:
    """The innermost target entered with ``with`` in this thread (TVM's ``Target.current``).

    allow_none: return None when no target is entered; False raises a ValueError instead.
    """
    scope = _SCOPES.current()
    if scope is not None or allow_none:
        return scope
    raise ValueError("no target is entered: use `with scheduler_core.target.create(\"llvm\"):`")


__all__ = ["create", "current", "ScopedTarget", "Target"]
