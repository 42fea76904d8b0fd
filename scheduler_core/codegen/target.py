"""Compilation targets: ``Target.parse("llvm -mcpu=core-avx2 -num-cores=4")``.

A ``Target`` names what the schedule is *for* (the requested CPU decides the
vector width the search uses); the JIT always builds code that runs on *this*
machine.  When the requested ``-mcpu``/``-mattr`` needs features the host lacks
(e.g. ``skylake-avx512`` on an AVX2 host), :meth:`Target.jit_cpu_features`
returns the host CPU and a warning instead, as TVM's ``llvm`` target does when
it cross-compiles and the runner is elsewhere.

Recognised options (TVM spelling): ``-mcpu=<cpu>``, ``-mattr=+f1,-f2``,
``-num-cores=<n>`` (0 = OpenMP's default, all cores), ``-mtriple=<triple>``;
other ``-key=value`` options are kept in ``options`` and printed back.
"""

from __future__ import annotations

import ctypes.util
import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

from ..errors import BuildError

KINDS = ("llvm", "cuda")

# Widest float vector unit (bytes) of well-known x86 CPUs, by LLVM cpu name.
_AVX512_CPUS = frozenset((
    "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
    "graniterapids", "graniterapids-d", "diamondrapids", "knl", "knm", "znver4", "znver5",
    "x86-64-v4",
))
_AVX2_CPUS = frozenset((
    "haswell", "broadwell", "skylake", "core-avx2", "alderlake", "raptorlake", "meteorlake",
    "arrowlake", "arrowlake-s", "lunarlake", "pantherlake", "gracemont", "sierraforest",
    "grandridge", "clearwaterforest", "znver1", "znver2", "znver3", "bdver4", "x86-64-v3",
))
_AVX_CPUS = frozenset((
    "sandybridge", "ivybridge", "corei7-avx", "core-avx-i", "btver2", "bdver1", "bdver2",
    "bdver3",
))
_SSE_CPUS = frozenset((
    "x86-64", "x86-64-v2", "nehalem", "westmere", "corei7", "core2", "penryn", "btver1",
    "silvermont", "goldmont", "goldmont-plus", "tremont", "k8", "amdfam10",
))


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    """LLVM's name for the host CPU, e.g. ``"znver3"``."""
    return llvm.get_host_cpu_name()


@functools.lru_cache(maxsize=None)
def host_features() -> str:
    """The host CPU features as an LLVM feature string (``"+avx2,+fma,-avx512f,..."``)."""
    return llvm.get_host_cpu_features().flatten()


def _enabled(features: str) -> frozenset:
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def _known_cpu(cpu: str) -> bool:
    return cpu in _AVX512_CPUS or cpu in _AVX2_CPUS or cpu in _AVX_CPUS or cpu in _SSE_CPUS


def _features_vector_bytes(enabled: frozenset) -> int:
    if "avx512f" in enabled:
        return 64
    if "avx" in enabled or "avx2" in enabled:
        return 32
    return 16


def _required_features(cpu: str) -> set:
    if cpu in _AVX512_CPUS:
        return {"avx512f", "avx2", "fma"}
    if cpu in _AVX2_CPUS:
        return {"avx2", "fma"}
    if cpu in _AVX_CPUS:
        return {"avx"}
    return set()


@dataclass(frozen=True)
class Target:
    """A compilation target.

    kind: ``"llvm"`` (CPU) or ``"cuda"``.  mcpu: the LLVM CPU name the code is
    for (the host CPU when not given).  mattr: feature flags such as
    ``("+avx2", "-avx512f")``.  num_cores: threads for parallel loops (0 = all,
    OpenMP's default).  mcpu_given: whether ``-mcpu`` was in the string.
    """

    kind: str = "llvm"
    mcpu: str = ""
    mattr: tuple = ()
    num_cores: int = 0
    mtriple: str = ""
    options: tuple = ()  # other (key, value) pairs, kept for str()
    mcpu_given: bool = False

    @staticmethod
    def parse(target: "str | Target") -> "Target":
        """Parse a TVM-style target string; a ``Target`` is returned unchanged.

        Raises BuildError for an unknown kind or a malformed option.
        """
        if isinstance(target, Target):
            return target
        words = str(target).split()
        if not words or words[0] not in KINDS:
            raise BuildError(f"unknown target {target!r}; expected one of {KINDS}")
        fields: dict = {"kind": words[0]}
        others = []
        for w in words[1:]:
            key, eq, value = w.partition("=")
            if not key.startswith("-") or not eq:
                raise BuildError(f"malformed target option {w!r} in {target!r}")
            key = key.lstrip("-")
            if key == "mcpu":
                fields["mcpu"] = host_cpu() if value == "native" else value
                fields["mcpu_given"] = True
            elif key == "mattr":
                fields["mattr"] = tuple(a for a in value.split(",") if a)
            elif key == "num-cores":
                try:
                    fields["num_cores"] = int(value)
                except ValueError:
                    raise BuildError(f"-num-cores needs an integer, got {value!r}") from None
            elif key == "mtriple":
                fields["mtriple"] = value
            else:
                others.append((key, value))
        fields["options"] = tuple(others)
        if fields["kind"] == "llvm" and not fields.get("mcpu"):
            fields["mcpu"] = host_cpu()
        return Target(**fields)

    @property
    def str(self) -> str:
        """The canonical text form, e.g. ``"llvm -mcpu=znver3 -num-cores=2"``."""
        parts = [self.kind]
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

    def __str__(self) -> str:
        return self.str

    @property
    def is_host(self) -> bool:
        """True when the requested CPU is the host CPU and no -mattr is given."""
        return self.mcpu == host_cpu() and not self.mattr

    @property
    def features(self) -> frozenset:
        """Enabled feature names (no sign) for the requested cpu and mattr."""
        if self.mcpu == host_cpu():
            enabled = set(_enabled(host_features()))
        else:
            enabled = _required_features(self.mcpu)
        for a in self.mattr:
            (enabled.add if a.startswith("+") else enabled.discard)(a[1:])
        return frozenset(enabled)

    @property
    def vector_unit_bytes(self) -> int:
        """Width of the widest float vector unit in bytes: 64 AVX-512, 32 AVX/AVX2, 16 SSE."""
        return _features_vector_bytes(self.features)

    def jit_cpu_features(self) -> tuple:
        """``(cpu, features, warnings)`` to JIT with: always code that runs on the host.

        The host CPU and its features are used; a warning is returned when the
        requested cpu/mattr needs features the host lacks (the JIT'd code then
        does not use them) or when the cpu name is unknown here.
        """
        warnings = []
        have = _enabled(host_features())
        if self.mcpu != host_cpu():
            if not _known_cpu(self.mcpu):
                warnings.append(f"unknown -mcpu={self.mcpu}; JIT compiles for host {host_cpu()}")
            missing = _required_features(self.mcpu) - have
            if missing:
                warnings.append(
                    f"-mcpu={self.mcpu} needs {sorted(missing)} which host {host_cpu()} lacks; "
                    f"JIT compiles for the host CPU")
        lacking = [a for a in self.mattr if a.startswith("+") and a[1:] not in have]
        if lacking:
            warnings.append(f"host lacks {lacking}; JIT compiles for the host CPU")
        return host_cpu(), host_features(), warnings

    def export_cpu_features(self) -> tuple:
        """``(cpu, features)`` for exported objects: the requested cpu and -mattr."""
        if self.mcpu == host_cpu() and not self.mattr:
            return host_cpu(), host_features()
        return self.mcpu, ",".join(self.mattr)


_INITIALIZED = []


def init_llvm() -> None:
    """Initialise LLVM's native target and asm printer once per process.

    Also loads libgcc_s globally: LLVM's x86 backend calls its runtime helpers
    (e.g. ``__truncdfhf2`` for float64 -> float16) and the JIT resolves external
    symbols from the process.
    """
    if not _INITIALIZED:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        try:
            llvm.load_library_permanently(ctypes.util.find_library("gcc_s") or "libgcc_s.so.1")
        except RuntimeError:  # pragma: no cover - no libgcc_s: half conversions may fail
            pass
        _INITIALIZED.append(True)


def create_target_machine(cpu: str, features: str, opt: int = 3):
    """An LLVM TargetMachine for the host triple (PIC, so objects link into a .so)."""
    init_llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu, features=features, opt=opt,
                                        reloc="pic", codemodel="default")
