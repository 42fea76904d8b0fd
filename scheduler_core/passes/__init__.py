"""Passes over the lowered loop program that run before code generation.

    lowered PrimFunc --unroll_loops--> --vectorize_loops--> codegen
"""
from .unroll import map_stmt_exprs, substitute_stmt, unroll_loops
from .vectorize import vectorize_loops

__all__ = ["map_stmt_exprs", "substitute_stmt", "unroll_loops", "vectorize_loops"]
