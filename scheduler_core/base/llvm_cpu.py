"""What the LLVM linked through llvmlite knows of CPUs: the host, CPU and feature names, vector widths.

No table of CPU names lives here; everything is asked of LLVM:

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
  ``pentium4``, ``athlon``, ...) on an x86-64 triple.  ``Target.parse`` runs
  :func:`checked_probe` for every ``-mcpu``/``-mattr`` other than the plain host, so
  a target it accepts never makes LLVM abort.

Also the process-wide LLVM setup (:func:`init_llvm`) and the target machines code is
emitted with (:func:`create_target_machine`).
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading

import llvmlite.binding as llvm

from .errors import BuildError, InvalidTargetError

_PROBE_TIMEOUT_S = 120

@functools.cache
def host_cpu() -> str:
    """LLVM's name for the host CPU, e.g. ``"znver3"``."""
    return llvm.get_host_cpu_name()


@functools.cache
def host_features() -> str:
    """The host CPU features as an LLVM feature string (``"+avx2,+fma,-avx512f,..."``)."""
    return llvm.get_host_cpu_features().flatten()


def enabled_features(features: str) -> frozenset:
    """The names (no sign) of the ``+`` entries of an LLVM feature string."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def features_vector_bytes(enabled: frozenset | set) -> int:
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


def checked_probe(cpu: str, features: str) -> tuple:
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
    return checked_probe(cpu, features)[0]


def probe_implied_features(float_bytes: int, int_bytes: int) -> set:
    """Feature names the probe's registers prove: zmm -> avx512f (which implies avx2, avx in
    LLVM), ymm for the integer add -> avx2, ymm for the float add -> avx."""
    if float_bytes >= 64:
        return {"avx512f", "avx2", "avx"}
    if float_bytes >= 32:
        return {"avx2", "avx"} if int_bytes >= 32 else {"avx"}
    return set()


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
