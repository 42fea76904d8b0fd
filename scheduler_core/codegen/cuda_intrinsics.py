"""The CUDA names of the math intrinsics: the one place the CUDA printer reads them.

    CUDA_MATH       intrinsic -> C math function of double (the float version appends "f")
    CUDA_FAST_MATH  float32 intrinsic -> its approximate hardware version (``__expf``, ...),
                    used only with ``attrs["fast_math"]``

The names are those of the CUDA Math API and the CUDA C Programming Guide ("Intrinsic
Functions"); TVM's ``src/target/source/intrin_rule_cuda.cc`` maps its intrinsics the same way.
"""

from __future__ import annotations

from scheduler_core.ir.intrinsics import INTRINSIC_TABLE

__all__ = ["CUDA_MATH", "CUDA_FAST_MATH"]

# The columns ``cuda`` and ``cuda_fast`` of the one intrinsic table (scheduler_core/ir/intrinsics.py).
CUDA_MATH = {row.name: row.cuda for row in INTRINSIC_TABLE if row.cuda is not None}
CUDA_FAST_MATH = {row.name: row.cuda_fast for row in INTRINSIC_TABLE if row.cuda_fast is not None}
