"""ContextStack: the innermost entered scope, per thread; targets and build configs use it."""

from __future__ import annotations

import threading

import scheduler_core as sc
from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.context_stack import ContextStack


def test_nesting_and_mismatched_exit():
    stack: ContextStack[str] = ContextStack("test")
    assert stack.current() is None and len(stack) == 0
    a, b = "outer", "inner"
    stack.push(a)
    stack.push(b)
    assert stack.current() is b and list(stack.innermost_first()) == [b, a]
    stack.pop(a)  # not the innermost: ignored
    assert stack.current() is b
    stack.pop(b)
    stack.pop(a)
    assert stack.current() is None


def test_scopes_are_per_thread():
    seen = []
    with sc.target.create("llvm -num-cores=2") as t, BuildConfig(parallel_schedule="static") as cfg:
        assert sc.target.current() is t and BuildConfig.current() is cfg
        thread = threading.Thread(target=lambda: seen.append((sc.target.current(), BuildConfig.current() is cfg)))
        thread.start()
        thread.join()
    assert seen == [(None, False)]
    assert sc.target.current() is None
