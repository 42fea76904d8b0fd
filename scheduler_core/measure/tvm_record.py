"""TVM's auto_scheduler record lines (``"v": "v0.6"``): the pieces ``measure.record`` needs.

TVM v0.13 (``python/tvm/auto_scheduler/measure_record.py``, ``src/auto_scheduler/
measure_record.cc``) writes one JSON object per measurement::

    {"i": [[workload_key, target, hardware_params, target_host, layout_rewrite_option,
            task_input_names],
           [[], [step records...]]],
     "r": [[costs_s...], error_no, all_cost_s, timestamp],
     "v": "v0.6"}

- ``workload_key`` is a JSON list in a string: ``["<hash>", [shape], ...]`` for a task made
  from a DAG (one shape per tensor of the DAG, in the DAG's tensor order), or
  ``["func_name", args...]`` for a ``register_workload`` function.  Older TVM wrote fewer
  entries in the first list (2 to 6 are read).
- ``hardware_params``: ``[num_cores, vector_unit_bytes, cache_line_bytes,
  max_shared_memory_per_block, max_local_memory_per_block, max_threads_per_block,
  max_vthread_extent, warp_size]``.
- ``i[1]`` is TVM's State: its stages (always ``[]``) and its steps.  The step records are
  ours (``dataflow_step.step_from_record``): same names, same layouts, same annotation codes
  (TVM's IteratorAnnotation), except that TVM writes an unknown split extent as ``0`` where
  we write ``null``.
- A TVM line carries no DAG: :class:`TvmWorkloadResolver` finds it.
- TVM's target strings carry options our Target does not take (``-keys=cpu``,
  ``-link-params=0``, ``-max_num_threads=1024``, ...): :func:`target_from_tvm` drops them.

Where a TVM step means something else here (the layouts agree): FU of one iterator keeps its
name (TVM renames ``i`` to ``i@``), FU of spatial with reduce iterators or of no iterator is
refused; PR knows no ``debug_skip_region``; AN has no ``tensorize`` (11); SA needs a root
axis.  Read-only fields: ``target_host``, ``layout_rewrite_option`` and ``task_input_names``
are not used (our builder applies its own layout rewrite).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, RecordFormatError
from scheduler_core.base.gpu_spec import CUDA_DEFAULT_ARCH
from scheduler_core.base.target import CUDA_ARCHS, OPTION_KEYS, HardwareParams, Target, TargetKind
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.workload_registry import WORKLOAD_FUNC_REGISTRY, dag_of_registered
from scheduler_core.driver.backend import backend_of
from scheduler_core.ir.expr import expr_str
from scheduler_core.ir.simplify import const_value

TVM_RECORD_VERSION = "v0.6"
# TVM's LayoutRewriteOption: NO_REWRITE = 0, INSERT_TRANSFORM_STAGE = 1, REWRITE_FOR_PRE_TRANSFORMED = 2.
LAYOUT_REWRITE_NONE, LAYOUT_REWRITE_INSERT_TRANSFORM_STAGE = 0, 1
# TVM target options that name one of ours (TVM's cuda -max_num_threads is our -max_threads_per_block).
TVM_OPTION_ALIASES = {"max_num_threads": "max_threads_per_block"}
HARDWARE_PARAM_FIELDS = ("num_cores", "vector_unit_bytes", "cache_line_bytes", "max_shared_memory_per_block",
                         "max_local_memory_per_block", "max_threads_per_block", "max_vthread_extent", "warp_size")


class UnresolvedWorkloadError(RecordFormatError):
    """A TVM record's workload_key names no DAG this reader can find (see TvmWorkloadResolver)."""


# ---------------------------------------------------------------------------
# targets and hardware parameters
# ---------------------------------------------------------------------------

def target_from_tvm(text: str) -> str:
    """TVM's target string as one our Target parses: options our kind does not take are dropped.

    ``"llvm -keys=cpu -link-params=0 -mcpu=skylake-avx512"`` -> ``"llvm -mcpu=skylake-avx512"``;
    ``"cuda -keys=cuda,gpu -arch=sm_75 -max_num_threads=512 -thread_warp_size=32"`` ->
    ``"cuda -arch=sm_75 -max_threads_per_block=512"`` (TVM's ``-max_num_threads`` is our
    ``-max_threads_per_block``; a cuda limit equal to the arch's own is implied, so dropped).
    A kind we do not know, or a word that is not ``-key=value``, is left for
    ``Target.parse`` to reject with its message.
    """
    words = text.split()
    allowed = OPTION_KEYS.get(words[0]) if words else None
    if allowed is None:
        return text
    kept, given, aliased = [words[0]], set(), []
    for word in words[1:]:
        key, eq, value = word.partition("=")
        name = key.lstrip("-")
        if not key.startswith("-") or not eq:
            kept.append(word)
        elif name in allowed and name not in given:
            kept.append(f"-{name}={value}")
            given.add(name)
        elif TVM_OPTION_ALIASES.get(name) in allowed:
            aliased.append((TVM_OPTION_ALIASES[name], value))
    for name, value in aliased:
        if name not in given:
            kept.append(f"-{name}={value}")
            given.add(name)
    if words[0] == TargetKind.CUDA.value:  # TVM prints its cuda defaults (-max_num_threads=1024 ...): ours are implied
        arch = next((w.partition("=")[2] for w in kept if w.startswith("-arch=")), CUDA_DEFAULT_ARCH)
        threads, smem, _, warp, regs = CUDA_ARCHS.get(arch, (None,) * 5)
        implied = {f"-max_threads_per_block={threads}", f"-max_shared_memory_per_block={smem}",
                   f"-thread_warp_size={warp}", f"-registers_per_block={regs}"}
        kept = [w for w in kept if w not in implied]
    return " ".join(kept)


def hardware_params_to_tvm(hp: HardwareParams) -> list:
    """TVM's 8-entry hardware_params list of ``hp`` (see the module docstring)."""
    return [int(getattr(hp, f)) for f in HARDWARE_PARAM_FIELDS]


def hardware_params_from_tvm(target: Target, values: Sequence[int] | None) -> HardwareParams:
    """``HardwareParams.for_target(target)`` with TVM's 8 values (when given) in place."""
    base = HardwareParams.for_target(target)
    if values is None:
        return base
    return dataclasses.replace(base, **{f: int(v) for f, v in zip(HARDWARE_PARAM_FIELDS, values)})


def layout_rewrite_option(target: Target) -> int:
    """TVM's default LayoutRewriteOption of a task made outside Relay: INSERT_TRANSFORM_STAGE on
    llvm, NO_REWRITE otherwise (``LayoutRewriteOption.get_target_default``)."""
    return LAYOUT_REWRITE_INSERT_TRANSFORM_STAGE if backend_of(target).rewrites_layout else LAYOUT_REWRITE_NONE


# ---------------------------------------------------------------------------
# step records
# ---------------------------------------------------------------------------

def steps_from_tvm(steps: Sequence) -> list:
    """TVM's step records as ours: an ``"SP"`` extent of ``0`` (TVM's "unknown") becomes ``None``."""
    out = []
    for rec in steps:
        if isinstance(rec, list) and len(rec) > 3 and rec[0] == "SP" and rec[3] == 0:
            rec = [*rec[:3], None, *rec[4:]]
        out.append(rec)
    return out


def steps_to_tvm(steps: Sequence) -> list:
    """Our step records as TVM reads them.

    An unknown ``"SP"`` extent (``None``) is written ``0``.  Raises RecordFormatError for
    what TVM cannot read: an unknown split length, or a pragma other than
    ``auto_unroll_max_step$N`` (TVM's PragmaStep knows only it and ``debug_skip_region``).
    """
    out = []
    for rec in steps:
        rec = list(rec)
        if rec and rec[0] == "SP":
            if any(n is None for n in rec[4]):
                raise RecordFormatError(f"step {rec!r} has an unknown split length; TVM records need all of them")
            if rec[3] is None:
                rec[3] = 0
        if rec and rec[0] == "PR" and not str(rec[3]).startswith("auto_unroll_max_step$"):
            raise RecordFormatError(f"step {rec!r}: TVM's PragmaStep reads only auto_unroll_max_step$N")
        out.append(rec)
    return out


# ---------------------------------------------------------------------------
# workload keys
# ---------------------------------------------------------------------------

def dag_shapes(dag: ComputeDAG) -> list:
    """One shape (a list of ints; a symbolic extent as its text) per tensor of ``dag``, in order."""
    out = []
    for t in dag.tensors:
        shape = []
        for e in t.shape:
            v = const_value(e)
            shape.append(v if isinstance(v, int) else expr_str(e))
        out.append(shape)
    return out


def parse_tvm_key(key: str) -> tuple[str, list] | None:
    """``(head, rest)`` of a TVM workload_key ``'["head", rest...]'``; None when it is not one."""
    try:
        obj = json.loads(key)
    except json.JSONDecodeError:
        return None
    if isinstance(obj, list) and obj and isinstance(obj[0], str):
        return obj[0], obj[1:]
    return None


def key_shapes(rest: list) -> list | None:
    """The shapes of a ``["<hash>", shape...]`` key's tail; None when the tail is not shapes."""
    if rest and all(isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)
                    for s in rest):
        return rest
    return None


def tvm_workload_key(workload_key: str, dag: ComputeDAG) -> str:
    """The workload_key to write in a TVM record of a task.

    Our key itself when it already is a TVM key (a JSON list headed by a string); else
    ``["<our key>", shape...]`` with the DAG's tensor shapes, TVM's form for a task made from
    a DAG.  TVM maps such a key to its tensors once the same computation is registered under
    it (``auto_scheduler.workload_registry.register_workload_tensors(key, tensors)``).
    """
    if parse_tvm_key(workload_key) is not None:
        return workload_key
    return json.dumps([workload_key, *dag_shapes(dag)])


def _candidate(obj: Any) -> tuple:
    """``(ComputeDAG, workload_key)`` of a Task (anything with ``compute_dag``) or a ComputeDAG."""
    if isinstance(obj, ComputeDAG):
        return obj, obj.workload_key
    return obj.compute_dag, str(obj.workload_key)


class TvmWorkloadResolver:
    """Finds the ComputeDAG of a TVM workload_key (TVM records carry no DAG).

    Parameters
    ----------
    dags : ``{key: ComputeDAG}``; a key may be the TVM workload_key as written or, for a
        ``["<hash>", shape...]`` key, its hash (so the ``{workload_key: dag}`` mappings our
        callers pass resolve the keys :func:`tvm_workload_key` writes)
    candidates : Tasks (or ComputeDAGs) a record may belong to

    :meth:`resolve` tries, in order: ``dags`` by the whole key, then by its head; the
    ``register_workload`` registry when the head names a registered function (its args are
    the key's tail); a candidate whose workload_key is the head or whose DAG's tensor shapes
    are the key's shapes (TVM's ``["<hash>", shape...]`` keys; the hash, TVM's own md5 of its
    DAG text, cannot be checked here).  A DAG found in ``dags`` or the registry that is
    a candidate's DAG (same DAG hash) resolves to that candidate's workload_key.
    """

    def __init__(self, dags: Mapping[str, Any] | None = None, candidates: Sequence = ()):
        self.dags = dags if dags is not None else {}
        self.candidates = [_candidate(c) for c in candidates]
        self._cache: dict = {}

    def resolve(self, key: str) -> tuple[ComputeDAG, str]:
        """``(dag, workload_key)`` of TVM workload_key ``key``; the workload_key is ours (the
        candidate's, the ``dags`` hash, else the DAG's own).  Raises UnresolvedWorkloadError
        saying how to supply the DAG."""
        if key not in self._cache:  # failures are not cached: a DAG may be supplied later
            self._cache[key] = self._resolve(key)
        return self._cache[key]

    def _prefer_candidate(self, dag: ComputeDAG, workload_key: str) -> tuple:
        for cdag, ckey in self.candidates:
            if cdag is dag or cdag.workload_key == dag.workload_key:
                return cdag, ckey
        return dag, workload_key

    def _resolve(self, key: str) -> tuple:
        dag = self.dags.get(key)
        if dag is not None:
            return self._prefer_candidate(dag, dag.workload_key)
        parsed = parse_tvm_key(key)
        if parsed is None:
            raise UnresolvedWorkloadError(
                f"no DAG for TVM workload_key {key!r} (not a JSON list, and not in the dags given)")
        head, rest = parsed
        shapes = key_shapes(rest)
        dag = self.dags.get(head)
        if dag is not None:
            if shapes is not None and shapes != dag_shapes(dag):
                raise UnresolvedWorkloadError(f"TVM workload_key {key!r}: the DAG given for {head!r} has tensor "
                                              f"shapes {dag_shapes(dag)}, not the key's")
            return self._prefer_candidate(dag, head)
        if head in WORKLOAD_FUNC_REGISTRY:
            try:
                dag = dag_of_registered(head, rest)
            except InvalidWorkloadError as err:
                raise UnresolvedWorkloadError(f"TVM workload_key {key!r}: {err}") from None
            return self._prefer_candidate(dag, dag.workload_key)
        for cdag, ckey in self.candidates:
            if ckey == head or (shapes is not None and shapes == dag_shapes(cdag)):
                return cdag, ckey
        if shapes is not None:
            raise UnresolvedWorkloadError(
                f"no DAG for TVM workload_key {key!r} (TVM records carry none): pass dags={{key or "
                f"{head!r}: ComputeDAG}}, or the task whose DAG has the tensor shapes {shapes} "
                "(task=..., SearchTask.apply_best; autosched records import --dag FILE)")
        raise UnresolvedWorkloadError(
            f"no DAG for TVM workload_key {key!r} (TVM records carry none): no workload named {head!r} "
            f"is registered; register_workload({head!r}) before reading, or pass dags={{key: ComputeDAG}} "
            "(autosched records import --workload MODULE / --dag FILE)")


__all__ = ["TVM_RECORD_VERSION", "TVM_OPTION_ALIASES", "HARDWARE_PARAM_FIELDS", "UnresolvedWorkloadError",
           "target_from_tvm", "hardware_params_to_tvm", "hardware_params_from_tvm", "layout_rewrite_option",
           "steps_from_tvm", "steps_to_tvm", "dag_shapes", "parse_tvm_key", "key_shapes", "tvm_workload_key",
           "TvmWorkloadResolver"]
