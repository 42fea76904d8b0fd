"""sketch_rules.random_pick.pick: one index draw, elements kept as they are."""

import numpy as np
import pytest

from sketch_rules.random_pick import pick


def test_same_stream_as_an_index_draw():
    seq = [(1, 2), (3, 4), (5, 6), (7, 8)]
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    got = [pick(a, seq) for _ in range(100)]
    want = [seq[int(b.integers(len(seq)))] for _ in range(100)]
    assert got == want
    assert all(isinstance(x, tuple) for x in got)  # not turned into arrays
    assert a.integers(1 << 30) == b.integers(1 << 30)  # one draw per pick


def test_every_element_is_drawn_uniformly():
    rng = np.random.default_rng(0)
    counts = np.bincount([pick(rng, range(5)) for _ in range(5000)], minlength=5)
    assert counts.min() > 850 and counts.max() < 1150  # 1000 each expected


def test_empty_sequence_raises():
    with pytest.raises(ValueError):
        pick(np.random.default_rng(0), [])
