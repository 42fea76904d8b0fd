"""Register tiles of multi-level-tiled stages: vector-friendly lengths that fit the registers.

    sketch --register_tiles--> [RegisterTile: the splits whose innermost pieces are the
                                stage's innermost loops (its register tile), the vectorized one]
    InitFillTileSize: in a share VECTOR_TILE_PROB of the samples, the vectorized loop's
                      length from vector_tile_lengths and the tile's other lengths drawn
                      until its accumulators fit (MIN_ACCUMULATORS to 3/4 of the registers)

InitVectorization vectorizes the innermost loop of a tiled stage (the innermost piece of
the last spatial axis, ``x.3`` of a conv2d's "SSRSRS" tiling), and the loops after the
last reduction loop (``f.3 y.3 x.3``) are the register tile: its accumulators stay in
vector registers while the reduction runs.  Ansor draws every length uniformly from the
factorizations of its axis and leaves the rest to the cost model, which has no data in
the first round of a search: for a row of 56, 1, 2, 7, 14 or 28 lanes come as often as
8, and the tile's channel and row lengths as often make 1 accumulator (no overlap of the
FMA latency) as 60 (spills).  On a sample of conv2d 1x64x56x56 states, every one of the
fastest had a multiple of 8 lanes and 8 to 24 vector accumulators.  Here part of the
samples take such a tile; the rest stay uniform, so every tiling remains reachable, and
MutateTileSize moves lengths as before.

Tiles with a tail.  On a 16-register AVX2 host the classic matmul microkernels are 6 rows x
2 vectors and 4 rows x 3 vectors (12 accumulators): neither 6 nor 24 divides 1024, so a
sampler of divisors never draws them.  In a share TAIL_TILE_PROB (off by default, see there)
of the register-tile draws one of the tile's other (non-vector) splits gets an innermost length L that need not divide
its axis, with the outer lengths a factorization of ceil(extent / L), so the split covers
ceil(extent / L) * L positions (at most MAX_TAIL_WASTE more than the axis) and the
``likely`` guard of the tail is removed from the main part of the loop by the loop
partitioning pass (``passes/loop_partition.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import ScheduleError
from scheduler_core.ir.expr import dtype_bits
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import SplitStep

from .random_pick import pick
from .split_factors import factorization_schemes, factors_of

VECTOR_TILE_PROB = 0.5  # share of samples whose register tile is drawn vector-friendly
MIN_VECTOR_UNIT = 4  # an axis that allows fewer power-of-two lanes than this gets no preference
# Vector accumulators of a register tile: at least the FMAs in flight (2 pipes x 4 cycles of
# latency), at most 3/4 of the vector registers (the rest hold the loaded operands).
MIN_ACCUMULATORS = 8
TILE_TRIES = 32  # draws of the tile's other lengths before giving up on the register budget
# Share of register-tile draws where one non-vector length may leave a tail.  Off by default:
# among the 8 W1 states of each kind the pretrained model ranked highest in a 2048-state first
# population (2-core Zen 3, loaded), the tail tiles ran at a median 0.81x numpy and the others
# at 0.92x (best 1.02x vs 1.10x); the model never saw a tail tile in its training records.  Set
# it (e.g. 0.5) to search them; whether a whole search gains has not been measured yet.
TAIL_TILE_PROB = 0.0
MAX_TAIL_WASTE = 1 / 32  # extra positions a tail split may cover, as a share of the axis

_TILES = BoundedCache(256)  # id(state) -> its RegisterTiles (the state is kept)


@dataclass(frozen=True)
class RegisterTile:
    """The register tile of one multi-level-tiled stage of a sketch.

    stage: the stage's name; dtype: its output dtype.
    vector_split: index in the sketch's steps of the split of unknown lengths whose
    innermost piece is the stage's innermost loop (a spatial loop).
    other_splits: the same for the other loops of the tile (the spatial loops after the
    stage's last reduction loop); ``fixed`` is the product of the extents of the tile's
    loops that no such split made (1 for a sketch of Ansor's tiling).
    has_reduce: whether the stage has a reduction loop (else there are no accumulators).
    """

    stage: str
    dtype: str
    vector_split: int
    other_splits: tuple
    fixed: int
    has_reduce: bool


def register_tiles(state) -> list:
    """The RegisterTile of every stage of ``state`` whose innermost loop is the innermost
    piece of a split of unknown lengths in ``state``'s history.

    Found by replaying the steps from the DAG (a sketch has few; the replay stops at an
    rfactor, which needs the lengths), cached by the state's identity (InitFillTileSize
    asks once per sample of the same sketch).
    """
    return _TILES.get_or_make(id(state), lambda: _register_tiles(state), keep=(state,))


def _register_tiles(state) -> list:
    """:func:`register_tiles` without the cache."""
    pieces: dict = {}  # (stage name, innermost piece name) -> step index (a replayed
    # cache_write makes a new op: stages are matched by name, unique in a state)
    s = State.from_dag(state.dag)
    for k, step in enumerate(state.transform_steps):
        try:
            s = step.apply(s)
        except ScheduleError:  # an rfactor after a split of unknown lengths: no replay past it
            break
        if isinstance(step, SplitStep) and any(ln is None for ln in step.lengths):
            st = s.stages[step.stage_id]
            pieces[(st.name, st.iters[step.iter_id + len(step.lengths)].name)] = k
    found = []
    for st in state.stages:
        if not st.iters or st.iters[-1].kind != "spatial" or (st.name, st.iters[-1].name) not in pieces:
            continue
        first = len(st.iters)
        while first > 0 and st.iters[first - 1].kind == "spatial":
            first -= 1
        others, fixed = [], 1
        for it in st.iters[first:-1]:
            k = pieces.get((st.name, it.name))
            if k is not None:
                others.append(k)
            else:
                fixed *= it.const_extent if it.const_extent is not None else 0
        found.append(RegisterTile(st.name, st.op.output(0).dtype, pieces[(st.name, st.iters[-1].name)],
                                  tuple(others), fixed, first > 0))
    return found


def vector_lanes(vector_unit_bytes: int, dtype: str) -> int:
    """Lanes of ``dtype`` in one vector register of ``vector_unit_bytes`` bytes (>= 1)."""
    return max(1, vector_unit_bytes * 8 // max(dtype_bits(dtype), 1))


def vector_registers(vector_unit_bytes: int) -> int:
    """Architectural vector registers: 32 with 64-byte vectors (AVX-512), else 16 (x86)."""
    return 32 if vector_unit_bytes >= 64 else 16


def vector_tile_lengths(extent: int, lanes: int, max_length: int) -> tuple:
    """The innermost tile lengths of an axis of ``extent`` that fill whole vectors: the
    divisors of ``extent`` from half a register up to ``max_length`` that are multiples of
    ``unit``, the widest power of two <= ``lanes`` that divides ``extent`` (56 with 16
    lanes: unit 8 -> (8,) below 16, (8, 56) below 64; 28: unit 4 -> (28,) below 64).
    Empty when ``unit`` < MIN_VECTOR_UNIT."""
    unit = 1
    while unit * 2 <= lanes and extent % (unit * 2) == 0:
        unit *= 2
    if unit < MIN_VECTOR_UNIT:
        return ()
    return tuple(d for d in factors_of(extent) if d % unit == 0 and max(unit, lanes // 2) <= d <= max_length)


def row_registers(length: int, lanes: int) -> int:
    """Vector registers of one row of ``length`` lanes cut into power-of-two vectors (the
    vectorize pass): 28 with 16 lanes -> 16 + 8 + 4 -> 3."""
    return sum(max(1, (1 << b) // lanes) for b in range(length.bit_length()) if length >> b & 1)


def tail_schemes(extent: int, n_lengths: int, max_innermost: int) -> tuple:
    """Split lengths (``n_lengths`` of them, outermost first) whose innermost length ``L`` (2
    to ``max_innermost``) does not divide ``extent``: the outer lengths are a factorization of
    ``ceil(extent / L)``, so the split covers ``ceil(extent / L) * L`` positions; only the
    ``L`` whose extra positions are at most MAX_TAIL_WASTE of ``extent``.  ``tail_schemes(1024,
    3, 6)`` holds ``(9, 19, 6)`` (1026 rows) and ``(1, 1, 3)``.  Empty when none qualifies."""
    out: list = []
    for length in range(2, max_innermost + 1):
        quotient = -(-extent // length)
        if extent % length == 0 or (quotient * length - extent) > extent * MAX_TAIL_WASTE:
            continue
        if n_lengths == 1:
            out.append((length,))
        else:
            out.extend(sc + (length,) for sc in factorization_schemes(quotient, n_lengths - 1, quotient))
    return tuple(out)


def sample_register_tile(tile: RegisterTile, steps: list, vector_unit_bytes: int, max_length: int,
                         max_inner: int, rng) -> dict:
    """``{step index: lengths}`` for ``tile``: with probability VECTOR_TILE_PROB, a vectorized
    length from :func:`vector_tile_lengths` and (for a tile with a reduction) the other
    lengths drawn, up to TILE_TRIES times, until the tile needs MIN_ACCUMULATORS to 3/4 of
    the vector registers (kept only when a draw fits); else ``{}`` (uniform lengths).  The
    generator is drawn only when the axis allows vector-friendly lengths."""
    lanes = vector_lanes(vector_unit_bytes, tile.dtype)
    vstep = steps[tile.vector_split]
    good = vector_tile_lengths(vstep.extent, lanes, max_length)
    if not good or rng.random() >= VECTOR_TILE_PROB:
        return {}
    vschemes = [sc for sc in factorization_schemes(vstep.extent, len(vstep.lengths), max_inner) if sc[-1] in good]
    if not vschemes:
        return {}
    vs = pick(rng, vschemes)
    out = {tile.vector_split: vs}
    if not tile.has_reduce or not tile.other_splits or tile.fixed == 0:
        return out
    per_row = row_registers(vs[-1], lanes) * tile.fixed
    budget = vector_registers(vector_unit_bytes) * 3 // 4
    options = [factorization_schemes(steps[k].extent, len(steps[k].lengths), max_inner) for k in tile.other_splits]
    if TAIL_TILE_PROB > 0 and rng.random() < TAIL_TILE_PROB:  # one of the other lengths may leave a tail
        which = int(rng.integers(len(options)))
        step = steps[tile.other_splits[which]]
        tails = tail_schemes(step.extent, len(step.lengths), min(max_inner, budget // per_row))
        if tails:
            options[which] = tails
    for _ in range(TILE_TRIES):
        draw = [pick(rng, opts) for opts in options]
        regs = per_row
        for sc in draw:
            regs *= sc[-1]
        if MIN_ACCUMULATORS <= regs <= budget:
            out.update(zip(tile.other_splits, draw))
            break
    return out


__all__ = ["VECTOR_TILE_PROB", "MIN_VECTOR_UNIT", "MIN_ACCUMULATORS", "TILE_TRIES", "TAIL_TILE_PROB",
           "MAX_TAIL_WASTE", "RegisterTile", "tail_schemes",
           "register_tiles", "vector_lanes", "vector_registers", "vector_tile_lengths", "row_registers",
           "sample_register_tile"]
