"""CUDA C -> PTX / cubin with the ``nvcc`` on PATH, and ``ptxas -v`` resource usage.

    compile_cuda(source, arch="sm_80", fmt="ptx") -> bytes      (cached by source hash)
    ptxas_info(ptx, arch="sm_80") -> {kernel: {"registers": 32, "shared_bytes": 8192, ...}}
    nvcc_available() -> None | "why not"

Each compilation runs in its own temporary directory with a timeout.  A compile error is a
``BuildError`` carrying nvcc's own message and, for each ``file(line): error`` it names, the
offending source line.  No GPU is needed: nvcc and ptxas only compile.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading

from scheduler_core.base.errors import BuildError
from scheduler_core.base.gpu_spec import CUDA_DEFAULT_ARCH

__all__ = ["compile_cuda", "find_tool", "nvcc_available", "nvcc_version", "parse_ptxas_info",
           "ptxas_info"]

TIMEOUT_S = 300
_FORMATS = ("ptx", "cubin", "fatbin")
_ARCH = re.compile(r"^(sm|compute)_\d+[a-z]?$")
_SRC_NAME = "kernel.cu"

_lock = threading.Lock()
_compile_cache: dict = {}
_ptxas_cache: dict = {}


def find_tool(name: str) -> str | None:
    """The path of CUDA tool ``name`` (``nvcc``, ``ptxas``): PATH, then next to nvcc, then
    ``$CUDA_HOME/bin`` and ``/usr/local/cuda/bin``."""
    found = shutil.which(name)
    if found:
        return found
    dirs = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(os.path.dirname(os.path.realpath(nvcc)))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "bin"))
    dirs.append("/usr/local/cuda/bin")
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _require(name: str) -> str:
    path = find_tool(name)
    if path is None:
        raise BuildError(f"the CUDA tool {name!r} was not found (not on PATH, not in $CUDA_HOME/bin "
                         f"or /usr/local/cuda/bin); install the CUDA toolkit to compile CUDA kernels")
    return path


_version_cache: dict = {}


def nvcc_version() -> str | None:
    """nvcc's ``release X.Y`` version text, or None when nvcc is missing or does not run."""
    path = find_tool("nvcc")
    if path is None:
        return None
    if path not in _version_cache:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
            m = re.search(r"release (\S+?),", out.stdout)
            _version_cache[path] = m.group(1) if (out.returncode == 0 and m) else None
        except (OSError, subprocess.SubprocessError):
            _version_cache[path] = None
    return _version_cache[path]


def nvcc_available() -> str | None:
    """None when nvcc (and ptxas) can compile here, else the reason why not."""
    if find_tool("nvcc") is None:
        return "nvcc was not found on PATH (no CUDA toolkit)"
    if nvcc_version() is None:
        return f"nvcc at {find_tool('nvcc')} does not run (`nvcc --version` failed)"
    if find_tool("ptxas") is None:
        return "ptxas was not found next to nvcc"
    return None


def _check_arch(arch: str) -> None:
    if not _ARCH.match(str(arch)):
        raise BuildError(f"CUDA arch {arch!r} is not of the form sm_XY (e.g. sm_80)")


def _run(cmd: list, cwd: str, what: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} did not finish within {timeout:.0f} s") from None
    except OSError as err:
        raise BuildError(f"{what} could not be started: {err}") from None


def _explain(stderr: str, source: str, tmpdir: str) -> str:
    """nvcc's message with the temp dir removed and each cited source line quoted."""
    text = stderr.replace(tmpdir + os.sep, "").replace(tmpdir, "").strip()
    lines = source.splitlines()
    quoted: list = []
    seen: set = set()
    for m in re.finditer(re.escape(_SRC_NAME) + r"\((\d+)\): (?:catastrophic )?error", text):
        no = int(m.group(1))
        if no in seen or not 1 <= no <= len(lines):
            continue
        seen.add(no)
        quoted.append(f"  line {no}: {lines[no - 1].strip()}")
    out = text
    if quoted:
        out += "\noffending source line(s):\n" + "\n".join(quoted[:10])
    return out


def compile_cuda(source: str, arch: str = CUDA_DEFAULT_ARCH, fmt: str = "ptx", options=(),
                 timeout: float = TIMEOUT_S) -> bytes:
    """Compile CUDA C ``source`` with nvcc to ``fmt`` (``"ptx"``, ``"cubin"`` or ``"fatbin"``)
    for ``arch``; returns the file's bytes.  ``options``: extra nvcc flags (e.g.
    ``("-use_fast_math",)``).  Results are cached per process by (source, arch, fmt,
    options).  Raises BuildError: nvcc missing, an invalid arch/fmt, a compile error (nvcc's
    message with the offending source lines), a timeout."""
    if fmt not in _FORMATS:
        raise BuildError(f"unknown CUDA output format {fmt!r}; expected one of {list(_FORMATS)}")
    _check_arch(arch)
    options = tuple(str(o) for o in options)
    nvcc = _require("nvcc")
    key = hashlib.sha256("\0".join([nvcc, source, arch, fmt, *options]).encode()).hexdigest()
    with _lock:
        hit = _compile_cache.get(key)
    if hit is not None:
        return hit
    with tempfile.TemporaryDirectory(prefix="sc_nvcc_") as tmp:
        src = os.path.join(tmp, _SRC_NAME)
        out = os.path.join(tmp, f"kernel.{fmt}")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, f"--{fmt}", f"-arch={arch}", "-O3", *options, "-o", out, _SRC_NAME]
        res = _run(cmd, tmp, "nvcc", timeout)
        if res.returncode != 0 or not os.path.exists(out):
            msg = _explain(res.stderr + res.stdout, source, tmp)
            if "Unsupported gpu architecture" in msg:
                codes = nvcc_gpu_codes()
                msg += (f"\nthis nvcc compiles for {', '.join(codes) or 'no arch it lists'} (nvcc --list-gpu-code); "
                        "CUDA 13 dropped sm_50-sm_72: build for those with an older CUDA toolkit")
            raise BuildError(f"nvcc failed (exit {res.returncode}) compiling CUDA source for {arch}:\n{msg}")
        with open(out, "rb") as f:
            data = f.read()
    with _lock:
        _compile_cache[key] = data
    return data


@functools.cache
def nvcc_gpu_codes() -> tuple[str, ...]:
    """The ``sm_XY`` archs this nvcc builds cubins for (``nvcc --list-gpu-code``), oldest first;
    () when nvcc is missing or too old to list them."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return ()
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    codes = set(re.findall(r"\bsm_(\d+)\b", out))
    return tuple(f"sm_{c}" for c in sorted(codes, key=int))


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_info(text: str) -> dict:
    """Per kernel, the numbers of a ``ptxas -v`` log: ``registers``, ``shared_bytes``
    (static), ``spill_stores``, ``spill_loads``, ``stack_bytes``, ``cmem_bytes``."""
    out: dict = {}
    current: str | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line) or _PROPS.search(line)
        if m:
            current = m.group(1)
            out.setdefault(current, {"registers": 0, "shared_bytes": 0, "spill_stores": 0,
                                     "spill_loads": 0, "stack_bytes": 0, "cmem_bytes": 0})
            continue
        if current is None:
            continue
        info = out[current]
        m = _FRAME.search(line)
        if m:
            info["stack_bytes"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
        m = _USED.search(line)
        if m:
            info["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            info["shared_bytes"] = int(s.group(1)) if s else 0
            c = _CMEM.search(line)
            if c:
                info["cmem_bytes"] = int(c.group(1))
    return out


def ptxas_info(ptx: bytes | str, arch: str = CUDA_DEFAULT_ARCH, timeout: float = TIMEOUT_S) -> dict:
    """Assemble ``ptx`` with ``ptxas -v`` for ``arch``; per kernel name, its ``registers``,
    static ``shared_bytes``, ``spill_stores``/``spill_loads`` (bytes), ``stack_bytes`` and
    ``cmem_bytes``.  Cached per process.  Raises BuildError (ptxas missing or failing)."""
    _check_arch(arch)
    if arch.startswith("compute_"):
        raise BuildError(f"ptxas needs a real arch (sm_XY), got {arch!r}")
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    ptxas = _require("ptxas")
    key = hashlib.sha256(b"\0".join([ptxas.encode(), arch.encode(), data])).hexdigest()
    with _lock:
        hit = _ptxas_cache.get(key)
    if hit is not None:
        return {k: dict(v) for k, v in hit.items()}
    with tempfile.TemporaryDirectory(prefix="sc_ptxas_") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "wb") as f:
            f.write(data)
        res = _run([ptxas, "-v", f"-arch={arch}", "-o", os.path.join(tmp, "kernel.cubin"), "kernel.ptx"],
                   tmp, "ptxas", timeout)
        log = (res.stderr + res.stdout).replace(tmp + os.sep, "")
        if res.returncode != 0:
            raise BuildError(f"ptxas failed (exit {res.returncode}) for {arch}:\n{log.strip()}")
    info = parse_ptxas_info(log)
    with _lock:
        _ptxas_cache[key] = info
    return {k: dict(v) for k, v in info.items()}
