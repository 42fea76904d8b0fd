"""Import a PyTorch model as a Graph (TVM's ``relay.frontend.from_pytorch``).

    graph = from_pytorch(module, example_inputs)
        torch.fx.symbolic_trace(module.eval())        the operators, in execution order
        an fx Interpreter run on example_inputs       every value's shape and dtype (shapes
                                                      are specialized, as TVM's importer does)
        each operator -> its handler (torch_handlers.py) -> te (ops.py), fused (fusion.py);
        weights -> bound graph params; anything else -> a library call into torch, so every
        model runs

Operators lowered to tensor expressions: linear / matmul / bmm / addmm, conv2d (stride,
padding, dilation, groups, depthwise), batch norm (folded into the preceding conv for
inference, else a per-channel scale and shift), relu / gelu (erf or tanh form) / silu /
sigmoid / tanh / relu6 / exp / sqrt / rsqrt / neg, clamp / clip / hardtanh (constant bounds),
add / sub / mul / div / pow / maximum / minimum (broadcasting, tensor or scalar), softmax
and log-softmax over the last axis, layer norm, sum / mean / amax / amin over axes, max /
average pooling 2d, adaptive average pooling to a divisor size, and the layout operators
view / reshape / flatten / permute / transpose / squeeze / unsqueeze / expand
and split / chunk / unbind / slice with step 1 (index remapping in the consumer, no copy),
linear layers sharing their input combined into one (``parallel_dense``: q/k/v projections),
contiguous / dropout / identity (no-ops in eval mode), ``getitem`` of tuples.  Values that
do not depend on the model's inputs are folded into weights; integers (``x.size(0)``) become
constants.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx as fx
from torch import export as torch_export
from torch import nn

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.graph.ir import Graph, register_func

from . import ops
from .fusion import GraphBuilder, Group, Stage, View, sanitize
from .parallel_dense import combine_parallel_dense
from .torch_handlers import ATEN, FUNCTIONS, METHODS, MODULES, Unsupported

__all__ = ["from_pytorch", "from_exported_program", "import_fx_graph", "without_triton"]

_LIBRARY_IDS = itertools.count()
_EXPORT_FUNCTIONS = {**FUNCTIONS, **ATEN}  # torch.export graphs hold ATen operators and getitem


def from_pytorch(module: nn.Module, example_inputs: Any, conv_layout: str = "NHWC") -> Graph:
    """The Graph of ``module`` (put in eval mode) traced with ``torch.fx`` on ``example_inputs``.

    module : a ``torch.nn.Module`` that ``torch.fx.symbolic_trace`` can trace (no data-dependent
        Python control flow)
    example_inputs : a tensor or a tuple/list of tensors, the model's positional inputs; their
        shapes and dtypes become the graph inputs' (float32 for the lowered operators)
    Returns a Graph whose inputs are the model's inputs (named as in ``forward``), whose params
    are the weights (after batch-norm folding; linear weights stored transposed, (in, out))
    bound with the module's values, and whose outputs are the module's tensor outputs
    (flattened when it returns a tuple).  Operators outside the list in this module's
    docstring become library calls ``"torch.<op>.<n>"`` running torch on the arrays.
    A module that ``torch.fx`` cannot trace (most Hugging Face models) is imported through
    ``torch.export`` instead (:func:`from_exported_program`).  Raises InvalidWorkloadError
    when the module can be neither traced nor exported, cannot run on the inputs, or when an
    input is not a tensor.

    conv_layout : ``"NHWC"`` (default): convolutions, pooling and the elementwise functions
        between them compute and store their values in NHWC, with the output channels as the
        innermost axis, which the search vectorizes (``fusion.GraphBuilder``; TVM's
        ConvertLayout, which its auto-scheduler tutorials apply for CPUs and GPUs); the graph's
        inputs and outputs keep the model's layout.  ``"NCHW"`` keeps the model's own layout
        everywhere.  Raises InvalidWorkloadError for another value.
    """
    if not isinstance(module, nn.Module):
        raise InvalidWorkloadError(f"from_pytorch takes a torch.nn.Module, got {type(module).__name__}")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    for k, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise InvalidWorkloadError(f"example input {k} is a {type(x).__name__}, not a torch.Tensor",
                                       f"example_inputs[{k}]")
    module = module.eval()
    try:
        gm = fx.symbolic_trace(module)
    except Exception as fx_error:  # torch raises many kinds of error for untraceable code
        try:  # most Hugging Face models: torch.export is the tracer they support
            return from_exported_program(module, inputs, conv_layout)
        except InvalidWorkloadError as export_error:
            raise InvalidWorkloadError(f"torch.fx cannot trace {type(module).__name__}: {fx_error}; "
                                       f"and {export_error}") from fx_error
    return import_fx_graph(gm, inputs, type(module).__name__, conv_layout=conv_layout)


def import_fx_graph(gm: fx.GraphModule, inputs: tuple, what: str, functions: dict | None = None,
                    conv_layout: str = "NHWC", combine_dense: bool = True) -> Graph:
    """The Graph of the fx graph ``gm`` run on ``inputs`` (every node's value recorded), each node
    through ``functions`` (default: the fx table), convolutions in ``conv_layout`` (as in
    :func:`from_pytorch`).  The one walk of all three importers.  ``combine_dense``: first
    combine the linear layers that share an input into one (``parallel_dense``, in place on
    ``gm``: a transformer's q/k/v projections become one dense).
    Raises InvalidWorkloadError naming ``what`` when the graph fails on the inputs."""
    if combine_dense:
        combine_parallel_dense(gm)
    recorder = Recorder(gm)
    try:
        with torch.no_grad():
            recorder.run(*inputs)
    except Exception as e:
        raise InvalidWorkloadError(f"{what} fails on the example inputs: {e}") from e
    return TorchImporter(gm, recorder.values, functions=functions, conv_layout=conv_layout).run()


def from_exported_program(program: Any, example_inputs: Any = None, conv_layout: str = "NHWC") -> Graph:
    """The Graph of a ``torch.export`` program (TVM's ``relax.frontend.torch.from_exported_program``).

    program : a ``torch.export.ExportedProgram``, or a ``torch.nn.Module`` to export (put in
        eval mode) with ``example_inputs``
    example_inputs : a tensor or a tuple/list of tensors, the positional inputs; for an
        ExportedProgram, None uses the inputs it was exported with
    The program is functionalized (``run_decompositions`` with no decompositions: no in-place
    operators, the ATen operators kept whole), its parameters and buffers become the graph's
    weights, and each ATen operator goes through ``torch_handlers.ATEN`` (what it does not
    lower, e.g. ``aten.embedding`` or ``aten.scaled_dot_product_attention``, runs the ATen
    operator as a library call), as :func:`from_pytorch` does for fx graphs.  Inputs are
    named as the program's placeholders; ``conv_layout`` as in :func:`from_pytorch`.  Raises
    InvalidWorkloadError when the module cannot be exported or run, or an input is not a tensor.
    """
    with without_triton():
        return _from_exported_program(program, example_inputs, conv_layout)


@contextlib.contextmanager
def without_triton() -> Iterator[None]:
    """Run torch.export with the ``triton`` package hidden (unless it is loaded already).

    torch.export probes for triton, and importing it loads ``libtriton.so``, which carries its
    own copy of LLVM; with llvmlite's LLVM in the same process, a later JIT compile of ours
    can abort the process.  Hidden, the probe answers "no triton" (nothing on the CPU path
    needs it) and no second LLVM is loaded.
    """
    if "triton" in sys.modules:
        yield
        return
    sys.modules["triton"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        yield
    finally:
        if sys.modules.get("triton", 0) is None:
            del sys.modules["triton"]


def _from_exported_program(program: Any, example_inputs: Any, conv_layout: str) -> Graph:
    if isinstance(program, nn.Module):
        inputs = _tensor_inputs(example_inputs)
        try:
            ep = torch_export.export(program.eval(), inputs)
        except Exception as e:  # torch raises many kinds of error for unexportable code
            raise InvalidWorkloadError(f"torch.export cannot export {type(program).__name__}: "
                                       f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        name = type(program).__name__
    elif isinstance(program, torch_export.ExportedProgram):
        ep, name = program, "the exported program"
        if example_inputs is None:
            args, kwargs = getattr(ep, "example_inputs", None) or ((), {})
            if kwargs:
                raise InvalidWorkloadError("the exported program takes keyword inputs; pass example_inputs")
            example_inputs = args
        inputs = _tensor_inputs(example_inputs)
    else:
        raise InvalidWorkloadError("from_exported_program takes a torch.export.ExportedProgram or a "
                                   f"torch.nn.Module, got {type(program).__name__}")
    try:
        gm = ep.run_decompositions({}).module()
    except Exception as e:
        raise InvalidWorkloadError(f"cannot functionalize {name}: {e}") from e
    return import_fx_graph(gm, inputs, name, functions=_EXPORT_FUNCTIONS, conv_layout=conv_layout)


def _tensor_inputs(example_inputs: Any) -> tuple:
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    for k, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise InvalidWorkloadError(f"example input {k} is a {type(x).__name__}, not a torch.Tensor",
                                       f"example_inputs[{k}]")
    return inputs


class Recorder(fx.Interpreter):
    """Runs the traced module and keeps every node's value (for shapes, dtypes, constants)."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.values: dict = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n] = out.detach().clone() if isinstance(out, torch.Tensor) else out
        return out


def _has_tensor(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, (tuple, list)):
        return any(_has_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(_has_tensor(x) for x in v.values())
    return False


class TorchImporter:
    def __init__(self, gm: fx.GraphModule, values: dict, functions: dict | None = None,
                 conv_layout: str = "NHWC"):
        self.gm, self.values = gm, values
        self.functions = FUNCTIONS if functions is None else functions
        self.b = GraphBuilder(conv_layout)
        self.env: dict = {}
        self.dep: dict = {}
        self.module_params: dict = {}

    # -- the walk ------------------------------------------------------------------
    def run(self) -> Graph:
        outputs: list = []
        for node in self.gm.graph.nodes:
            if node.op == "output":
                outputs = self._outputs(node.args[0])
                continue
            val = self.values.get(node)
            # only tensors carry the inputs' data: a value made from shapes alone is a constant
            deps = [self.dep.get(a, False) and _has_tensor(self.values.get(a)) for a in node.all_input_nodes]
            self.dep[node] = node.op == "placeholder" or any(deps)
            if node.op == "placeholder":
                if not isinstance(val, torch.Tensor):
                    raise InvalidWorkloadError(f"model input {node.name!r} is not a tensor")
                self.env[node] = self.b.add_input(node.name, tuple(val.shape), _dtype(val))
            elif not _has_tensor(val):
                self.env[node] = val  # shapes and other Python values are compile-time constants
            elif not self.dep[node]:
                self.env[node] = self._constant(node, val)
            else:
                self.env[node] = self._convert(node, val)
                self._rebind_in_place(node)
        return self.b.finish(outputs)

    def _rebind_in_place(self, node: fx.Node) -> None:
        """After an in-place operator (``x.add_(y)``, ``relu(inplace=True)``) later readers of ``x``
        see the result, as in torch."""
        inplace = node.kwargs.get("inplace") is True or (
            node.op == "call_method" and node.target.endswith("_") and not node.target.startswith("__"))
        if node.op == "call_module":
            inplace = inplace or getattr(self.gm.get_submodule(node.target), "inplace", False) is True
        first = node.args[0] if node.args else None
        if not inplace or not isinstance(first, fx.Node) or not self.dep.get(first):
            return
        out = self.env[node]
        if isinstance(out, Group) and out.closed is None:
            out.uses += len(first.users) - 1  # readers of x after this node read the result too
        self.env[first] = out

    def _outputs(self, out: Any) -> list:
        flat = out if isinstance(out, (tuple, list)) else list(out.values()) if isinstance(out, dict) else [out]
        names = []
        for k, o in enumerate(flat):
            v = self.env.get(o) if isinstance(o, fx.Node) else None
            if isinstance(v, (tuple, list)):
                names += [self.b.output(x, f"output{k}_{j}") for j, x in enumerate(v)]
            elif isinstance(v, (str, View, Group)):
                names.append(self.b.output(v, f"output{k}" if len(flat) > 1 else "output"))
            else:
                raise InvalidWorkloadError(f"model output {k} is not a tensor ({type(v).__name__})", f"outputs[{k}]")
        return names

    def _constant(self, node: fx.Node, val: Any, name: str = "") -> Any:
        """A value that does not depend on the model's inputs: its tensors become weights."""
        name = name or (node.target if node.op == "get_attr" else node.name)
        if isinstance(val, torch.Tensor):
            return self.b.add_param(name, val.detach().cpu().numpy())
        if isinstance(val, (tuple, list)):
            return type(val)(self._constant(node, v, f"{name}.{k}") for k, v in enumerate(val))
        if isinstance(val, dict):
            return {k: self._constant(node, v, f"{name}.{k}") for k, v in val.items()}
        return val

    def arg(self, a: Any) -> Any:
        """A node's argument with every fx Node replaced by its converted value."""
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (tuple, list)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(v) for k, v in a.items()}
        return a

    def _convert(self, node: fx.Node, val: Any) -> Any:
        args, kwargs = self.arg(node.args), self.arg(node.kwargs)
        handler: Callable | None = None
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            handler = MODULES.get(type(mod))
            args = (mod, *args)
        elif node.op == "call_function":
            handler = self.functions.get(node.target)
        elif node.op == "call_method":
            handler = METHODS.get(node.target)
        if handler is not None and (isinstance(val, torch.Tensor) or node.target is operator.getitem
                                    or (isinstance(val, (tuple, list)) and val and isinstance(val[0], torch.Tensor))):
            try:
                out = handler(self, node, val, *args, **kwargs)
            except (Unsupported, InvalidWorkloadError, KeyError, IndexError, TypeError, ValueError):
                out = None  # arguments this lowering does not cover: torch runs the operator
            if out is not None:
                return out
        return self._library(node, val)

    # -- helpers for handlers ------------------------------------------------------
    def uses(self, node: fx.Node) -> int:
        return len(node.users)

    def tensor(self, v: Any) -> bool:
        return isinstance(v, (str, View, Group))

    def shape(self, v: Any) -> tuple:
        return tuple(v.shape) if isinstance(v, (View, Group)) else self.b.shape_of(v)

    def f32(self, val: torch.Tensor, *vs: Any) -> None:
        if val.dtype != torch.float32 or any(self.tensor(v) and _vdtype(self.b, v) != "float32" for v in vs):
            raise Unsupported

    def module_param(self, mod: nn.Module, node: fx.Node, attr: str, transform: Callable | None = None,
                     suffix: str = "") -> str | None:
        t = getattr(mod, attr, None)
        if t is None:
            return None
        key = (id(mod), attr, suffix)
        if key not in self.module_params:
            arr = t.detach().cpu().numpy()
            self.module_params[key] = self.b.add_param(f"{node.target}.{attr}{suffix}",
                                                       transform(arr) if transform else arr)
        return self.module_params[key]

    def anchor(self, node: fx.Node, val: torch.Tensor, stage: Stage, bias: Any = None,
               bias_steps: tuple = ()) -> Group:
        """A fused function started by ``stage``, with an optional bias added in it."""
        g = self.b.anchor(stage, tuple(val.shape), uses=1)
        if bias is not None:
            bv = self.b.view(bias, *bias_steps) if bias_steps else bias
            g = self.b.elementwise(Stage("bias_add", ops.binary, [g, bv], [None, "bias"], {"kind": "add"}),
                                   tuple(val.shape))
        g.uses, g.name = self.uses(node), node.name
        return g

    def elementwise(self, node: fx.Node, val: torch.Tensor, stage: Stage) -> Group:
        g = self.b.elementwise(stage, tuple(val.shape), uses=self.uses(node))
        g.name = node.name
        return g

    def alias(self, node: fx.Node, v: Any) -> Any:
        """``node`` is a no-op on ``v`` (dropout in eval mode, contiguous): share the value."""
        if isinstance(v, Group) and v.closed is None:
            v.uses += self.uses(node) - 1
        return v

    def scalar_or(self, v: Any, other_shape: tuple, out_shape: tuple) -> Any:
        """A one-element weight becomes a Python number when that does not change the shape."""
        arr = self.b.param_array(v) if isinstance(v, (str, View)) else None
        if arr is not None and arr.size == 1 and other_shape == out_shape:
            return float(arr.reshape(()))
        return v

    # -- library fallback ----------------------------------------------------------
    def _library(self, node: fx.Node, val: Any) -> Any:
        tensors: list = []  # graph names passed to the call
        steps: list = []  # the layout view applied in torch to each

        def value(v: Any) -> Any:  # a converted value: graph tensors become slots
            if isinstance(v, Group):
                v = self.b.materialize(v, node.name)
            if isinstance(v, (str, View)):
                tensors.append(v.base if isinstance(v, View) else v)
                steps.append(v.steps if isinstance(v, View) else ())
                return _Slot(len(tensors) - 1)
            if isinstance(v, (tuple, list)):
                return type(v)(value(x) for x in v)
            return v

        def slot(a: Any) -> Any:  # an fx argument: nodes are looked up, literals kept
            if isinstance(a, fx.Node):
                return value(self.env[a])
            if isinstance(a, (tuple, list)):
                return type(a)(slot(x) for x in a)
            if isinstance(a, dict):
                return {k: slot(x) for k, x in a.items()}
            return a

        args, kwargs = slot(node.args), slot(node.kwargs)
        if node.op == "call_module":
            callee: Callable = self.gm.get_submodule(node.target)
            label = type(callee).__name__
        elif node.op == "call_method":
            method = node.target
            callee, label = (lambda obj, *a, **k: getattr(obj, method)(*a, **k)), method
        else:
            callee, label = node.target, getattr(node.target, "__name__", str(node.target))
        flat = list(val) if isinstance(val, (tuple, list)) else [val]
        if not all(isinstance(t, torch.Tensor) for t in flat):
            raise InvalidWorkloadError(f"operator {node.format_node()} returns a non-tensor value that "
                                       "depends on the model's inputs")
        name = f"torch.{sanitize(label)}.{next(_LIBRARY_IDS)}"
        mutates = node.kwargs.get("inplace") is True or getattr(callee, "inplace", False) is True or (
            node.op == "call_method" and label.endswith("_") and not label.startswith("__"))
        register_func(name, _torch_call(callee, args, kwargs, tuple(steps), len(tensors), mutates))
        outs = [(node.name if len(flat) == 1 else f"{node.name}.{k}", tuple(t.shape), _dtype(t))
                for k, t in enumerate(flat)]
        names = self.b.library(name, tensors, outs)
        return type(val)(names) if isinstance(val, (tuple, list)) else names[0]


class _Slot:
    def __init__(self, k: int):
        self.k = k


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _vdtype(b: GraphBuilder, v: Any) -> str:
    return v.dtype if isinstance(v, Group) else b.dtype_of(v)


def _apply_steps(t: torch.Tensor, steps: tuple) -> torch.Tensor:
    for kind, arg in steps:
        if kind == "slice":
            t = t.narrow(arg[0], arg[1], arg[2] - arg[1])
        else:
            t = t.reshape(arg) if kind == "reshape" else t.permute(*arg) if kind == "permute" else t.expand(*arg)
    return t


def _torch_call(callee: Callable, args: Any, kwargs: Any, steps: tuple, n_in: int, clone: bool) -> Callable:
    """The library function of one torch operator: ``f(*in_arrays, *out_arrays)`` fills the outputs
    (an in-place operator works on copies: the graph's values are never modified)."""
    def fill(v: Any, ins: list) -> Any:
        if isinstance(v, _Slot):
            return ins[v.k]
        if isinstance(v, (tuple, list)):
            return type(v)(fill(x, ins) for x in v)
        if isinstance(v, dict):
            return {k: fill(x, ins) for k, x in v.items()}
        return v

    def run(*arrays: Any) -> None:
        ins = [_apply_steps(torch.from_dlpack(a), s) for a, s in zip(arrays[:n_in], steps)]
        if clone:
            ins = [t.clone() for t in ins]
        with torch.no_grad():
            out = callee(*fill(args, ins), **fill(kwargs, ins))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for dst, src in zip(arrays[n_in:], outs):
            torch.from_dlpack(dst).copy_(src.reshape(tuple(dst.shape)))
    return run


