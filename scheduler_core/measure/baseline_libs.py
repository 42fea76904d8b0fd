"""The two libraries a baseline is written in, behind one interface (``baseline.py`` uses it).

    NumpyLib      numpy: ufuncs, ``as_strided`` views, einsum with its contraction path planned once
    torch_lib()   the same for torch (CPU tensors), plus ``functional`` and ``module`` for the
                  library calls of the torch baseline (``F.conv2d``, ``torch.addmm``); ImportError
                  without torch (the optional extra ``.[torch]``)

Each has ``name``, the tables ``BINARY``, ``CMP``, ``CALL`` and ``REDUCE`` (node name -> the
library's function; None where it has none) and the operations the op builder needs: ``view``
(a strided view in element strides), ``einsum``, ``matmul``, ``pad``, ``where``, ``cast``,
``full``, ``broadcast``, ``reduce``, ``contiguous``, ``const``, ``from_numpy``, ``to_numpy``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NumpyLib", "torch_lib"]


class NumpyLib:
    name = "numpy"
    BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
              "min": np.minimum, "max": np.maximum, "pow": np.power,
              "floordiv": np.floor_divide, "floormod": np.mod}
    CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}
    CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
            "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": None, "floor": np.floor, "ceil": np.ceil,
            "sin": np.sin, "cos": np.cos, "rsqrt": lambda x: 1 / np.sqrt(x), "round": np.round,
            "exp2": np.exp2, "log2": np.log2, "log10": np.log10, "fabs": np.abs}
    REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}

    @staticmethod
    def view(arr, shape, strides_elems, offset_elems):
        base = arr.reshape(-1)[offset_elems:] if offset_elems else arr.reshape(-1)
        item = arr.itemsize
        return np.lib.stride_tricks.as_strided(base, shape, [s * item for s in strides_elems], writeable=False)

    @staticmethod
    def contiguous(x):
        return np.ascontiguousarray(x)

    @staticmethod
    def einsum(spec, a, b, _paths: dict = {}):  # noqa: B006 - the contraction path of each spec and shapes
        key = (spec, a.shape, b.shape)
        path = _paths.get(key)
        if path is None:  # planned once: einsum's optimizer costs ~100 us a call
            path = _paths[key] = np.einsum_path(spec, a, b, optimize="optimal")[0]
        return np.einsum(spec, a, b, optimize=path)

    @staticmethod
    def matmul(a, b):
        return a @ b

    @staticmethod
    def const(value, dtype):
        return np.array(value, dtype)

    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)

    @staticmethod
    def cast(x, dtype):
        return np.asarray(x).astype(dtype)

    @staticmethod
    def full(shape, value, like):
        return np.full(shape, value, like.dtype)

    @staticmethod
    def broadcast(x, shape):
        return np.broadcast_to(x, shape)

    @staticmethod
    def reduce(fn, x, axes):
        return fn(x, axis=tuple(axes))

    @staticmethod
    def pad(x, pads, fill):
        return np.pad(x, pads, constant_values=fill)

    @staticmethod
    def from_numpy(a):
        return a

    @staticmethod
    def to_numpy(x):
        return np.asarray(x)


def torch_lib():
    import torch  # the optional extra .[torch]; only for this baseline
    import torch.nn.functional as F

    class TorchLib:
        name = "torch"
        BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide,
                  "min": torch.minimum, "max": torch.maximum, "pow": torch.pow,
                  "floordiv": torch.floor_divide, "floormod": torch.remainder}
        CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
        CALL = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "tanh": torch.tanh, "abs": torch.abs,
                "sigmoid": torch.sigmoid, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
                "sin": torch.sin, "cos": torch.cos, "rsqrt": torch.rsqrt, "round": torch.round,
                "exp2": torch.exp2, "log2": torch.log2, "log10": torch.log10, "fabs": torch.abs}
        REDUCE = {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "prod": None}
        functional = F
        module = torch

        @staticmethod
        def view(arr, shape, strides_elems, offset_elems):
            return torch.as_strided(arr, shape, strides_elems, offset_elems)

        @staticmethod
        def contiguous(x):
            return x.contiguous()

        @staticmethod
        def einsum(spec, a, b):
            return torch.einsum(spec, a, b)

        @staticmethod
        def matmul(a, b):
            return a @ b

        @staticmethod
        def const(value, dtype):
            return torch.tensor(value, dtype=getattr(torch, dtype))

        @staticmethod
        def where(c, a, b):
            return torch.where(c, a, b)

        @staticmethod
        def cast(x, dtype):
            return x.to(getattr(torch, dtype))

        @staticmethod
        def full(shape, value, like):
            return torch.full(shape, value, dtype=like.dtype)

        @staticmethod
        def broadcast(x, shape):
            return torch.broadcast_to(x, shape)

        @staticmethod
        def reduce(fn, x, axes):
            return fn(x, dim=tuple(axes))

        @staticmethod
        def pad(x, pads, fill):
            return F.pad(x, [p for lo_hi in reversed(pads) for p in lo_hi], value=fill)

        @staticmethod
        def from_numpy(a):
            return torch.from_numpy(np.ascontiguousarray(a))

        @staticmethod
        def to_numpy(x):
            return x.numpy()

    return TorchLib
