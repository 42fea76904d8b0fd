"""Floor 1: scalar expressions and the lowered loop program.

    expr          immutable expression nodes, constructors, their text form
    expr_functor  traversal and copy-on-change rewriting of expressions
    simplify      constant folding and algebraic simplification
    bound         interval arithmetic and div/mod simplification (bound inference)
    tir           the loop program (For, Store, Allocate, ..., PrimFunc) and its text form
"""
