"""Loading a whole-model artifact back: ``sc.runtime.load_model("model.tar.gz")(x)``.

    model.tar.gz (GraphModule.export_library, or GET /models/{id}/artifact)
      --unpack to a temporary directory--> model.so --dlopen (ctypes)--> model_run_with_workspace
      LoadedModel(*arrays) --checked against graph.json's "executor"--> one call into C --> outputs

Nothing is compiled: the library already holds the programs, the weights and the executor
(``scheduler_core.graph.export``).  The workspace is allocated once per LoadedModel and a
lock keeps one call at a time on it.  The library's parallel loops run on this process's
thread pool, as with :func:`load_module`.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import tarfile
import tempfile
import threading
from pathlib import Path

import numpy as np

from scheduler_core.base.errors import BuildError, RuntimeArgumentError, check_return_code
from scheduler_core.codegen import thread_pool

from .timer import ProfileResult, check_timing_args, time_calls

WORKSPACE_ALIGN = 64


class LoadedModel:
    """A model loaded from its artifact: ``model(*inputs)`` returns its output (a list when it
    has several).

    inputs / outputs : ``[{"name", "shape", "dtype"}]`` (graph.json's ``executor``): the graph's
    inputs, then its params that carry no weight in the library.  Arguments are numpy arrays
    (or anything ``np.asarray`` takes) of exactly those shapes and dtypes; results are fresh
    numpy arrays.  Raises RuntimeArgumentError naming a wrong argument, DeviceRuntimeError
    (IndexOutOfBoundsError) when the library returns a nonzero code.
    """

    def __init__(self, library: ctypes.CDLL, graph_json: dict):
        executor = graph_json["executor"]
        self.graph_json = graph_json
        self.inputs = list(executor["inputs"])
        self.outputs = list(executor["outputs"])
        self._lib = library
        self._run = library.model_run_with_workspace
        self._run.restype = ctypes.c_int32
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        nbytes = int(executor["workspace_bytes"])
        raw = np.zeros(nbytes + WORKSPACE_ALIGN, np.uint8)
        start = -raw.ctypes.data % WORKSPACE_ALIGN
        self._workspace = raw[start:start + max(nbytes, 1)]
        self._lock = threading.Lock()

    def _arrays(self, args: tuple) -> list:
        if len(args) != len(self.inputs):
            names = [s["name"] for s in self.inputs]
            raise RuntimeArgumentError(f"the model takes {len(self.inputs)} arguments {names}, got {len(args)}")
        out = []
        for k, (spec, a) in enumerate(zip(self.inputs, args)):
            arr = np.asarray(a)
            if arr.shape != tuple(spec["shape"]) or str(arr.dtype) != spec["dtype"]:
                raise RuntimeArgumentError(f"argument {k} ({spec['name']}): expected {spec['dtype']}"
                                           f"{list(spec['shape'])}, got {arr.dtype}{list(arr.shape)}")
            out.append(np.ascontiguousarray(arr))
        return out

    def _call(self, ins: list, outs: list) -> int:
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[a.ctypes.data for a in outs])
        with self._lock:
            return self._run(in_ptrs, out_ptrs, self._workspace.ctypes.data)

    def run(self, *args) -> list:
        """Run the model; every output as a fresh numpy array (a list, in output order)."""
        ins = self._arrays(args)
        outs = [np.empty(s["shape"], s["dtype"]) for s in self.outputs]
        check_return_code("model_run", self._call(ins, outs))
        return outs

    def __call__(self, *args):
        outs = self.run(*args)
        return outs[0] if len(outs) == 1 else outs

    def time_evaluator(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0.0):
        """``f(*args) -> ProfileResult``: seconds per model run (one warm-up, ``repeat``
        measurements of ``number`` runs), as ``GraphModule.time_evaluator``.  Raises
        ValueError for number/repeat < 1 or min_repeat_ms < 0."""
        check_timing_args(number, repeat, min_repeat_ms)

        def evaluator(*args) -> ProfileResult:
            ins = self._arrays(args)
            outs = [np.empty(s["shape"], s["dtype"]) for s in self.outputs]
            return time_calls(lambda: self._call(ins, outs), (), number, repeat, min_repeat_ms)
        return evaluator

    def __repr__(self) -> str:
        sig = ", ".join(f"{s['name']}: {s['dtype']}{s['shape']}" for s in self.inputs)
        return f"LoadedModel({sig}) -> {len(self.outputs)} output(s)"


def load_model(path: str | os.PathLike) -> LoadedModel:
    """Load a whole-model artifact (``model.tar.gz``: model.so, model.h, graph.json).

    Raises FileNotFoundError for a missing file; BuildError for a file that is not such an
    artifact, or a model without a C executor (it has library calls; graph.json's
    ``executor_missing`` says which); OSError-derived BuildError when the library cannot be
    loaded (another CPU, a missing libgomp).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model artifact: {path}")
    try:
        with tarfile.open(fileobj=io.BytesIO(path.read_bytes()), mode="r:gz") as tar:
            names = set(tar.getnames())
            if not {"graph.json", "model.so"} <= names:
                raise BuildError(f"{path}: not a model artifact (has {sorted(names)}; needs graph.json and model.so)")
            with tempfile.TemporaryDirectory(prefix="autosched_model_") as tmp:
                tar.extractall(tmp, members=[tar.getmember("graph.json"), tar.getmember("model.so")],
                               filter="data")
                graph_json = json.loads(Path(tmp, "graph.json").read_text())
                if not graph_json.get("executor"):
                    raise BuildError(f"{path}: the model has no C executor: "
                                     f"{graph_json.get('executor_missing') or 'graph.json names none'}")
                try:  # the library stays mapped after the directory is removed
                    library = ctypes.CDLL(str(Path(tmp, "model.so")))
                except OSError as err:
                    raise BuildError(f"cannot load {path}'s model.so: {err}") from err
    except (tarfile.TarError, ValueError, KeyError) as err:
        raise BuildError(f"{path}: not a readable model artifact: {type(err).__name__}: {err}") from None
    thread_pool.attach_library(library)
    return LoadedModel(library, graph_json)
