"""Floor 0: what every other floor may import.

    errors         the library's exception hierarchy (SchedulerCoreError and its kinds)
    target         TargetKind, Target (a parsed "llvm -mcpu=..." / "cuda" string) and HardwareParams
    llvm_cpu       what LLVM knows of CPUs: host, CPU and feature names, vector widths, target machines
    gpu_spec       GPU thread tags and CUDA launch limits
    build_config   BuildConfig: the codegen options a build carries (TVM's PassContext config)
    context_stack  ContextStack: "the current X" of ``with`` scopes, per thread
    bounded_cache  BoundedCache: the one bounded (LRU) cache, by value or by identity
    c_names        any tensor or op name made into a C identifier (generated code, C headers)
"""
