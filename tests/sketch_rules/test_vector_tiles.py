"""Register tiles of multi-level-tiled stages (sketch_rules.vector_tiles).

conv2d 1x64x56x56: in part of the samples the register tile (f.3 y.3 x.3) has a vectorized
row (``x.3``) that fills whole vectors and a number of vector accumulators that fits the
registers, instead of 1, 2, 7, 14 ... lanes as often as 8 and any number of accumulators.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from scheduler_core.schedule.transform_step import SplitStep
from sketch_rules import InitFillTileSize, InitVectorization, generate_sketches, sample_init_population
from sketch_rules import init_population as IP
from sketch_rules import vector_tiles as VT
from sketch_rules.vector_tiles import (
    register_tiles,
    row_registers,
    vector_lanes,
    vector_registers,
    vector_tile_lengths,
)
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy


def test_vector_tile_lengths_and_row_registers():
    assert vector_tile_lengths(56, 16, 16) == (8,)
    assert vector_tile_lengths(56, 16, 64) == (8, 56)
    assert vector_tile_lengths(28, 16, 64) == (28,)  # 4 lanes: less than half a register
    assert vector_tile_lengths(28, 8, 64) == (4, 28)
    assert vector_tile_lengths(64, 16, 64) == (16, 32, 64)
    assert vector_tile_lengths(64, 8, 16) == (8, 16)
    assert vector_tile_lengths(63, 16, 64) == ()  # odd: no power of two to fill
    assert vector_tile_lengths(6, 8, 64) == ()  # 2 lanes at most: no preference
    assert vector_lanes(64, "float32") == 16 and vector_lanes(32, "float64") == 4
    assert vector_registers(64) == 32 and vector_registers(32) == 16
    assert [row_registers(n, 16) for n in (8, 16, 28, 56, 64)] == [1, 1, 3, 4, 4]


def _conv():
    return W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3)


def test_register_tiles_of_conv2d_and_matmul_sketches():
    """conv2d: the tile is f.3 y.3 x.3 (and b.3), x.3 the vectorized loop; matmul's
    cache_write sketches: the tile of matmul.local (a stage the replay makes anew)."""
    policy = make_policy(_conv())
    for sketch in generate_sketches(policy):
        (tile,) = register_tiles(sketch)
        assert (tile.stage, tile.dtype, tile.has_reduce, tile.fixed) == ("conv2d", "float32", True, 1)
        steps = sketch.transform_steps
        assert isinstance(steps[tile.vector_split], SplitStep) and steps[tile.vector_split].extent == 56
        assert sorted(steps[k].extent for k in tile.other_splits) == [1, 56, 64]
        assert register_tiles(sketch) == [tile]  # cached
    stages = [[t.stage for t in register_tiles(sk)] for sk in generate_sketches(make_policy(W.matmul(64, 64, 64)))]
    assert stages == [["matmul"], ["matmul.local"], ["matmul.local"]]


def _tiles(policy, n, seed):
    """(x.3, accumulator registers) of n filled samples of every sketch of ``policy``."""
    rng = np.random.default_rng(seed)
    lanes = vector_lanes(policy.task.hardware_params.vector_unit_bytes, "float32")
    out = []
    for sketch in generate_sketches(policy):
        (tile,) = register_tiles(sketch)
        for _ in range(n):
            steps = InitFillTileSize().apply(policy, sketch, rng).transform_steps
            x3 = steps[tile.vector_split].lengths[-1]
            regs = row_registers(x3, lanes) * int(np.prod([steps[k].lengths[-1] for k in tile.other_splits]))
            out.append((x3, regs))
    return out


def test_fill_prefers_register_tiles_of_whole_vectors(monkeypatch):
    """With the stub's 8-lane vectors (16 registers): x.3 is 8 (56 is above the 32 lanes
    vectorized) in at least VECTOR_TILE_PROB of the samples, with 8 to 12 accumulators in
    most of those; with the preference off, both far less often."""
    policy = make_policy(_conv())
    tiles = _tiles(policy, 60, 0)
    assert np.mean([x3 == 8 for x3, _ in tiles]) >= 0.4
    assert np.mean([x3 == 8 and 8 <= regs <= 12 for x3, regs in tiles]) >= 0.35
    monkeypatch.setattr(VT, "VECTOR_TILE_PROB", 1.0)
    forced = _tiles(policy, 20, 1)
    assert {x3 for x3, _ in forced} == {8} and np.mean([8 <= r <= 12 for _, r in forced]) > 0.9
    monkeypatch.setattr(VT, "VECTOR_TILE_PROB", 0.0)
    uniform = _tiles(policy, 60, 2)
    assert np.mean([x3 == 8 for x3, _ in uniform]) < 0.3
    assert np.mean([x3 == 8 and 8 <= regs <= 12 for x3, regs in uniform]) < 0.1
    assert len({x3 for x3, _ in uniform}) > 3


def test_tiled_stage_vectorizes_up_to_four_registers():
    """matmul 64x64x64 with 64-byte vectors: a tiled innermost loop of 32 or 64 lanes is
    vectorized (4 registers of 16 floats), and nothing wider than 64."""
    policy = make_policy(W.matmul(64, 64, 64))
    policy.task = replace(policy.task, hardware_params=replace(policy.task.hardware_params, vector_unit_bytes=64))
    assert IP.tiled_vectorize_limit(policy, "float32") == 64
    rng = np.random.default_rng(5)
    seen = set()
    for sketch in generate_sketches(policy):
        for _ in range(30):
            state = InitVectorization().apply(policy, InitFillTileSize().apply(policy, sketch, rng), rng)
            for st in state.stages:
                if st.iters and st.iters[-1].annotation == "vectorize":
                    seen.add(st.iters[-1].const_extent)
    assert seen & {32, 64} and max(seen) <= 64


def test_sampled_conv_population_lowers():
    """The sampler still gives distinct states that lower, with the preference in place."""
    policy = make_policy(_conv())
    pop = sample_init_population(policy, generate_sketches(policy), 12, np.random.default_rng(4))
    assert len(pop) == 12


def test_tail_schemes_cover_the_axis_with_little_waste():
    schemes = VT.tail_schemes(1024, 3, 6)
    assert (9, 19, 6) in schemes and (1, 1, 3) in schemes
    for *outer, inner in schemes:
        assert 2 <= inner <= 6 and 1024 % inner != 0
        covered = int(np.prod(outer)) * inner * -(-1024 // (int(np.prod(outer)) * inner))
        assert 1024 <= covered <= 1024 * (1 + VT.MAX_TAIL_WASTE)
    assert VT.tail_schemes(1024, 1, 12) == ((3,), (5,), (6,), (7,), (9,), (10,), (11,), (12,))
    assert VT.tail_schemes(64, 2, 4) == ((1, 3), (2, 3), (11, 3), (22, 3))  # 66 rows; 4 divides 64
    assert VT.tail_schemes(8, 2, 8) == ()  # no length wastes at most 1/32 of 8


def _tail(steps, k):
    p = int(np.prod(steps[k].lengths))
    return steps[k].extent % p != 0


def test_register_tiles_with_a_tail_build_and_match_numpy(monkeypatch):
    """matmul 200x64x48 (200 rows: 6, 7, 12 ... do not divide it): with TAIL_TILE_PROB and
    VECTOR_TILE_PROB at 1, the register tile's row length comes from tail_schemes in part of
    the samples, within the register budget; such states build (loop partitioning removes the
    guard from the main part) and agree with numpy."""
    import scheduler_core as sc
    from scheduler_core.search.search_task import Schedule

    monkeypatch.setattr(VT, "VECTOR_TILE_PROB", 1.0)
    monkeypatch.setattr(VT, "TAIL_TILE_PROB", 1.0)
    args = W.matmul(200, 64, 48)
    policy = make_policy(args)
    lanes = vector_lanes(policy.task.hardware_params.vector_unit_bytes, "float32")
    budget = vector_registers(policy.task.hardware_params.vector_unit_bytes) * 3 // 4
    rng = np.random.default_rng(3)
    with_tail = []
    for sketch in generate_sketches(policy):
        (tile,) = register_tiles(sketch)
        for _ in range(12):
            state = InitFillTileSize().apply(policy, sketch, rng)
            steps = state.transform_steps
            if any(_tail(steps, k) for k in tile.other_splits):
                regs = row_registers(steps[tile.vector_split].lengths[-1], lanes) * \
                    int(np.prod([steps[k].lengths[-1] for k in tile.other_splits]))
                assert regs <= budget
                with_tail.append(state)
    assert len(with_tail) >= 6
    a = np.random.default_rng(0).standard_normal((200, 48)).astype("float32")
    b = np.random.default_rng(1).standard_normal((48, 64)).astype("float32")
    for state in with_tail[:3]:
        f = sc.build(Schedule(state), args, "llvm")
        out = np.zeros((200, 64), np.float32)
        f(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
