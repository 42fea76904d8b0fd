"""Model importers: a framework's model -> a Graph of fused tensor programs (TVM's ``relay.frontend``).

    from scheduler_core import frontend
    graph = frontend.from_pytorch(module, example_inputs)     # needs the extra .[torch]

``ops`` holds the tensor-expression definitions of the operators and ``fusion`` the graph
builder that fuses elementwise consumers into their producer; neither needs torch.  Only
``pytorch`` (the importer) and ``torch_handlers`` (its operator table) import torch; they
load on first use of ``from_pytorch``, so importing this package works without torch.
"""

from __future__ import annotations

from typing import Any

from .fusion import GraphBuilder, View

__all__ = ["from_pytorch", "GraphBuilder", "View"]


def __getattr__(name: str) -> Any:
    if name == "from_pytorch":
        import importlib  # deferred: torch is the optional extra .[torch]
        return importlib.import_module("scheduler_core.frontend.pytorch").from_pytorch
    raise AttributeError(f"module 'scheduler_core.frontend' has no attribute {name!r}")
