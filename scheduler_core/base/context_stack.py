"""The one idiom for "the current X": a stack of entered ``with`` scopes per thread.

    _TARGETS = ContextStack("target")
    class ScopedTarget:
        def __enter__(self): _TARGETS.push(self); return self
        def __exit__(self, *exc): _TARGETS.pop(self)
    _TARGETS.current()       # the innermost entered one, or None

The stack lives in a ``contextvars.ContextVar`` holding a tuple, so each thread (and each
asyncio task) sees only the scopes it entered itself, as TVM's ``Target.current`` and
``PassContext.current`` (thread-local scopes) and Python's ``decimal.localcontext``.  Used by
targets (``scheduler_core.target``), build options (:class:`~scheduler_core.base.build_config.BuildConfig`),
the best-record dispatch of ``graph.dispatch`` and autotvm's config and dispatch scopes.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class ContextStack(Generic[T]):
    """The entered scopes of one kind, innermost last, per thread / asyncio task.

    name : str, the name of the underlying ``ContextVar`` (for debugging).
    """

    def __init__(self, name: str):
        self._var: contextvars.ContextVar[tuple] = contextvars.ContextVar(name, default=())

    def push(self, value: T) -> None:
        """Enter ``value`` (it becomes :meth:`current`)."""
        self._var.set(self._var.get() + (value,))

    def pop(self, value: T) -> None:
        """Leave ``value`` if it is the innermost scope (a mismatched exit is ignored)."""
        stack = self._var.get()
        if stack and stack[-1] is value:
            self._var.set(stack[:-1])

    def current(self) -> T | None:
        """The innermost entered scope, or None when none is entered in this thread."""
        stack = self._var.get()
        return stack[-1] if stack else None

    def innermost_first(self) -> Iterator[T]:
        """Every entered scope, innermost first."""
        return reversed(self._var.get())

    def __len__(self) -> int:
        return len(self._var.get())
