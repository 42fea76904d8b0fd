"""Tunables of the sketch search, with Ansor's names and defaults.

The search layer (``scheduler_core.search.search_policy``) imports
:class:`SketchPolicyParams` from here; the rules of this package read the fields
they need from ``policy.params``.  Defaults are those of TVM's
``auto_scheduler.SketchPolicy.DEFAULT_PARAMS`` (Ansor, OSDI'20, section 5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SketchPolicyParams:
    """All tunables of the sketch policy in one frozen object.

    population : int, the number of states kept in each generation of the
        evolutionary search (Ansor's ``evolutionary_search_population``).
    num_iters : int, the number of evolution generations per search round
        (``evolutionary_search_num_iters``).
    mutation_prob : float in [0, 1], the probability that a state of the next
        generation is a mutant rather than a copy (``evolutionary_search_mutation_prob``).
    eps_greedy : float in [0, 1], the fraction of each measurement batch picked at
        random instead of by the cost model.
    cpu_multi_level_tiling_structure : str, "S" = a spatial tile level, "R" = a
        reduction tile level, outermost first ("SSRSRS": i0 j0 i1 j1 k0 i2 j2 k1 i3 j3).
    gpu_multi_level_tiling_structure : str, the same for GPU targets.
    max_innermost_split_factor : int, the largest innermost tile length that
        InitFillTileSize / MutateTileSize may choose.
    max_vectorize_size : int, the largest number of lanes (the product of the fused
        innermost extents) InitVectorization vectorizes.
    disable_change_compute_location : bool, turn off InitChangeComputeLocation and
        MutateComputeLocation.
    sample_init_min_population : int, the fewest valid states the initial sampling
        must produce before the search goes on.
    sample_init_use_measured_ratio : float, the fraction of the initial population
        taken from the best measured states.
    retry_search_one_round_on_empty : int, how many times a round that found no new
        state to measure is retried.
    """

    population: int = 2048
    num_iters: int = 4
    mutation_prob: float = 0.85
    eps_greedy: float = 0.05
    cpu_multi_level_tiling_structure: str = "SSRSRS"
    gpu_multi_level_tiling_structure: str = "SSSRRSRS"
    max_innermost_split_factor: int = 64
    max_vectorize_size: int = 16
    disable_change_compute_location: bool = False
    sample_init_min_population: int = 50
    sample_init_use_measured_ratio: float = 0.2
    retry_search_one_round_on_empty: int = 1


__all__ = ["SketchPolicyParams"]
