"""Passes over the lowered loop program that run before code generation.

    lowered PrimFunc --partition_loops--> --unroll_loops--> --vectorize_loops--> codegen
"""
from .loop_partition import partition_loops
from .unroll import SMALL_LOOP_STEPS, substitute_stmt, unroll_loops
from .vectorize import vectorize_loops

__all__ = ["SMALL_LOOP_STEPS", "partition_loops", "substitute_stmt", "unroll_loops", "vectorize_loops"]
