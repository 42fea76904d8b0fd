"""Model importers: a framework's model -> a Graph of fused tensor programs (TVM's ``relay.frontend``).

    from scheduler_core import frontend
    graph = frontend.from_pytorch(module, example_inputs)     # needs the extra .[torch]
    graph = frontend.from_exported_program(torch.export.export(module, inputs))
    graph = frontend.from_onnx("model.onnx")                  # needs onnx and torch

``ops`` holds the tensor-expression definitions of the operators and ``fusion`` the graph
builder that fuses elementwise consumers into their producer; neither needs torch.  Only
``pytorch`` (the importers), ``onnx_importer`` (ONNX nodes -> torch operators, then the same
walk) and ``torch_handlers`` (the operator tables: torch functions and modules, ATen) import torch; they load
on first use of ``from_pytorch``, ``from_exported_program`` or ``from_onnx``, so importing
this package works without torch.
"""

from __future__ import annotations

from typing import Any

from .fusion import GraphBuilder, View

__all__ = ["from_pytorch", "from_exported_program", "from_onnx", "GraphBuilder", "View"]


def __getattr__(name: str) -> Any:
    if name in ("from_pytorch", "from_exported_program"):
        import importlib  # deferred: torch is the optional extra .[torch]
        return getattr(importlib.import_module("scheduler_core.frontend.pytorch"), name)
    if name == "from_onnx":
        import importlib
        return importlib.import_module("scheduler_core.frontend.onnx_importer").from_onnx
    raise AttributeError(f"module 'scheduler_core.frontend' has no attribute {name!r}")
