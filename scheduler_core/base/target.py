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

Everything known about a CPU comes from the LLVM linked through llvmlite, no
table of CPU names lives here:

* the host: ``llvm.get_host_cpu_name()`` and ``llvm.get_host_cpu_features()``;
* the CPU and feature names LLVM knows: the tables LLVM prints to the C-level
  stderr when a target machine is created with ``cpu="help"`` (only the first
  time in a process), captured once (:func:`llvm_cpu_names`,
  :func:`llvm_feature_names`);
* the vector width of a CPU with its ``-mattr``: the registers LLVM allocates
  for a ``<16 x float>`` add (:func:`cpu_vector_unit_bytes`).  That probe runs in
  a child process: LLVM aborts the whole process ("LLVM ERROR: 64-bit code
  requested on a subtarget that doesn't support it!") when it emits code for a
  CPU it does not know, and also for the 32-bit CPUs it does know (``i686``,
  ``pentium4``, ``athlon``, ...) on an x86-64 triple.  :meth:`Target.parse`
  runs it for every ``-mcpu``/``-mattr`` other than the plain host, so a target
  it accepts never makes LLVM abort.
"""

from __future__ import annotations

import builtins
import ctypes.util
import difflib
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

from .errors import BuildError, InvalidTargetError

KINDS = ("llvm", "cuda")
# The -key=value options each kind accepts (without the leading "-").
OPTION_KEYS = {"llvm": ("mcpu", "mattr", "mtriple", "num-cores"),
               "cuda": ("arch", "model", "max_threads_per_block", "max_shared_memory_per_block",
                        "thread_warp_size", "registers_per_block")}

# Per compute capability: (max threads per block, static shared memory per block,
# shared memory per block with opt-in (dynamic), warp size, 32-bit registers per block),
# from NVIDIA's CUDA C Programming Guide, "Technical Specifications per Compute Capability".
CUDA_ARCHS = {
    "sm_50": (1024, 48 * 1024, 48 * 1024, 32, 65536),
    "sm_52": (1024, 48 * 1024, 48 * 1024, 32, 65536),
    "sm_53": (1024, 48 * 1024, 48 * 1024, 32, 32768),
    "sm_60": (1024, 48 * 1024, 48 * 1024, 32, 65536),
    "sm_61": (1024, 48 * 1024, 48 * 1024, 32, 65536),
    "sm_62": (1024, 48 * 1024, 48 * 1024, 32, 65536),
    "sm_70": (1024, 48 * 1024, 96 * 1024, 32, 65536),
    "sm_72": (1024, 48 * 1024, 96 * 1024, 32, 65536),
    "sm_75": (1024, 48 * 1024, 64 * 1024, 32, 65536),
    "sm_80": (1024, 48 * 1024, 163 * 1024, 32, 65536),
    "sm_86": (1024, 48 * 1024, 99 * 1024, 32, 65536),
    "sm_87": (1024, 48 * 1024, 163 * 1024, 32, 65536),
    "sm_89": (1024, 48 * 1024, 99 * 1024, 32, 65536),
    "sm_90": (1024, 48 * 1024, 227 * 1024, 32, 65536),
}
CUDA_DEFAULT_ARCH = "sm_80"
_CUDA_INT_OPTIONS = ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size",
                     "registers_per_block")

_PROBE_TIMEOUT_S = 120
_SHOW_CHARS = 64  # longest user value quoted back in an error message


@functools.cache
def host_cpu() -> str:
    """LLVM's name for the host CPU, e.g. ``"znver3"``."""
    return llvm.get_host_cpu_name()


@functools.cache
def host_features() -> str:
    """The host CPU features as an LLVM feature string (``"+avx2,+fma,-avx512f,..."``)."""
    return llvm.get_host_cpu_features().flatten()


def _enabled(features: str) -> frozenset:
    """The names (no sign) of the ``+`` entries of an LLVM feature string."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def _features_vector_bytes(enabled: frozenset | set) -> int:
    """Widest float vector unit in bytes implied by feature names: 64 avx512f, 32 avx/avx2, else 16."""
    if "avx512f" in enabled:
        return 64
    if "avx" in enabled or "avx2" in enabled:
        return 32
    return 16


# -- what LLVM knows: the cpu="help" tables ---------------------------------------

_FD2_LOCK = threading.Lock()


def _call_capturing_fd2(fn):
    """``(fn(), text)``: call ``fn`` with file descriptor 2 redirected to a temporary file.

    ``text`` is what was written to the C-level stderr during the call (LLVM
    prints there directly, bypassing ``sys.stderr``); output of other threads to
    fd 2 during the call lands there too.  Calls are serialised by a lock.
    """
    with _FD2_LOCK, tempfile.TemporaryFile() as tmp:
        try:
            if sys.stderr is not None:
                sys.stderr.flush()
        except (OSError, ValueError):
            pass
        try:
            saved = os.dup(2)
        except OSError:  # fd 2 closed (a daemon): leave it closed afterwards
            saved = None
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        finally:
            if saved is None:
                os.close(2)
            else:
                os.dup2(saved, 2)
                os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode("utf-8", "replace")


def _parse_help_tables(text: str) -> dict:
    """``{"cpus": names, "features": names}`` from LLVM's ``-mcpu=help`` text.

    The text is "Available CPUs for this target:" then "Available features for
    this target:", each followed by indented ``name - description`` lines; the
    name is the first word of each indented line.  Names are sorted.
    """
    tables: dict = {"cpus": set(), "features": set()}
    current = None
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            current = tables["cpus"]
        elif line.startswith("Available features"):
            current = tables["features"]
        elif line[:1].isspace() and line.strip():
            if current is not None:
                current.add(line.split()[0])
        elif line.strip():
            current = None
    return {key: tuple(sorted(names)) for key, names in tables.items()}


# Run by a child Python: creating a target machine with cpu="help" prints the tables.
_HELP_SCRIPT = """
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(cpu="help", features="")
"""


@functools.cache
def _llvm_help_tables() -> dict:
    """LLVM's CPU and feature tables for the process triple, read once per process.

    Read from the C-level stderr of this process.  LLVM prints the tables only
    the first time a process asks for them; when something else asked first,
    they are read from a child process instead.  Raises BuildError when LLVM
    prints no CPU table.
    """
    _, text = _call_capturing_fd2(lambda: create_target_machine("help", ""))
    tables = _parse_help_tables(text)
    if not tables["cpus"]:
        tables = _parse_help_tables(_run_child(_HELP_SCRIPT).stderr)
    if not tables["cpus"]:
        raise BuildError(f"LLVM printed no CPU table for {llvm.get_process_triple()} (cpu='help')")
    return tables


def llvm_cpu_names() -> tuple:
    """The CPU names LLVM knows for the process triple, sorted (``"alderlake"``, ...).

    Read from the table LLVM prints when a target machine is created with
    ``cpu="help"``.  Knowing a name does not mean LLVM can generate code for it
    on this triple (the 32-bit x86 CPUs cannot produce x86-64 code);
    :func:`cpu_vector_unit_bytes` tells.
    """
    return _llvm_help_tables()["cpus"]


def llvm_feature_names() -> tuple:
    """The feature names (no sign) LLVM knows for the process triple, sorted (``"avx2"``, ...)."""
    return _llvm_help_tables()["features"]


# -- what LLVM does: the vector width probe ------------------------------------------

_PROBE_IR = """
define <16 x float> @f(<16 x float> %a, <16 x float> %b) {
  %c = fadd <16 x float> %a, %b
  ret <16 x float> %c
}
define <16 x i32> @g(<16 x i32> %a, <16 x i32> %b) {
  %c = add <16 x i32> %a, %b
  ret <16 x i32> %c
}
"""

# Run by a child Python: argv = cpu, features, IR; prints the assembly, or dies
# with LLVM's fatal error on stderr.
_PROBE_SCRIPT = """
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
cpu, features, ir = sys.argv[1:4]
triple = llvm.get_process_triple()
tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2)
mod = llvm.parse_assembly(ir)
mod.triple = triple
sys.stdout.write(tm.emit_assembly(mod))
"""


def _add_register_bytes(asm: str) -> int:
    """Widest register of the add instructions in ``asm``: 64 for zmm, 32 for ymm, else 16."""
    width = 16
    for line in asm.splitlines():
        words = line.split("#", 1)[0].split()  # "#" starts an x86 assembly comment
        if words and "add" in words[0]:
            operands = " ".join(words[1:])
            if "zmm" in operands:
                return 64
            if "ymm" in operands:
                width = 32
    return width


def _probe_widths(asm: str) -> tuple:
    """``(float_bytes, int_bytes)``: register widths of the float add (@f) and the integer add (@g)."""
    g = re.search(r"^_?g:", asm, re.M)
    f_asm, g_asm = (asm[:g.start()], asm[g.start():]) if g else (asm, "")
    return _add_register_bytes(f_asm), _add_register_bytes(g_asm)


def _run_child(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` with ``args`` in a child Python that imports the same llvmlite.

    Returns the completed process (text stdout/stderr, whatever its exit status).
    Raises BuildError when the child cannot be started or runs past
    ``_PROBE_TIMEOUT_S`` seconds.
    """
    llvmlite_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(llvm.__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (llvmlite_parent, env.get("PYTHONPATH")) if p)
    try:
        return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                              env=env, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(f"could not run an LLVM probe in a child process: {type(err).__name__}: {err}") from err


@functools.cache
def _probe(cpu: str, features: str) -> tuple:
    """``(float_bytes, int_bytes, error)`` of LLVM's code for ``cpu`` + ``features`` (cached).

    Compiles :data:`_PROBE_IR` in a child process, so a CPU or feature set LLVM
    aborts on kills the child only; ``error`` is then LLVM's message and the widths
    are 0.  Raises BuildError when the child cannot be run at all.
    """
    proc = _run_child(_PROBE_SCRIPT, cpu, features, _PROBE_IR)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        fatal = [ln for ln in lines if "LLVM ERROR" in ln] or lines[-1:] or [f"exit status {proc.returncode}"]
        return 0, 0, fatal[0].strip()
    return (*_probe_widths(proc.stdout), "")


def _checked_probe(cpu: str, features: str) -> tuple:
    """``(float_bytes, int_bytes)`` of :func:`_probe`; raises InvalidTargetError where LLVM aborts."""
    float_bytes, int_bytes, error = _probe(cpu, features)
    if error:
        attrs = f" -mattr={features}" if features else ""
        raise InvalidTargetError(
            f"LLVM cannot generate {llvm.get_process_triple()} code for -mcpu={cpu}{attrs}: {error}")
    return float_bytes, int_bytes


def cpu_vector_unit_bytes(cpu: str, features: str = "") -> int:
    """Width in bytes of the widest float vector register LLVM uses for ``cpu`` with ``features``.

    cpu : str, an LLVM CPU name; features : str, an LLVM feature string
    (``"+avx512f,-avx2"``).  Compiles a ``<16 x float>`` add for the process
    triple: zmm registers -> 64, ymm -> 32, else 16.  Cached per process.
    Raises InvalidTargetError when LLVM cannot generate code for them (an
    unknown or 32-bit CPU on x86-64).
    """
    return _checked_probe(cpu, features)[0]


def _probe_implied_features(float_bytes: int, int_bytes: int) -> set:
    """Feature names the probe's registers prove: zmm -> avx512f (which implies avx2, avx in
    LLVM), ymm for the integer add -> avx2, ymm for the float add -> avx."""
    if float_bytes >= 64:
        return {"avx512f", "avx2", "avx"}
    if float_bytes >= 32:
        return {"avx2", "avx"} if int_bytes >= 32 else {"avx"}
    return set()


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
    arch = opts.get("arch", CUDA_DEFAULT_ARCH)
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
    kind = words[0]
    if kind not in KINDS:
        where = "" if len(words) == 1 else f" in {_show(text)}"
        raise InvalidTargetError(f"unknown target kind {_show(kind)}{where}; the kinds are: {kinds}")
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
            others.append((key, _parse_cuda_option(key, value) if kind == "cuda" else value))
    fields["options"] = tuple(others)
    if kind == "cuda":
        _check_cuda_options(fields["options"])
    if "mcpu" in raw:
        fields["mcpu"] = _parse_mcpu(raw["mcpu"], fields.get("mtriple", ""))
        fields["mcpu_given"] = True
    if "mattr" in raw:
        fields["mattr"] = _parse_mattr(raw["mattr"], fields.get("mtriple", ""))
    if kind == "llvm":
        fields.setdefault("mcpu", host_cpu())
        if fields["mcpu"] != host_cpu() or fields.get("mattr"):
            _checked_probe(fields["mcpu"], ",".join(fields.get("mattr", ())))
    return Target(**fields)


@dataclass(frozen=True)
class Target:
    """A compilation target.

    kind: ``"llvm"`` (CPU) or ``"cuda"``.  mcpu: the LLVM CPU name the code is
    for (the host CPU when not given; ``""`` for cuda).  mattr: feature flags
    such as ``("+avx2", "-avx512f")``.  num_cores: threads for parallel loops
    (0 = all, OpenMP's default).  mtriple: the ``-mtriple`` text, kept and
    printed back ("" when not given).  options: the other ``(key, value)``
    pairs (cuda's ``arch``, ``model``, limits).  mcpu_given: whether ``-mcpu`` was in
    the string.  A ``cuda`` target without ``-arch`` is for ``sm_80``
    (:attr:`arch`).
    """

    kind: str = "llvm"
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

    def __str__(self) -> builtins.str:  # ``str`` is the property above inside this class
        return self.str

    def option(self, key: builtins.str, default=None):
        """The value of ``-key=`` in :attr:`options` (text), else ``default``."""
        for k, v in self.options:
            if k == key:
                return v
        return default

    @property
    def arch(self) -> builtins.str:
        """A cuda target's compute capability (``"sm_80"`` when no ``-arch`` is given); "" for llvm."""
        return self.option("arch", CUDA_DEFAULT_ARCH) if self.kind == "cuda" else ""

    def cuda_limits(self) -> dict:
        """A cuda target's block limits: the arch's values, overridden by the target's options.

        Keys: ``max_threads_per_block``, ``max_shared_memory_per_block`` (bytes of static
        shared memory: 48 KiB on every arch unless overridden),
        ``max_dynamic_shared_memory_per_block`` (bytes with opt-in, e.g. 163 KiB on sm_80,
        227 KiB on sm_90), ``thread_warp_size``, ``registers_per_block``.
        Raises BuildError for a non-cuda target.
        """
        if self.kind != "cuda":
            raise BuildError(f"target {self.str!r} is not a cuda target")
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
    def _mattr_text(self) -> builtins.str:
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
        if self.kind != "llvm":
            return frozenset()
        if self.mcpu == host_cpu():
            enabled = set(_enabled(host_features()))
        else:
            enabled = _probe_implied_features(*_checked_probe(self.mcpu, self._mattr_text))
        for a in self.mattr:
            (enabled.add if a.startswith("+") else enabled.discard)(a[1:])
        return frozenset(enabled)

    @property
    def vector_unit_bytes(self) -> int:
        """Width of the widest float vector unit in bytes: 64 AVX-512, 32 AVX/AVX2, 16 SSE.

        The host CPU without ``-mattr``: read from the host feature string.
        Otherwise: what LLVM emits for the cpu and ``-mattr``
        (:func:`cpu_vector_unit_bytes`).  16 for a cuda target.
        """
        if self.kind != "llvm":
            return 16
        if self.is_host:
            return _features_vector_bytes(_enabled(host_features()))
        return cpu_vector_unit_bytes(self.mcpu, self._mattr_text)

    def jit_cpu_features(self) -> tuple:
        """``(cpu, features, warnings)`` to JIT with: always code that runs on the host.

        The host CPU and its feature string are returned; ``warnings`` (a list of
        str) says when the requested cpu/mattr has a wider vector unit than the
        host, or when a ``+feature`` of ``-mattr`` is not enabled on the host (the
        JIT'd code then does not use them).
        """
        warnings = []
        have = _enabled(host_features())
        if self.kind == "llvm" and not self.is_host:
            want, host_bytes = self.vector_unit_bytes, _features_vector_bytes(have)
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
        if target.kind != "cuda":
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


_INITIALIZED: list[bool] = []


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
    """An LLVM TargetMachine for the process triple (PIC, so objects link into a .so).

    cpu : str, an LLVM CPU name; features : str, an LLVM feature string.  LLVM
    aborts the process when code is emitted for a CPU it cannot generate code for
    (unknown, or 32-bit on x86-64): pass the host CPU or that of a parsed Target.
    """
    init_llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu, features=features, opt=opt,
                                        reloc="pic", codemodel="default")
