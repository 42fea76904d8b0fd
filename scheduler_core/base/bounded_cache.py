"""The one bounded cache: a least-recently-used map with a fixed number of entries.

    _LOWERED: BoundedCache[tuple, PrimFunc] = BoundedCache(2048)
    func = _LOWERED.get_or_make((state, name), lambda: lower(state, name))   # by value
    func = _LOWERED.get_or_make(key, make, keep=(state,))                   # by identity

Keys are compared by value (``==`` / ``hash``).  A cache keyed by object *identity*
(``id(obj)``, for objects that hash slowly or not at all) passes the objects as ``keep``:
the entry holds them, so their ids cannot be reused while it lives, and a hit counts only
when the same objects (``is``) are given again.  ``hits`` and ``misses`` count lookups.
Not thread safe beyond the GIL's atomicity of single dict operations (a lost update only
costs a recomputation).  Source of the idea: ``functools.lru_cache``, with the store
visible and the identity check of TVM's object caches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``capacity`` entries ``key -> value``; the least recently used goes first.

    capacity : int, the number of entries kept (>= 1); raises ValueError otherwise.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"a BoundedCache keeps at least one entry, got capacity={capacity}")
        self.capacity = int(capacity)
        self._entries: OrderedDict = OrderedDict()  # key -> (kept objects, value)
        self.hits = 0
        self.misses = 0

    def get(self, key: K, default: V | None = None, keep: tuple = ()) -> V | None:
        """The value of ``key`` (made most recent), else ``default``; with ``keep``, a hit
        needs the entry's kept objects to be these very objects."""
        entry = self._entries.get(key)
        if entry is None or not _same(entry[0], keep):
            self.misses += 1
            return default
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def put(self, key: K, value: V, keep: tuple = ()) -> V:
        """Store ``value`` under ``key`` (holding ``keep``), dropping the oldest entries beyond
        the capacity; returns ``value``."""
        self._entries[key] = (tuple(keep), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return value

    def get_or_make(self, key: K, make: Callable[[], V], keep: tuple = ()) -> V:
        """The cached value of ``key``, or ``make()`` stored under it.  Exceptions of ``make``
        propagate and store nothing."""
        entry = self._entries.get(key)
        if entry is not None and _same(entry[0], keep):
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]
        self.misses += 1
        return self.put(key, make(), keep)

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


def _same(kept: tuple, given: tuple) -> bool:
    return len(kept) == len(given) and all(a is b for a, b in zip(kept, given))
