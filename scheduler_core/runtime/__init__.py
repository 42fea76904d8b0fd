"""Runtime: arrays, devices, calling and timing compiled functions, export and load.

    nd.array(numpy) --> NDArray --Module(*args)--> results written in place
    CompiledFunction --Module.from_compiled--> Module --save / export_library--> .o .ll .s / .so + .h
    .so / .o / .ll --load_module--> Module
    model.tar.gz (GraphModule.export_library) --load_model--> LoadedModel(*inputs) -> outputs

TVM's spellings: ``nd.array``, ``nd.empty``, ``cpu()``, ``cuda()``, ``device()``,
``context()``, ``Module.time_evaluator``, ``Module.export_library``, ``load_module``;
``load_model`` loads a whole model exported with its weights and C executor.
"""

from . import ndarray
from . import ndarray as nd
from .device import Device, context, cpu, cuda, device, gpu
from .loader import load_module
from .model_loader import LoadedModel, load_model
from .module import Module
from .ndarray import NDArray, array, empty
from .signature import ParamSpec, Signature
from .timer import ProfileResult

__all__ = [
    "nd", "ndarray", "Device", "cpu", "cuda", "gpu", "device", "context", "NDArray", "array", "empty",
    "Module", "load_module", "load_model", "LoadedModel", "ProfileResult", "Signature", "ParamSpec",
]
