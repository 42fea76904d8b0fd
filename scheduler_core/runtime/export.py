"""Writing a runtime module to disk: object file, LLVM IR, assembly, shared library + C header.

    Module --save(".o"/".ll"/".s"/".bc")--> artifact file
    Module --export_library("f.so")-->  f.so (cc -shared f.o -lgomp -lpthread -lm)  +  f.h (C prototype)

The shared library exports the entry ``int32_t name(T0* buf0, ..., int32_t sym0, ...)``
and the ``__autosched_meta_<name>`` JSON string, so :func:`load_module` (and any C
program, through the header) can call it without other files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from scheduler_core.base.c_names import c_identifier, c_identifiers, comment_text
from scheduler_core.base.errors import BuildError

from .signature import C_ELEMENT_TYPES

SAVE_FORMATS = {".o": "o", ".obj": "o", ".ll": "ll", ".s": "s", ".asm": "s", ".bc": "bc"}
# parallel loops call the thread pool each object carries (pthreads; in libc since glibc 2.34)
# or libgomp's GOMP_parallel (AUTOSCHED_PARALLEL_RUNTIME=gomp); math calls libm
LINK_LIBS = ("-lgomp", "-lpthread", "-lm")
LINK_TIMEOUT_S = 120


def save_module(module, path: str | os.PathLike, fmt: str = "") -> None:
    """Write ``module`` as ``fmt`` ("o", "ll", "s", "bc"; default: from ``path``'s extension).

    Raises ``BuildError`` for an unknown format or an artifact this module lacks
    (e.g. LLVM IR of a module loaded from a ``.so``).
    """
    path = Path(path)
    fmt = (fmt or SAVE_FORMATS.get(path.suffix.lower(), "")).lstrip(".")
    fmt = {"asm": "s", "obj": "o"}.get(fmt, fmt)
    if fmt == "o":
        path.write_bytes(module.object_code())
    elif fmt == "ll":
        path.write_text(module.get_source("ll"))
    elif fmt == "s":
        path.write_text(module.get_source("asm"))
    elif fmt == "bc":
        path.write_bytes(llvm.parse_assembly(module.get_source("ll")).as_bitcode())
    else:
        raise BuildError(f"cannot save {path.name!r}: unknown format {fmt or path.suffix!r}; use .o, .ll, .s or .bc")


def export_library(module, path: str | os.PathLike) -> Path:
    """Link ``module``'s object code into the shared library ``path`` and write its C header.

    The header goes next to it with the suffix ``.h`` (``lib/add.so`` -> ``lib/add.h``).
    Returns the header's path.  Raises ``BuildError`` with the compiler's stderr
    when linking fails or no C compiler exists.
    """
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="autosched_export_") as tmp:
        obj = Path(tmp) / f"{module.entry_name}.o"
        obj.write_bytes(module.object_code())
        link_shared(obj, path)
    header = path.with_suffix(".h")
    header.write_text(header_text(module.signature, library_name=path.name))
    return header


def find_c_compiler() -> str:
    """The C compiler to link with: ``$CC`` if set, else the first of cc, gcc, clang on PATH.

    Raises ``BuildError`` when none is found.
    """
    wanted = os.environ.get("CC")
    candidates = [wanted] if wanted else ["cc", "gcc", "clang"]
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise BuildError(f"no C compiler found (tried {', '.join(candidates)}); install gcc or set $CC")


def link_shared(object_path, out_path: str | os.PathLike) -> None:
    """Run ``cc -shared -o out_path <objects>`` with :data:`LINK_LIBS`; ``object_path`` is one
    object file or a list of them (a whole model's library); ``BuildError`` with stderr on failure."""
    objects = [object_path] if isinstance(object_path, (str, os.PathLike)) else list(object_path)
    run_c_compiler(["-shared", "-o", str(out_path), *map(str, objects), *LINK_LIBS], f"linking {out_path}")


def run_c_compiler(args: list, what: str, timeout_s: float = LINK_TIMEOUT_S) -> None:
    """Run :func:`find_c_compiler` with ``args``; ``BuildError`` naming ``what`` ("linking x.so")
    with the command and the compiler's stderr when it fails or runs past ``timeout_s``."""
    cmd = [find_c_compiler(), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"{what} failed: {' '.join(cmd)}: {err}") from err
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")


def header_text(signature, library_name: str = "") -> str:
    """A C header declaring the entry function of ``signature`` and its meta string.

    Each buffer argument is commented with its dtype and shape (a zero-rank tensor,
    shape ``()``, is ``float32[]``: a pointer to its one element); symbolic sizes
    are int32 arguments after the pointers.  Tensor names become C identifiers
    (``base.c_names.c_identifiers``, as in the generated code) and everything else
    that comes from a user goes through ``comment_text``, so no name can end a comment
    or start a preprocessor line.  Raises BuildError when the entry's symbol is not a C
    identifier (the header could not declare it).
    """
    if c_identifier(signature.name) != signature.name:
        raise BuildError(f"entry name {signature.name!r} is not a C identifier; a header cannot declare it "
                         f"(build with name={c_identifier(signature.name)!r})")
    guard = "AUTOSCHED_" + signature.name.upper() + "_H"
    names = c_identifiers([p.name for p in signature.params] + list(signature.scalar_params))
    args = [f"{C_ELEMENT_TYPES[p.dtype]}* {nm}" for p, nm in zip(signature.params, names)]
    args += [f"int32_t {nm}" for nm in names[len(signature.params):]]
    prototype = f"int32_t {signature.name}({', '.join(args) or 'void'})"
    lines = [
        f"/* {comment_text(library_name or signature.name)}: generated by scheduler_core.runtime.export_library. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* Calling convention (autosched docs/calling_convention.md):",
        " *   One pointer per tensor of the DAG, in the DAG's tensor order (the list below), then one",
        " *   int32 per symbolic size.  Each pointer is the first element of a C-contiguous (row-major)",
        " *   array of the listed element type and shape, aligned for that type (float16: uint16_t bit",
        " *   patterns; bool: uint8_t 0/1).  Inputs are only read, outputs are written in full; the",
        " *   arrays must not overlap (restrict: no in-place call).  No global state but the thread",
        " *   pool of its parallel loops (OMP_NUM_THREADS threads, else the process's CPUs): the call",
        " *   is reentrant and thread-safe (while one call's parallel loop holds the pool, a concurrent",
        " *   call runs its loops on its own thread).",
        f" * C: include this header, link the library, call {signature.name}(&a[0][0], ...).",
        f" * Python: f = ctypes.CDLL(path_of_the_library).{signature.name}; f.restype = ctypes.c_int32;",
        f" *   f.argtypes = [ctypes.c_void_p] * {len(signature.params)}"
        + (f" + [ctypes.c_int32] * {len(signature.scalar_params)}" if signature.scalar_params else "")
        + "; f(array.ctypes.data, ...)",
        " *   with C-contiguous numpy arrays of the dtypes and shapes below.",
        " * Arguments (C-contiguous, row-major):",
    ]
    for p, nm in zip(signature.params, names):
        dims = ", ".join(str(d) for d in p.shape)
        rank0 = "" if p.shape else " (zero-rank: a pointer to one element)"
        lines.append(comment_text(f" *   {nm}: {p.dtype}[{dims}]{rank0}"))
    for nm in names[len(signature.params):]:
        lines.append(f" *   {nm}: int32 symbolic size")
    lines += [
        " * Returns 0 on success, nonzero on failure, as bits: 1 a failed heap allocation of a",
        " * temporary, 2 an index read from a tensor (a gather) outside the tensor it indexes",
        " * (the read was clamped to the tensor); the outputs are then unspecified. */",
        f"{prototype};",
        "",
        "/* JSON description of the arguments (name, dtype, shape). */",
        f"extern const char __autosched_meta_{signature.name}[];",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif  /* {guard} */",
        "",
    ]
    return "\n".join(lines)
