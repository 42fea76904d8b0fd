"""Compile a model (a Graph) into one callable: TVM's ``relay.build`` + graph executor.

    lib = sc.build_graph(graph, target="llvm", params={"w0": w0, ...})
    out = lib(x)                                   # numpy in, numpy out (one array per output)
    lib.time_evaluator(number=100)(x).mean         # seconds per model run
    lib.schedule_source("linear0")                 # "manual" | "record" | "default"

Each tensor program is compiled once per distinct (workload_key, schedule): two calls of
identical functions share one compiled module, as Ansor's task extraction merges them.  Its
schedule is, in order:

1. ``"manual"``: the function's own ``state`` (set by hand, or by ``meta_schedule.tune_tir``);
2. ``"record"``: the best record of its workload_key for the target in the active
   :class:`~scheduler_core.graph.dispatch.ApplyHistoryBest` contexts;
3. ``"default"``: :func:`default_state`, a small untiled schedule (below).

Every program goes through ``driver.program.program_from_state`` (layout rewrite, lowering,
the passes, the bounds check), the one path from a schedule to a program.  The executor
allocates every intermediate tensor once, at build time, and reuses it on every run; a
library function receives NDArrays that share the executor's memory (``torch.from_dlpack``
works on them) and writes its outputs in place.  Intermediates share memory when their
lifetimes do not overlap (:func:`plan_memory`; ``lib.memory_plan`` reports the bytes).  A
GraphModule is not reentrant: run it
from one thread at a time.  CPU (``llvm``) targets only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core.base.c_names import c_identifiers
from scheduler_core.base.errors import BuildError, InvalidWorkloadError, LoweringError, ScheduleError
from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.tensor import PlaceholderOp
from scheduler_core.driver.program import ENTRY_NAME, Program, program_from_state
from scheduler_core.ir.simplify import const_value
from scheduler_core.runtime.timer import ProfileResult, check_timing_args, time_calls
from scheduler_core.schedule.layout_rewrite import has_layout_free_placeholders
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.search.search_policy import state_key

from . import dispatch
from .export import EXECUTOR_SYMBOLS, export_model
from .ir import Graph, as_ndarray, bind_inputs, get_func

SCHEDULE_SOURCES = ("manual", "record", "default")
PARALLEL_MIN_ITERATIONS = 1 << 20  # below this many loop iterations a stage runs serially


def default_state(dag, target: Any = "llvm") -> State:
    """The schedule a function gets when it has neither its own nor a record: per compute stage,

    - the innermost loop, when it is a multiple of the vector width (``vector_unit_bytes`` /
      element size) and at least that long, is split by the width and its inner part
      vectorized: the spatial loop of an elementwise stage, or the reduction loop of a
      reduction (which the vectorize pass turns into vector accumulators and one
      horizontal sum, as the search's initial population does);
    - a stage of at least ``PARALLEL_MIN_ITERATIONS`` loop iterations fuses its outer
      spatial loops and runs the fused loop in parallel.

    No tiling, no cache stages, no inlining: TVM's auto-scheduler has no such fallback (an
    untuned task keeps its naive loops); this one is meant to be correct and not slow, not
    fast.  Measured on seed 002's 1x784 by 128x784 ``linear0`` (2-core machine, shared): naive
    0.21 ms, this default 0.014 ms, the same with the parallel outer loop 0.028 ms (hence the
    high threshold).  Stages with symbolic extents keep their naive loops.
    """
    t = Target.parse(target)
    hw = HardwareParams.for_target(t)
    sch = Schedule(State.from_dag(dag))
    for op in [st.op for st in sch.state.stages if st.op_type == "compute"]:
        handle = sch[op]
        iters = handle.stage.iters
        extents = [it.const_extent for it in iters]
        spatial = [it.name for it in iters if it.kind == "spatial"]
        if not spatial or any(e is None for e in extents):
            continue
        lanes = hw.vector_unit_bytes // max(np.dtype(op.output(0).dtype).itemsize, 1)
        inner = iters[-1]
        outer = list(spatial)
        if lanes > 1 and inner.const_extent >= lanes and inner.const_extent % lanes == 0:
            if inner.const_extent > lanes:
                io, ii = handle.split(inner.name, factor=lanes)
                handle.vectorize(ii)
                if inner.kind == "spatial":
                    outer = spatial[:-1] + [io.var.name]
            else:
                handle.vectorize(inner.name)
                if inner.kind == "spatial":
                    outer = spatial[:-1]
        outer_ext = math.prod(handle.stage.iterator(n).const_extent for n in outer) if outer else 0
        if hw.num_cores > 1 and math.prod(extents) >= PARALLEL_MIN_ITERATIONS and outer_ext >= 2:
            fused = handle.fuse(*outer) if len(outer) > 1 else outer[0]
            handle.parallel(fused)
    return sch.state


@dataclass(frozen=True)
class CompiledFunction:
    """One compiled tensor program of a model.

    name : the first function of the graph compiled to it; workload_key : its DAG's key
    source : "manual", "record" or "default" (how its schedule was chosen)
    program : driver.program.Program (the state with layouts, the lowered PrimFunc, the Module);
        it copies its layout-free placeholders to the tuned layout on every call
    record_cost_s : the record's measured seconds for source "record", else None
    pre_transformed : the same schedule as a Program that reads its layout-free placeholders
        already in the tuned layout (``Program.layout_transforms``), or None when the schedule
        rewrites no layout; the executor runs it for the calls whose weights are bound
        constants, after packing each weight once (:attr:`packers`)
    packers : one Program per ``pre_transformed.layout_transforms`` entry: ``packer(source,
        packed)`` writes the tuned layout of a weight (run once per weight, at build time)
    """

    name: str
    workload_key: str
    source: str
    program: Program
    record_cost_s: float | None = None
    pre_transformed: Program | None = None
    packers: tuple = ()

    @property
    def lowered(self) -> str:
        """The lowered loop program's text."""
        return self.program.lowered


def _compile(func, t: Target, symbol: str = ENTRY_NAME, packed_symbol: str = ENTRY_NAME) -> CompiledFunction:
    """Choose the schedule of PrimFunction ``func`` (module docstring) and build it, its entry
    named ``symbol`` (the one reading packed weights ``packed_symbol``)."""
    cost = None
    if func.state is not None:
        source, state = "manual", func.state
    else:
        ctx = dispatch.current()
        found = ctx.query_record(func.workload_key, t, func.dag) if ctx is not None else None
        if found is not None:
            source, (state, cost) = "record", found
        else:
            source, state = "default", None
    if state is not None:
        try:
            program = program_from_state(state, t, name=symbol)
            pre, packers = _pre_transformed(state, t, packed_symbol)
            (pre or program).build()
        except (ScheduleError, LoweringError, BuildError) as e:
            raise BuildError(f"function {func.name!r}: its {source} schedule does not build: {e}") from e
        return CompiledFunction(func.name, func.workload_key, source, program, cost, pre, packers)
    try:
        program = program_from_state(default_state(func.dag, t), t, name=symbol)
        program.build()
    except (ScheduleError, LoweringError, BuildError):  # the naive loop nest always lowers
        program = program_from_state(State.from_dag(func.dag), t, name=symbol)
        program.build()
    return CompiledFunction(func.name, func.workload_key, "default", program, None)


def _pre_transformed(state: State, t: Target, symbol: str = ENTRY_NAME) -> tuple:
    """``(Program reading pre-transformed weights, its packers)`` of a schedule whose layout
    rewrite applies to some layout-free placeholder, else ``(None, ())``."""
    if not has_layout_free_placeholders(state.dag):
        return None, ()
    pre = program_from_state(state, t, name=symbol, pre_transformed=True)
    if not pre.layout_transforms:
        return None, ()
    packers = []
    for lt in pre.layout_transforms:
        packer = program_from_state(default_state(ComputeDAG([lt.source, lt.layout]), t), t)
        packer.build()
        packers.append(packer)
    return pre, tuple(packers)


def build_graph(graph: Graph, target: Any = "llvm", params: Mapping[str, Any] | None = None,
                pack_weights: bool = True, check_library: bool = True) -> GraphModule:
    """Compile every tensor program of ``graph`` for ``target`` and return the model's executor.

    graph : Graph (scheduler_core.graph.ir)
    target : str or Target, a CPU target (``"llvm"``, ``"llvm -mcpu=skylake -num-cores=4"``)
    params : optional ``{param name: array}`` bound before building (relay.build's ``params``)
    pack_weights : bool, pack each bound weight that a tuned schedule reads in a layout of its
        own once, here, instead of on every call (:class:`CompiledFunction`); False keeps the
        per-call copy (the program as the tuning measured it)
    check_library : bool, look up every library function now (an unregistered one raises
        here); False defers the lookup to the first run (a module built only to be exported,
        e.g. by a worker that has not imported the model's frontend)

    Each compiled program's C entry is named after the first function compiled to it
    (``base.c_names.c_identifiers``: ``dense0``; ``dense0_packed`` for the variant reading
    packed weights), distinct within the model and from :data:`EXECUTOR_SYMBOLS`: the names
    its exported library (:meth:`GraphModule.export_library`) declares.

    Raises BuildError for a non-CPU target or a function whose chosen schedule does not build,
    InvalidWorkloadError for a bad ``graph`` or ``params``, InvalidTargetError for a target
    the parser rejects.  The schedule of each function: module docstring.
    """
    if not isinstance(graph, Graph):
        raise InvalidWorkloadError(f"build_graph needs a Graph, got {type(graph).__name__}", "graph")
    t = Target.parse(target)
    if t.is_gpu:
        raise BuildError(f"build_graph compiles for CPU (llvm) targets only, not {str(t)!r}; "
                         f"build a single tensor program for cuda with sc.build")
    if params:
        graph = graph.bind_params(params)
    for name, _ in graph.bound.items():
        if name not in {p.name for p in graph.params}:
            raise InvalidWorkloadError(f"{name!r} is bound but is not a param", f"bound.{name}")
    for c in graph.calls:
        if c.kind == "library" and check_library:
            get_func(c.func)  # fail now, not at the first run
    first: dict = {}  # compile key -> the first function compiled to it
    key_of: dict = {}
    for _, _call, func in graph.tir_calls():
        if func.name not in key_of:
            key = (func.workload_key, "manual", state_key(func.state)) if func.state is not None \
                else (func.workload_key, "auto", "")
            key_of[func.name] = key
            first.setdefault(key, func)
    names = [f.name for f in first.values()]
    symbols = c_identifiers([*EXECUTOR_SYMBOLS, *names, *(n + "_packed" for n in names)])[len(EXECUTOR_SYMBOLS):]
    by_key = {key: _compile(func, t, sym, packed)
              for (key, func), sym, packed in zip(first.items(), symbols, symbols[len(names):])}
    compiled = {name: by_key[key] for name, key in key_of.items()}
    return GraphModule(graph, t, compiled, pack_weights)


def call_arg_names(call, dag: ComputeDAG) -> list:
    """The graph values a tir ``call`` passes as its function's C arguments, in the DAG's tensor
    order: a placeholder takes the next call argument, a computed tensor the next call output."""
    ins, outs = iter(call.args), iter(o.name for o in call.outputs)
    return [next(ins) if isinstance(t.op, PlaceholderOp) else next(outs) for t in dag.tensors]


@dataclass(frozen=True)
class PlannedCall:
    """One call as the executor runs it: ``program`` (None for a library call) and its C
    arguments, each ``("value", name)`` (a graph value) or ``("packed", key)`` (a weight packed
    at build time, :attr:`GraphModule.packed_weights`)."""

    call: Any
    program: Program | None
    args: tuple


MEMORY_ALIGN = 64  # bytes: every planned buffer starts on a cache line


@dataclass
class MemoryPlan:
    """Where each call output of a graph lives: one arena shared by the intermediates, at
    offsets chosen from their lifetimes (liveness-based reuse, as TVM's graph memory planning).

    ``storage``: the byte size of each block (block 0 the arena of the intermediates, then
    one block per graph output); ``assignment``: value name -> (block, byte offset, shape,
    dtype).  A value lives from the call that writes it to the last call that reads it; two
    values whose lifetimes overlap never overlap in memory (so a call's outputs never alias
    its inputs).  Offsets are placed greedily by size, largest first, each in the smallest gap
    left between the values it overlaps in time, else above them (the "greedy by size" offset
    planner of Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net Inference",
    2020, used by TFLite's arena planner), every offset a multiple of :data:`MEMORY_ALIGN`.
    ``planned_bytes``: the sum of the blocks (what the executor allocates for call outputs);
    ``unplanned_bytes``: one buffer per value; ``peak_live_bytes``: the most bytes of call
    outputs alive at once (no plan needs fewer).
    """

    storage: list
    assignment: dict
    unplanned_bytes: int
    peak_live_bytes: int

    @property
    def planned_bytes(self) -> int:
        return int(sum(self.storage))

    def buffers(self) -> dict:
        """value name -> a C-contiguous numpy array viewing its place in its block (zero-filled)."""
        blocks = []
        for nbytes in self.storage:
            raw = np.zeros(nbytes + MEMORY_ALIGN, np.uint8)
            start = -raw.ctypes.data % MEMORY_ALIGN
            blocks.append(raw[start:start + nbytes])
        out = {}
        for name, (block, offset, shape, dtype) in self.assignment.items():
            dt = np.dtype(dtype)
            n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            out[name] = blocks[block][offset:offset + n].view(dt).reshape(shape)
        return out


def plan_memory(graph: Graph) -> MemoryPlan:
    """The :class:`MemoryPlan` of ``graph``'s call outputs (calls run in order)."""
    outputs = set(graph.outputs)
    last_use: dict = {}
    for i, call in enumerate(graph.calls):
        for a in call.args:
            last_use[a] = i
    values = []  # (bytes, first call, last call, name, shape, dtype) of every call output
    for i, call in enumerate(graph.calls):
        for o in call.outputs:
            nbytes = max(1, int(np.prod(o.type.shape, dtype=np.int64)) * np.dtype(o.type.dtype).itemsize)
            last = len(graph.calls) - 1 if o.name in outputs else max(i, last_use.get(o.name, i))
            values.append((nbytes, i, last, o.name, tuple(o.type.shape), str(o.type.dtype)))
    live = [0] * max(1, len(graph.calls))
    for nbytes, first, last, *_ in values:
        for i in range(first, last + 1):
            live[i] += nbytes
    storage = [0]
    assignment: dict = {}
    placed: list = []  # (offset, aligned bytes, first, last) in the arena
    for nbytes, first, last, name, shape, dtype in sorted(values, key=lambda v: (-v[0], v[1], v[3])):
        if name in outputs:  # a graph output keeps a block of its own (the caller gets a copy of it)
            assignment[name] = (len(storage), 0, shape, dtype)
            storage.append(nbytes)
            continue
        size = -(-nbytes // MEMORY_ALIGN) * MEMORY_ALIGN
        busy = sorted((off, n) for off, n, f, l in placed if f <= last and first <= l)
        offset, best_gap, top = None, None, 0
        for off, n in busy:
            gap = off - top
            if gap >= size and (best_gap is None or gap < best_gap):
                offset, best_gap = top, gap
            top = max(top, off + n)
        if offset is None:
            offset = top
        placed.append((offset, size, first, last))
        assignment[name] = (0, offset, shape, dtype)
        storage[0] = max(storage[0], offset + size)
    return MemoryPlan(storage, assignment, sum(v[0] for v in values), max(live))


class GraphModule:
    """A compiled model (TVM's graph executor module).  Build it with :func:`build_graph`.

    ``lib(*args)``: args are the graph's inputs then its unbound params, numpy arrays or
    NDArrays of the declared shapes and dtypes; returns one numpy array for a graph with
    one output, else a list (fresh copies: later runs do not change them).  Raises
    InvalidWorkloadError naming a wrong argument, RuntimeArgumentError/DeviceRuntimeError
    from a compiled function.
    """

    def __init__(self, graph: Graph, target: Target, compiled: Mapping[str, CompiledFunction],
                 pack_weights: bool = True):
        self.graph = graph
        self.target = target
        self.functions = dict(compiled)
        # every value has one fixed buffer: the runtime arguments are copied into theirs, so each
        # compiled function is bound to its buffers once (Module.prebind) instead of on every call
        runtime_args = (*graph.inputs, *graph.free_params)
        self._arg_buffers = {v.name: np.zeros(v.type.shape, v.type.dtype) for v in runtime_args}
        self.memory_plan = plan_memory(graph)
        self._buffers = self.memory_plan.buffers()
        self._values = {**{k: np.ascontiguousarray(v) for k, v in graph.bound.items()},
                        **self._arg_buffers, **self._buffers}
        self._wrapped = {name: as_ndarray(a) for name, a in self._values.items()}
        self.pack_weights = pack_weights
        self._packed: dict = {}  # (weight name, packer id) -> the weight in a tuned layout
        self.pre_transformed_calls = 0  # calls that read weights packed at build time
        self._pre_transformed_names: set = set()
        self.plan: list = []  # PlannedCall per call, in order: what export_library writes as C
        self._steps = [self._step(c) for c in graph.calls]

    @property
    def packed_weights(self) -> dict:
        """``{key: array}``: the weights packed at build time (the keys of :attr:`plan`'s
        ``("packed", key)`` arguments)."""
        return dict(self._packed)

    def values(self) -> dict:
        """``{value name: numpy array}``: the executor's buffer of every value (bound weights,
        runtime arguments, planned call outputs)."""
        return dict(self._values)

    def export_library(self, path: Any = None, entry_info: Mapping[str, dict] | None = None) -> bytes:
        """Write the model as one ``.tar.gz`` (model.so with the weights and ``model_run``,
        model.h, graph.json) to ``path`` (when given) and return its bytes: TVM's
        ``lib.export_library``.  ``entry_info``: extra fields of a function's ``entry`` in
        graph.json (``{function name: {...}}``).  See :mod:`scheduler_core.graph.export`;
        raises BuildError when compiling or linking fails."""
        return export_model(self, path, entry_info)

    @property
    def packed_weight_bytes(self) -> int:
        """Bytes of the weights packed at build time (copies in the tuned layouts)."""
        return int(sum(a.nbytes for a in self._packed.values()))

    def _step(self, call) -> Callable[[], None]:
        if call.kind == "library":
            self.plan.append(PlannedCall(call, None, ()))
            nds = [self._wrapped[a] for a in call.args] + [self._wrapped[o.name] for o in call.outputs]
            found: list = []

            def run_library(name=call.func, nds=nds, found=found) -> None:
                if not found:
                    found.append(get_func(name))  # build_graph looked it up unless check_library=False
                found[0](*nds)
            return run_library
        cf = self.functions[call.func]
        names = call_arg_names(call, self.graph.functions[call.func].dag)
        arrays = [self._values[n] for n in names]
        refs: list = [("value", n) for n in names]
        pre = cf.pre_transformed
        if pre is not None and self.pack_weights:
            position = {id(x.op): k for k, x in enumerate(pre.state.dag.tensors)}
            slots = [position[id(lt.source.op)] for lt in pre.layout_transforms]
            if all(names[k] in self.graph.bound for k in slots):  # constant weights: pack each once
                for k, lt, packer in zip(slots, pre.layout_transforms, cf.packers):
                    arrays[k] = self._pack(names[k], lt, packer)
                    refs[k] = ("packed", (names[k], id(packer)))
                self.pre_transformed_calls += 1
                self._pre_transformed_names.add(call.func)
                self.plan.append(PlannedCall(call, pre, tuple(refs)))
                return pre.build().prebind(*arrays)
        self.plan.append(PlannedCall(call, cf.program, tuple(refs)))
        return cf.program.build().prebind(*arrays)

    def _pack(self, name: str, lt, packer: Program) -> np.ndarray:
        key = (name, id(packer))
        if key not in self._packed:
            out = np.empty(tuple(const_value(d) for d in lt.packed.shape), lt.packed.dtype)
            packer.build()(self._values[name], out)
            self._packed[key] = out
        return self._packed[key]

    # -- running ---------------------------------------------------------------
    def _bind(self, args: tuple) -> None:
        for name, arr in bind_inputs(self.graph, args).items():
            if name in self._arg_buffers:
                np.copyto(self._arg_buffers[name], arr)

    def _execute(self) -> int:
        for step in self._steps:
            step()
        return 0

    def run(self, *args) -> list:
        """Run the model; returns every output as a fresh numpy array (a list, in output order)."""
        self._bind(args)
        self._execute()
        return [np.array(self._values[o], copy=True) for o in self.graph.outputs]

    def __call__(self, *args):
        outs = self.run(*args)
        return outs[0] if len(outs) == 1 else outs

    def time_evaluator(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0.0) -> Callable:
        """``f(*args) -> ProfileResult`` (seconds per model run; ``.mean``, ``.median``, ``.results``).

        TVM's ``time_evaluator`` (``runtime.timer.time_calls``): one warm-up run, then ``repeat``
        measurements of ``number`` back-to-back runs (``number`` grows until one measurement
        lasts ``min_repeat_ms``).  Arguments are checked once, outside the timed loop.
        Raises ValueError for number/repeat < 1 or min_repeat_ms < 0.
        """
        check_timing_args(number, repeat, min_repeat_ms)

        def evaluator(*args) -> ProfileResult:
            self._bind(args)
            return time_calls(self._execute, (), number, repeat, min_repeat_ms)
        return evaluator

    def run_individual(self, *args, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0.0) -> list:
        """Seconds per run of each call, in call order (TVM's ``GraphModuleDebug.run_individual``).

        The model runs once with ``args`` so that every buffer holds its real values; then each
        call is timed alone, as :meth:`time_evaluator` times the whole model (one warm-up,
        ``repeat`` measurements of ``number`` runs, the median kept).  Their sum is close to a
        whole run, less the caches the calls share.  Raises as :meth:`time_evaluator`.
        """
        check_timing_args(number, repeat, min_repeat_ms)
        self._bind(args)
        self._execute()
        return [time_calls(lambda step=step: step() or 0, (), number, repeat, min_repeat_ms).median
                for step in self._steps]

    def benchmark(self, *args, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0.0) -> ProfileResult:
        """``time_evaluator(number, repeat, min_repeat_ms)(*args)`` (TVM's ``GraphModule.benchmark``)."""
        return self.time_evaluator(number, repeat, min_repeat_ms)(*args)

    # -- what was built --------------------------------------------------------
    def _function(self, name: str) -> CompiledFunction:
        if name not in self.functions:
            raise InvalidWorkloadError(f"no tensor program named {name!r} in this model "
                                       f"(have {sorted(self.functions)})")
        return self.functions[name]

    def schedule_source(self, name: str) -> str:
        """How function ``name`` got its schedule: "manual", "record" or "default"."""
        return self._function(name).source

    @property
    def schedule_sources(self) -> dict:
        """``{function name: "manual" | "record" | "default"}``."""
        return {k: cf.source for k, cf in self.functions.items()}

    def lowered(self, name: str) -> str:
        """The lowered loop program of function ``name`` (the one reading packed weights when its
        calls got their weights packed at build time)."""
        cf = self._function(name)
        if name in self._pre_transformed_names and cf.pre_transformed is not None:
            return cf.pre_transformed.lowered
        return cf.lowered

    @property
    def num_modules(self) -> int:
        """How many programs were compiled (identical functions share one)."""
        return len({id(cf) for cf in self.functions.values()})

    def __repr__(self) -> str:
        return (f"GraphModule({len(self.graph.calls)} calls, {self.num_modules} compiled programs, "
                f"target={str(self.target)!r}, schedules={self.schedule_sources})")
