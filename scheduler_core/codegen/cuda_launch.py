"""The launch description of a CUDA program: what a runtime needs to run its source.

    kernel-form PrimFunc --launch_description--> {"params", "scalar_params", "intermediates",
        "kernels": [{"symbol", "grid", "block", "shared_bytes", "args", ...}]} --launch_json--> text

The host side of TVM's ``SplitHostDevice`` / ``LowerDeviceKernelLaunch``
(``src/tir/transforms/lower_device_kernel_launch.cc``): per kernel in launch order its
symbol in :func:`cuda_codegen.cuda_source`'s text, grid and block (ints, or expression
strings of the scalar params), shared bytes (and how many of them are dynamic shared memory,
which the launch must ask for), and where each argument comes from.
"""

from __future__ import annotations

import json

from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T

from .cuda_codegen import print_kernel
from .cuda_expr import STATUS_SYMBOL
from .cuda_kernels import dim_value, program_kernels
from .cuda_names import assign_symbols

__all__ = ["launch_description", "launch_json"]


def _json_dim(d) -> int | str:
    return d if isinstance(d, int) else E.expr_str(d)


def launch_description(func: T.PrimFunc) -> dict:
    """What a runtime needs to run the source of :func:`cuda_source`: the function's buffer and
    scalar parameters, the intermediate global buffers to allocate, and per kernel (in launch
    order) its symbol, grid, block, ``shared_bytes`` (all its shared buffers),
    ``dynamic_shared_bytes`` (0, or the dynamic shared memory the launch must ask for when
    ``shared_bytes`` exceeds the 48 KiB of static shared memory) and arguments.  ``grid``/``block``
    entries are ints, or expression strings of the scalar params.  ``status_symbol``: the name of
    the ``__device__`` uint32 status word the kernels set bits of (bit 2: a gathered index was out
    of range and read as 0), to be cleared before the launches and read after them; None when
    the kernels have no run-time check."""
    kernels, intermediates = program_kernels(func)
    assign_symbols(kernels)
    helpers: set = set()
    for k in kernels:  # the C type of each scalar argument (an int32 host value may need 64 bits)
        print_kernel(k, func, bool(func.attrs.get("fast_math")), helpers, set())
    params = list(func.params)

    def buf_json(b: T.Buffer) -> dict:
        return {"name": b.name, "dtype": b.dtype, "shape": [_json_dim(dim_value(x)) for x in b.shape]}

    out_kernels = []
    for k in kernels:
        args: list = []
        for b in k.buffers:
            if b in params:
                args.append({"kind": "param", "index": params.index(b), "name": b.name})
            else:
                args.append({"kind": "intermediate", "index": intermediates.index(b), "name": b.name})
        for v, dt in zip(k.scalars, k.param_types):
            if v in func.scalar_params:
                args.append({"kind": "scalar", "index": list(func.scalar_params).index(v), "name": v.name,
                             "dtype": dt})
            else:  # a host let or loop variable: the runtime evaluates it
                args.append({"kind": "host", "name": v.name, "dtype": dt})
        launch = k.launch
        out_kernels.append({
            "name": launch.get("name", k.name),
            "symbol": k.symbol,
            "grid": list(launch.get("grid", [_json_dim(d) for d in k.grid])),
            "block": list(launch.get("block", [_json_dim(d) for d in k.block])),
            "shared_bytes": launch.get("shared_bytes", k.shared_bytes),
            "dynamic_shared_bytes": launch.get("dynamic_shared_bytes", k.dynamic_shared_bytes),
            "params": list(launch.get("params", [b.name for b in k.buffers] + [v.name for v in k.scalars])),
            "args": args,
        })
    return {
        "name": func.name,
        "params": [buf_json(b) for b in params],
        "scalar_params": [{"name": v.name, "dtype": v.dtype} for v in func.scalar_params],
        "intermediates": [buf_json(b) for b in intermediates],
        "fast_math": bool(func.attrs.get("fast_math")),
        "kernels": out_kernels,
        # the __device__ uint32 the kernels set bits of (2: a gathered index was out of range), or None
        "status_symbol": STATUS_SYMBOL if "checked" in helpers else None,
    }


def launch_json(func: T.PrimFunc) -> str:
    """:func:`launch_description` as JSON text."""
    return json.dumps(launch_description(func), indent=1)
