"""The library's one exception hierarchy.

Every error the compiler and the search raise on purpose derives from
:class:`SchedulerCoreError`; ``api/`` maps each class to an HTTP status once.
"""

from __future__ import annotations


class SchedulerCoreError(Exception):
    """Base class of every error raised on purpose by this library."""


class InvalidWorkloadError(SchedulerCoreError, ValueError):
    """A compute description (te expressions or DAG JSON) is malformed.

    ``path`` names the offending node, e.g. ``"ops[3].body.args[1]"``.
    """

    def __init__(self, message: str, path: str = ""):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class ScheduleError(SchedulerCoreError):
    """A transform step is illegal on the state it is applied to."""


class LoweringError(SchedulerCoreError):
    """A schedule cannot be turned into a loop program."""


class BuildError(SchedulerCoreError):
    """Code generation or compilation of a loop program failed."""


class InvalidTargetError(BuildError, ValueError):
    """A target string is malformed or names something LLVM does not know.

    The message says what is wrong and, where the choice is a closed set (target
    kinds, option keys, LLVM's CPU and feature names), lists the allowed values.
    """


class RuntimeArgumentError(SchedulerCoreError, ValueError):
    """A compiled function was called with arrays of the wrong shape/dtype/layout."""


class DeviceRuntimeError(SchedulerCoreError, RuntimeError):
    """A compiled function failed while running (nonzero return), or its device is unusable."""


class IndexOutOfBoundsError(DeviceRuntimeError, IndexError):
    """A compiled CPU function read a tensor at an index taken from the data (a gather, e.g. an
    embedding lookup) that was outside the tensor.  The read was clamped to element 0, so no
    memory outside the buffers was touched, and the outputs are not valid."""


# Return codes of a generated CPU function: bits, OR-ed over the chunks of parallel loops.
HEAP_ALLOCATION_FAILED = 1
INDEX_OUT_OF_BOUNDS = 2


def check_return_code(name: str, code: int) -> None:
    """Raise for a nonzero return ``code`` of the generated function ``name``:
    :class:`IndexOutOfBoundsError` when its :data:`INDEX_OUT_OF_BOUNDS` bit is set, else
    :class:`DeviceRuntimeError` (a failed heap allocation, or an unknown code)."""
    if code == 0:
        return
    if code & INDEX_OUT_OF_BOUNDS:
        raise IndexOutOfBoundsError(
            f"{name} returned {code}: INDEX_OUT_OF_BOUNDS: an index read from a tensor (a gather) was "
            f"outside the tensor it indexes; the read was clamped, the outputs are not valid")
    what = "a heap allocation failed" if code == HEAP_ALLOCATION_FAILED else "nonzero means failure"
    raise DeviceRuntimeError(f"{name} returned {code} ({what})")


class RecordFormatError(SchedulerCoreError, ValueError):
    """A measurement record (one line of a record file) is malformed or of an unknown version.

    ``lineno``: the 1-based line number in ``filename`` (``None`` for a lone line).
    """

    def __init__(self, message: str, lineno: int | None = None, filename: str = ""):
        self.lineno = lineno
        self.filename = filename
        where = ", ".join(p for p in (filename, f"line {lineno}" if lineno is not None else "") if p)
        super().__init__(f"{where}: {message}" if where else message)


def check(cond: bool, msg: str, exc: type[SchedulerCoreError] = ScheduleError) -> None:
    """Raise ``exc(msg)`` unless ``cond`` holds (tinygrad's ``check`` helper)."""
    if not cond:
        raise exc(msg)
