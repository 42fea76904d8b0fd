"""Floor 8: from a schedule (or a record) to a program: lower, passes once, codegen, Module.

    build_module  build() and lower() with the passes, as tvm.build / tvm.lower
    program       one path from a record's steps to a program (replay, layout rewrite, lower, build)
    bounds        proof that every load/store of a lowered program stays inside its buffer
"""
