"""Options of a build that do not change what the program computes (TVM's ``PassContext`` config).

    with BuildConfig(parallel_runtime="gomp"):      # every build inside the block
        mod = sc.build(s, args, "llvm")
    mod = sc.build(s, args, "llvm", config=BuildConfig(parallel_schedule="static"))

A build takes its config as an argument or, without one, from the innermost ``with
BuildConfig(...)`` of the thread (:meth:`BuildConfig.current`), else a fresh
``BuildConfig()``.  A field left out takes its default from the environment variable named
below, read when the config is made (so a child process inherits the choice), else the
built-in default:

``parallel_runtime`` (``AUTOSCHED_PARALLEL_RUNTIME``, default ``"pool"``)
    the threads of parallel loops: ``"pool"`` our thread pool (``codegen/thread_pool.py``),
    ``"gomp"`` libgomp's ``GOMP_parallel`` (libgomp is loaded only then).
``parallel_schedule`` (``AUTOSCHED_PARALLEL_SCHEDULE``, default ``"dynamic"``)
    ``"dynamic"``: chunks taken in turn from an atomic counter; ``"static"``: one chunk per
    thread (see ``codegen/parallel.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .context_stack import ContextStack
from .errors import BuildError

PARALLEL_RUNTIMES = ("pool", "gomp")
PARALLEL_SCHEDULES = ("dynamic", "static")
RUNTIME_ENV = "AUTOSCHED_PARALLEL_RUNTIME"
SCHEDULE_ENV = "AUTOSCHED_PARALLEL_SCHEDULE"

_SCOPES: ContextStack[BuildConfig] = ContextStack("autosched_build_config")


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


@dataclass(frozen=True)
class BuildConfig:
    """The codegen options of a build (TVM's ``tvm.transform.PassContext(config=...)``).

    parallel_runtime : str, one of :data:`PARALLEL_RUNTIMES` (default: ``$AUTOSCHED_PARALLEL_RUNTIME``
        or ``"pool"``)
    parallel_schedule : str, one of :data:`PARALLEL_SCHEDULES` (default:
        ``$AUTOSCHED_PARALLEL_SCHEDULE`` or ``"dynamic"``)

    Raises BuildError naming the allowed values (and the environment variable) for another
    value.  Usable as a ``with`` block: builds inside it that get no config use this one.
    """

    parallel_runtime: str = field(default_factory=lambda: _env(RUNTIME_ENV, "pool"))
    parallel_schedule: str = field(default_factory=lambda: _env(SCHEDULE_ENV, "dynamic"))

    def __post_init__(self) -> None:
        if self.parallel_runtime not in PARALLEL_RUNTIMES:
            raise BuildError(f"parallel_runtime {self.parallel_runtime!r} ({RUNTIME_ENV}) is not one of "
                             f"{PARALLEL_RUNTIMES}")
        if self.parallel_schedule not in PARALLEL_SCHEDULES:
            raise BuildError(f"parallel_schedule {self.parallel_schedule!r} ({SCHEDULE_ENV}) is not one of "
                             f"{PARALLEL_SCHEDULES}")

    @staticmethod
    def current() -> BuildConfig:
        """The innermost ``with BuildConfig(...)`` of this thread, else ``BuildConfig()`` (from the
        environment, read now)."""
        return _SCOPES.current() or BuildConfig()

    @staticmethod
    def resolve(config: BuildConfig | None) -> BuildConfig:
        """``config`` when given, else :meth:`current`."""
        return config if config is not None else BuildConfig.current()

    def __enter__(self) -> BuildConfig:
        _SCOPES.push(self)
        return self

    def __exit__(self, *exc) -> None:
        _SCOPES.pop(self)
