"""Floor 0: what every other floor may import.

    errors   the library's exception hierarchy (SchedulerCoreError and its kinds)
    target   Target (a parsed "llvm -mcpu=..." / "cuda" string) and HardwareParams
    c_names  any tensor or op name made into a C identifier (generated code, C headers)
"""
