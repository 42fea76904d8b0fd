"""CPU code generation: lowered ``PrimFunc`` -> LLVM IR -> JIT-compiled function.

    PrimFunc --compile_primfunc(func, "llvm -mcpu=...")--> CompiledFunction
"""
from .llvm_codegen import (
    META_PREFIX,
    CompiledFunction,
    build_module,
    compile_primfunc,
    meta_json,
)
from .parallel import load_libgomp

__all__ = ["CompiledFunction", "META_PREFIX", "build_module", "compile_primfunc",
           "load_libgomp", "meta_json"]
