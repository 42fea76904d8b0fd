"""Compilation targets: ``Target.parse("llvm -mcpu=core-avx2 -num-cores=4")``.

A ``Target`` names what the schedule is *for* (the requested CPU decides the
vector width the search uses); the JIT always builds code that runs on *this*
machine.  When the requested ``-mcpu``/``-mattr`` has a wider vector unit than
the host, or enables a feature the host lacks (e.g. ``skylake-avx512`` on an
AVX2 host), :meth:`Target.jit_cpu_features` returns the host CPU and a warning
instead, as TVM's ``llvm`` target does when it cross-compiles and the runner is
elsewhere.

Options (TVM spelling), every other key is an :class:`InvalidTargetError`:

``llvm``
    ``-mcpu=<cpu>`` an LLVM CPU name or ``native`` (default: the host CPU);
    ``-mattr=+f1,-f2`` LLVM feature names; ``-num-cores=<n>`` threads of
    parallel loops (0 = OpenMP's default, all cores); ``-mtriple=<triple>`` kept
    and printed back.  Code is always generated for the process triple, so
    ``-mcpu`` and ``-mattr`` are checked against what LLVM knows for it.
``cuda``
    TVM's cuda keys, kept in ``options`` as given: ``-arch=sm_<xx>`` a compute
    capability of :data:`CUDA_ARCHS` (default ``sm_80`` when not given: an A100);
    ``-model=<gpu name>`` kept and printed back; ``-max_threads_per_block=<n>``,
    ``-max_shared_memory_per_block=<bytes>``, ``-thread_warp_size=<n>`` and
    ``-registers_per_block=<n>`` (positive integers) override the arch's limits
    (:meth:`Target.cuda_limits`, :meth:`HardwareParams.for_target`).  A shared
    memory size above what the arch can give one block with opt-in is refused.

Everything known about a CPU comes from the LLVM linked through llvmlite
(:mod:`scheduler_core.base.llvm_cpu`); no table of CPU names lives here.
"""

from __future__ import annotations

import difflib
import enum
import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

import llvmlite.binding as llvm

from .errors import BuildError, InvalidTargetError
from .gpu_spec import CUDA_DEFAULT_ARCH, CUDA_MAX_SHARED_MEMORY_PER_BLOCK, CUDA_MAX_THREADS_PER_BLOCK
from .llvm_cpu import (
    checked_probe,
    cpu_vector_unit_bytes,
    enabled_features,
    features_vector_bytes,
    host_cpu,
    host_features,
    llvm_cpu_names,
    llvm_feature_names,
    probe_implied_features,
)


class TargetKind(str, enum.Enum):
    """The kind of a target: the first word of its string (TVM's ``TargetKind``).

    A ``str`` enum: ``TargetKind.CUDA == "cuda"`` and ``str(TargetKind.CUDA) == "cuda"``, so
    the kind prints, formats and hashes as its text.  :attr:`is_gpu` tells the GPU kinds.
    """

    LLVM = "llvm"
    CUDA = "cuda"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def is_gpu(self) -> bool:
        """Whether programs of this kind run on a GPU (thread-bound loops, shared memory)."""
        return self in _GPU_KINDS


_GPU_KINDS = frozenset({TargetKind.CUDA})
KINDS = tuple(k.value for k in TargetKind)
# The -key=value options each kind accepts (without the leading "-").
OPTION_KEYS: dict[str, tuple[str, ...]] = {
    TargetKind.LLVM: ("mcpu", "mattr", "mtriple", "num-cores"),
    TargetKind.CUDA: ("arch", "model", "max_threads_per_block", "max_shared_memory_per_block",
                      "thread_warp_size", "registers_per_block")}
CUDA_WARP_SIZE = 32


def _arch(optin_kib: int, registers: int = 65536) -> tuple:
    """A row of :data:`CUDA_ARCHS`: the limits every arch shares (``gpu_spec``) with its own
    opt-in shared memory (KiB) and registers per block."""
    return (CUDA_MAX_THREADS_PER_BLOCK, CUDA_MAX_SHARED_MEMORY_PER_BLOCK, optin_kib * 1024, CUDA_WARP_SIZE,
            registers)


# Per compute capability: (max threads per block, static shared memory per block,
# shared memory per block with opt-in (dynamic), warp size, 32-bit registers per block),
# from NVIDIA's CUDA C Programming Guide, "Technical Specifications per Compute Capability".
CUDA_ARCHS = {
    "sm_50": _arch(48), "sm_52": _arch(48), "sm_53": _arch(48, registers=32768),
    "sm_60": _arch(48), "sm_61": _arch(48), "sm_62": _arch(48),
    "sm_70": _arch(96), "sm_72": _arch(96), "sm_75": _arch(64),
    "sm_80": _arch(163), "sm_86": _arch(99), "sm_87": _arch(163), "sm_89": _arch(99),
    "sm_90": _arch(227),
    "sm_100": _arch(227), "sm_103": _arch(227), "sm_110": _arch(227), "sm_120": _arch(99), "sm_121": _arch(99),
}
# nvcc 13 compiles for sm_75 and newer only; the older rows serve records and targets made with
# an older CUDA (building for them here needs that nvcc: driver/nvcc.py says so).


def arch_of_compute_capability(text: str) -> str | None:
    """``"sm_90"`` for nvidia-smi's ``"9.0"``; None for text that is not a known compute capability."""
    m = re.fullmatch(r"\s*([0-9]+)\.([0-9]+)\s*", text)
    arch = f"sm_{m.group(1)}{m.group(2)}" if m else None
    return arch if arch in CUDA_ARCHS else None


def physical_cuda_device(index: int = 0) -> str:
    """The id (index or ``GPU-...`` UUID, as nvidia-smi's ``-i`` takes it) of this process's CUDA
    device ``index``: ``CUDA_VISIBLE_DEVICES`` renumbers the devices a process sees from 0.

    Raises ValueError when ``index`` is negative or ``CUDA_VISIBLE_DEVICES`` hides it.
    """
    if index < 0:
        raise ValueError(f"CUDA device index must be >= 0, got {index}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if index >= len(ids):
        raise ValueError(f"CUDA device {index} is hidden: CUDA_VISIBLE_DEVICES={visible!r} shows {len(ids)}")
    return ids[index]


@functools.lru_cache(maxsize=16)
def nvidia_smi_arch(device: str = "0") -> str | None:
    """``"sm_90"``: the compute capability of the GPU nvidia-smi calls ``device`` (physical index
    or UUID); None when nvidia-smi is missing, fails or names an arch not in :data:`CUDA_ARCHS`.

    A separate process (cached per device), not the CUDA driver: initialising CUDA here would
    break the work-horses an RQ worker forks later (a child forked after ``cuInit`` gets
    CUDA_ERROR_NOT_INITIALIZED).
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader", "-i", device],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.splitlines()
    return arch_of_compute_capability(lines[0]) if lines else None


def default_cuda_arch() -> str:
    """The arch of a cuda target with no ``-arch``: the compute capability of this process's
    CUDA device 0 (nvidia-smi, see :func:`nvidia_smi_arch`) when this host has an NVIDIA GPU in
    :data:`CUDA_ARCHS`, else ``CUDA_DEFAULT_ARCH`` (sm_80).

    As TVM, which takes the arch from the device when ``-arch`` is missing: a cubin runs only
    on its own major compute capability, so an sm_80 cubin does not load on an H100 (sm_90).
    """
    try:
        device = physical_cuda_device(0)
    except ValueError:  # CUDA_VISIBLE_DEVICES hides every device
        return CUDA_DEFAULT_ARCH
    return nvidia_smi_arch(device) or CUDA_DEFAULT_ARCH


_CUDA_INT_OPTIONS = ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size",
                     "registers_per_block")

_SHOW_CHARS = 64  # longest user value quoted back in an error message


# -- parsing ---------------------------------------------------------------------------

def _show(value: str) -> str:
    """``repr(value)``, shortened for an error message."""
    return repr(value if len(value) <= _SHOW_CHARS else value[:_SHOW_CHARS] + "...")


def _known_names_text(value: str, names: tuple, extra: str = "") -> str:
    """``" (closest: a, b); LLVM knows: x, y, ..."``: close matches of ``value`` first, then every name."""
    close = difflib.get_close_matches(value[:_SHOW_CHARS], names, n=5, cutoff=0.6)
    closest = f" (closest: {', '.join(close)})" if close else ""
    return f"{closest}; LLVM knows: {', '.join(names)}{extra}"


def _for_triple(mtriple: str) -> str:
    """" for <process triple>" when ``-mtriple`` names another triple (names are checked for the
    process triple, the one code is generated for), else ""."""
    triple = llvm.get_process_triple()
    return f" for {triple} (code is generated for it whatever -mtriple says)" if mtriple and mtriple != triple else ""


def _parse_mcpu(value: str, mtriple: str = "") -> str:
    if value == "native":
        return host_cpu()
    names = llvm_cpu_names()
    if value != host_cpu() and value not in names:
        raise InvalidTargetError(f"unknown -mcpu={_show(value)}{_for_triple(mtriple)}"
                                 + _known_names_text(value, names, " (or 'native')"))
    return value


def _parse_mattr(value: str, mtriple: str = "") -> tuple:
    names = llvm_feature_names()
    entries = tuple(a for a in value.split(",") if a)
    for entry in entries:
        sign, name = entry[:1], entry[1:]
        if sign not in ("+", "-"):
            if entry in names:
                raise InvalidTargetError(f"bad -mattr entry {_show(entry)}: each entry is +feature or -feature, "
                                         f"e.g. +{entry} or -{entry}")
            raise InvalidTargetError(f"bad -mattr entry {_show(entry)}: each entry is +feature or -feature"
                                     + _known_names_text(entry, names))
        if name not in names:
            raise InvalidTargetError(f"unknown feature {_show(name)} in -mattr={_show(value)}{_for_triple(mtriple)}"
                                     + _known_names_text(name, names))
    return entries


def _parse_num_cores(value: str) -> int:
    if not re.fullmatch(r"[0-9]+", value):
        raise InvalidTargetError(f"-num-cores must be a non-negative integer, got {_show(value)}")
    return int(value)


def _parse_cuda_option(key: str, value: str) -> str:
    """The canonical text of cuda option ``key``; raises InvalidTargetError naming the allowed values."""
    if key == "arch":
        if value not in CUDA_ARCHS:
            close = difflib.get_close_matches(value[:_SHOW_CHARS], list(CUDA_ARCHS), n=3, cutoff=0.6)
            closest = f" (closest: {', '.join(close)})" if close else ""
            raise InvalidTargetError(f"unknown -arch={_show(value)}{closest}; the archs are: "
                                     + ", ".join(CUDA_ARCHS))
        return value
    if key in _CUDA_INT_OPTIONS:
        if not re.fullmatch(r"[0-9]+", value) or int(value) <= 0:
            raise InvalidTargetError(f"-{key} must be a positive integer, got {_show(value)}")
        return str(int(value))
    if not value:
        raise InvalidTargetError(f"-{key}= needs a value")
    return value


def _check_cuda_options(options: tuple) -> None:
    """Limits that contradict the arch: more shared memory than it can give one block."""
    opts = dict(options)
    arch = opts.get("arch") or default_cuda_arch()
    dynamic_max = CUDA_ARCHS[arch][2]
    smem = opts.get("max_shared_memory_per_block")
    if smem is not None and int(smem) > dynamic_max:
        raise InvalidTargetError(f"-max_shared_memory_per_block={smem} exceeds the {dynamic_max} bytes "
                                 f"({dynamic_max // 1024} KiB) one block of {arch} can use")


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Target:
    """The Target of a target string (cached: a Target is immutable); see :meth:`Target.parse`."""
    words = text.split()
    kinds = ", ".join(KINDS)
    if not words:
        raise InvalidTargetError(f"unknown target {_show(text)} (empty); the kinds are: {kinds}")
    if words[0] not in KINDS:
        where = "" if len(words) == 1 else f" in {_show(text)}"
        raise InvalidTargetError(f"unknown target kind {_show(words[0])}{where}; the kinds are: {kinds}")
    kind = TargetKind(words[0])
    allowed = OPTION_KEYS[kind]
    accepts = f"{kind} targets accept " + ", ".join(f"-{k}=" for k in allowed)
    fields: dict = {"kind": kind}
    others: list = []
    raw: dict = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not key.startswith("-") or not eq:
            raise InvalidTargetError(
                f"malformed target option {_show(word)} in {_show(text)}: expected -key=value; {accepts}")
        key = key.lstrip("-")
        if key not in allowed:
            raise InvalidTargetError(f"unknown option {_show('-' + key)} in {_show(text)}; {accepts}")
        if key in ("mcpu", "mattr"):
            raw[key] = value  # checked below, once -mtriple is known
        elif key == "num-cores":
            fields["num_cores"] = _parse_num_cores(value)
        elif key == "mtriple":
            fields["mtriple"] = value
        elif any(k == key for k, _ in others):
            raise InvalidTargetError(f"option {_show('-' + key)} given twice in {_show(text)}")
        else:
            others.append((key, _parse_cuda_option(key, value) if kind.is_gpu else value))
    fields["options"] = tuple(others)
    if kind is TargetKind.CUDA:
        _check_cuda_options(fields["options"])
    if "mcpu" in raw:
        fields["mcpu"] = _parse_mcpu(raw["mcpu"], fields.get("mtriple", ""))
        fields["mcpu_given"] = True
    if "mattr" in raw:
        fields["mattr"] = _parse_mattr(raw["mattr"], fields.get("mtriple", ""))
    if kind is TargetKind.LLVM:
        fields.setdefault("mcpu", host_cpu())
        if fields["mcpu"] != host_cpu() or fields.get("mattr"):
            checked_probe(fields["mcpu"], ",".join(fields.get("mattr", ())))
    return Target(**fields)


@dataclass(frozen=True)
class Target:
    """A compilation target.

    kind: :class:`TargetKind` (``LLVM``: a CPU, or ``CUDA``; a ``str`` enum).  mcpu: the LLVM CPU name the code is
    for (the host CPU when not given; ``""`` for cuda).  mattr: feature flags
    such as ``("+avx2", "-avx512f")``.  num_cores: threads for parallel loops
    (0 = all, OpenMP's default).  mtriple: the ``-mtriple`` text, kept and
    printed back ("" when not given).  options: the other ``(key, value)``
    pairs (cuda's ``arch``, ``model``, limits).  mcpu_given: whether ``-mcpu`` was in
    the string.  A ``cuda`` target without ``-arch`` is for ``sm_80``
    (:attr:`arch`).
    """

    kind: TargetKind = TargetKind.LLVM
    mcpu: str = ""
    mattr: tuple = ()
    num_cores: int = 0
    mtriple: str = ""
    options: tuple = ()  # other (key, value) pairs, kept for str()
    mcpu_given: bool = False

    @staticmethod
    def parse(target: str | Target) -> Target:
        """Parse a TVM-style target string; a ``Target`` is returned unchanged.

        ``-mcpu=native`` becomes the host CPU's name.  Results are cached per
        string.  Raises InvalidTargetError (a BuildError and a ValueError) for an
        unknown kind, a word that is not ``-key=value``, an option key the kind
        does not accept, a ``-mcpu`` or ``-mattr`` feature LLVM does not know for
        the process triple, a CPU/features LLVM cannot generate code for (e.g. a
        32-bit CPU), or a ``-num-cores`` that is not a non-negative integer; the
        message names the allowed values.  ``Target.parse(str(t)) == t``.
        """
        if isinstance(target, Target):
            return target
        return _parse_text(str(target))

    def __post_init__(self) -> None:
        if isinstance(self.kind, TargetKind):
            return
        defaults = all(getattr(self, f.name) == f.default for f in dataclass_fields(self) if f.name != "kind")
        if isinstance(self.kind, str) and defaults:
            # Target("llvm -mcpu=skylake-avx512") parses, as TVM's tvm.target.Target(str) does:
            # the same fields (and errors: InvalidTargetError names the kinds) as Target.parse
            parsed = _parse_text(self.kind)
            for f in dataclass_fields(self):
                object.__setattr__(self, f.name, getattr(parsed, f.name))
            return
        object.__setattr__(self, "kind", TargetKind(self.kind))  # Target(kind="cuda", mcpu=...) from a caller

    def __str__(self) -> str:
        """The canonical text form, e.g. ``"llvm -mcpu=znver3 -num-cores=2"``."""
        parts = [self.kind.value]
        if self.mcpu_given:
            parts.append(f"-mcpu={self.mcpu}")
        if self.mattr:
            parts.append("-mattr=" + ",".join(self.mattr))
        if self.num_cores:
            parts.append(f"-num-cores={self.num_cores}")
        if self.mtriple:
            parts.append(f"-mtriple={self.mtriple}")
        parts += [f"-{k}={v}" for k, v in self.options]
        return " ".join(parts)

    @property
    def is_gpu(self) -> bool:
        """Whether the target is a GPU (its kind's :attr:`TargetKind.is_gpu`)."""
        return self.kind.is_gpu

    def option(self, key: str, default=None):
        """The value of ``-key=`` in :attr:`options` (text), else ``default``."""
        for k, v in self.options:
            if k == key:
                return v
        return default

    @property
    def arch(self) -> str:
        """A cuda target's compute capability; with no ``-arch``, this host's GPU's (see
        :func:`default_cuda_arch`; ``"sm_80"`` on a host without one); "" for llvm."""
        if self.kind is not TargetKind.CUDA:
            return ""
        return self.option("arch") or default_cuda_arch()

    def cuda_limits(self) -> dict:
        """A cuda target's block limits: the arch's values, overridden by the target's options.

        Keys: ``max_threads_per_block``, ``max_shared_memory_per_block`` (bytes of static
        shared memory: 48 KiB on every arch unless overridden),
        ``max_dynamic_shared_memory_per_block`` (bytes with opt-in, e.g. 163 KiB on sm_80,
        227 KiB on sm_90), ``thread_warp_size``, ``registers_per_block``.
        Raises BuildError for a non-cuda target.
        """
        if self.kind is not TargetKind.CUDA:
            raise BuildError(f"target {str(self)!r} is not a cuda target")
        threads, smem, dyn, warp, regs = CUDA_ARCHS[self.arch]
        out = {"max_threads_per_block": threads, "max_shared_memory_per_block": smem,
               "max_dynamic_shared_memory_per_block": dyn, "thread_warp_size": warp,
               "registers_per_block": regs}
        for key in _CUDA_INT_OPTIONS:
            v = self.option(key)
            if v is not None:
                out[key] = int(v)
        return out

    @property
    def is_host(self) -> bool:
        """True when the requested CPU is the host CPU and no -mattr is given."""
        return self.mcpu == host_cpu() and not self.mattr

    @property
    def _mattr_text(self) -> str:
        return ",".join(self.mattr)

    @property
    def features(self) -> frozenset:
        """Enabled feature names (no sign) for the requested cpu and mattr.

        For the host CPU: every feature the host enables, with the ``-mattr``
        entries applied.  For another CPU LLVM's per-CPU feature lists are not
        read: only what the vector probe proves (``{"avx512f", "avx2", "avx"}``
        for 64-byte vectors, ``{"avx2", "avx"}`` for 32-byte integer vectors,
        ``{"avx"}`` for 32-byte float vectors only, nothing for 16 bytes), with the
        ``-mattr`` entries applied.  Empty for a cuda target.
        """
        if self.kind is not TargetKind.LLVM:
            return frozenset()
        if self.mcpu == host_cpu():
            enabled = set(enabled_features(host_features()))
        else:
            enabled = probe_implied_features(*checked_probe(self.mcpu, self._mattr_text))
        for a in self.mattr:
            (enabled.add if a.startswith("+") else enabled.discard)(a[1:])
        return frozenset(enabled)

    def missing_on_host(self) -> list[str]:
        """The features this target's programs may use that this host's CPU lacks, sorted; ``[]``
        for a cuda target or one the host runs.  For another ``-mcpu`` only the vector features
        the probe proves are compared (``avx512f``, ``avx2``, ``avx``: see :attr:`features`)."""
        if self.kind is not TargetKind.LLVM or self.is_host:
            return []
        return sorted(self.features - Target.parse("llvm").features)

    @property
    def vector_unit_bytes(self) -> int:
        """Width of the widest float vector unit in bytes: 64 AVX-512, 32 AVX/AVX2, 16 SSE.

        The host CPU without ``-mattr``: read from the host feature string.
        Otherwise: what LLVM emits for the cpu and ``-mattr``
        (:func:`cpu_vector_unit_bytes`).  16 for a cuda target.
        """
        if self.kind is not TargetKind.LLVM:
            return 16
        if self.is_host:
            return features_vector_bytes(enabled_features(host_features()))
        return cpu_vector_unit_bytes(self.mcpu, self._mattr_text)

    def jit_cpu_features(self) -> tuple:
        """``(cpu, features, warnings)`` to JIT with: always code that runs on the host.

        The host CPU and its feature string are returned; ``warnings`` (a list of
        str) says when the requested cpu/mattr has a wider vector unit than the
        host, or when a ``+feature`` of ``-mattr`` is not enabled on the host (the
        JIT'd code then does not use them).
        """
        warnings = []
        have = enabled_features(host_features())
        if self.kind is TargetKind.LLVM and not self.is_host:
            want, host_bytes = self.vector_unit_bytes, features_vector_bytes(have)
            if want > host_bytes:
                isa = {64: "avx512f", 32: "avx"}.get(want, "")
                requested = f"-mcpu={self.mcpu}" + (f" -mattr={self._mattr_text}" if self.mattr else "")
                warnings.append(f"{requested} has {want}-byte vectors ({isa}) but host {host_cpu()} has "
                                f"{host_bytes}-byte ones; JIT compiles for the host CPU")
        lacking = [a for a in self.mattr if a.startswith("+") and a[1:] not in have]
        if lacking:
            warnings.append(f"host {host_cpu()} lacks {lacking} of -mattr; JIT compiles for the host CPU")
        return host_cpu(), host_features(), warnings

    def export_cpu_features(self) -> tuple:
        """``(cpu, features)`` for exported objects: the requested cpu and -mattr."""
        if self.mcpu == host_cpu() and not self.mattr:
            return host_cpu(), host_features()
        return self.mcpu, ",".join(self.mattr)


@dataclass(frozen=True)
class HardwareParams:
    """What the search knows of the machine (Ansor's HardwareParams).

    num_cores : int, threads used by parallel loops
    vector_unit_bytes : int, width of the widest SIMD register in bytes (32 for AVX2, 64 for AVX-512)
    cache_line_bytes : int, 64 on x86
    max_innermost_split_factor : int, upper bound of the innermost tile length

    GPU fields (TVM's names; 0 for a CPU target):

    max_shared_memory_per_block : int, bytes of (static) shared memory one block may use
    max_local_memory_per_block : int, bytes of local memory per block (TVM: INT32_MAX)
    max_threads_per_block : int, threads of one block
    max_vthread_extent : int, the largest vthread extent (TVM: warp_size // 4)
    warp_size : int, threads of a warp
    registers_per_block : int, 32-bit registers of one block
    max_dynamic_shared_memory_per_block : int, bytes of shared memory one block may use with opt-in
    """

    num_cores: int = 0
    vector_unit_bytes: int = 32
    cache_line_bytes: int = 64
    max_innermost_split_factor: int = 64
    max_shared_memory_per_block: int = 0
    max_local_memory_per_block: int = 0
    max_threads_per_block: int = 0
    max_vthread_extent: int = 0
    warp_size: int = 0
    registers_per_block: int = 0
    max_dynamic_shared_memory_per_block: int = 0

    @staticmethod
    def for_target(target: Target) -> HardwareParams:
        """The parameters of ``target``: its ``-num-cores`` (default: this machine's CPUs) and vector width;
        for cuda also the block limits of its arch and options (:meth:`Target.cuda_limits`)."""
        cores = target.num_cores or os.cpu_count() or 1
        if target.kind is not TargetKind.CUDA:
            return HardwareParams(cores, target.vector_unit_bytes, 64, 64)
        lim = target.cuda_limits()
        return HardwareParams(
            cores, target.vector_unit_bytes, 64, 64,
            max_shared_memory_per_block=lim["max_shared_memory_per_block"],
            max_local_memory_per_block=2 ** 31 - 1,
            max_threads_per_block=lim["max_threads_per_block"],
            max_vthread_extent=max(1, lim["thread_warp_size"] // 4),
            warp_size=lim["thread_warp_size"],
            registers_per_block=lim["registers_per_block"],
            max_dynamic_shared_memory_per_block=lim["max_dynamic_shared_memory_per_block"])
