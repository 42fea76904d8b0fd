"""BoundedCache: least recently used first out, identity-keyed entries, counters."""

from __future__ import annotations

import pytest

from scheduler_core.base.bounded_cache import BoundedCache


def test_least_recently_used_goes_first():
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2
    assert cache.get("b", default=-1) == -1
    assert (cache.hits, cache.misses) == (3, 1)


def test_get_or_make_calls_make_once_and_stores_nothing_on_error():
    cache: BoundedCache[int, list] = BoundedCache(4)
    calls = []
    first = cache.get_or_make(7, lambda: calls.append(1) or [7])
    assert cache.get_or_make(7, lambda: calls.append(1) or [0]) is first and calls == [1]

    def boom():
        raise KeyError("no")

    with pytest.raises(KeyError):
        cache.get_or_make(8, boom)
    assert 8 not in cache


def test_identity_keys_hit_only_for_the_same_objects():
    cache: BoundedCache[int, str] = BoundedCache(4)
    a, b = [1], [1]  # equal, not the same object
    cache.put(id(a), "of a", keep=(a,))
    assert cache.get(id(a), keep=(a,)) == "of a"
    assert cache.get(id(a), keep=(b,)) is None  # same key, another object: a miss
    assert cache.get_or_make(id(a), lambda: "again", keep=(b,)) == "again"  # replaced


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        BoundedCache(0)
