"""One random draw of the sampling and mutation rules: an element of a sequence.

``pick(rng, seq)`` draws ``rng.integers(len(seq))`` and returns that element, as Ansor's
rules draw ``rand_gen() % n`` (``src/auto_scheduler/search_policy/sketch_policy_rules.cc``).  Unlike
``rng.choice(seq)`` it never converts ``seq`` to an array, so the elements keep their types
(tuples, steps, states) and the random stream is the same as an index draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def pick(rng: Any, seq: Sequence[T]) -> T:
    """A uniformly random element of the non-empty ``seq``, drawn with the numpy
    ``Generator`` ``rng`` (one ``rng.integers(len(seq))`` call).  Raises ValueError for an
    empty ``seq`` (numpy's error for ``integers(0)``)."""
    return seq[int(rng.integers(len(seq)))]
