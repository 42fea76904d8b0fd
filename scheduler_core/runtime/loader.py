"""Loading a saved module back: TVM's ``tvm.runtime.load_module``.

    f.so --dlopen (ctypes.CDLL)------------------------------> Module
    f.o  --cc -shared (temporary .so)--> dlopen --------------> Module (can be saved/exported again)
    f.ll --llvmlite parse + MCJIT for the host CPU------------> Module (IR, asm and object available)

The entry's signature comes from the ``__autosched_meta_<name>`` JSON string in
the file, found through the ELF symbol table (``.so``/``.o``) or the module's
globals (``.ll``), so no side files are needed.  A module with parallel loops
gets its thread-pool pointer set to this process's pool (``codegen.thread_pool``),
so loaded modules share one set of threads.  Note that ``dlopen`` caches by
path: loading a ``.so`` that was overwritten while the old one is still loaded
in this process returns the old code.
"""

from __future__ import annotations

import ctypes
import os
import struct
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from scheduler_core.base.errors import BuildError
from scheduler_core.codegen import thread_pool
from scheduler_core.codegen.parallel import load_libgomp

from .export import link_shared
from .module import Module
from .signature import Signature

META_PREFIX = "__autosched_meta_"
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11


def load_module(path: str | os.PathLike, entry_name: str | None = None) -> Module:
    """Load a module saved by ``export_library`` (.so), ``save`` (.o) or ``save`` (.ll).

    entry_name: which entry to load when the file holds several (default: the
    only one).  Raises ``BuildError`` for an unknown extension, a file without a
    ``__autosched_meta_`` entry, or a failed link/JIT; ``FileNotFoundError`` if
    ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such module file: {path}")
    suffix = path.suffix.lower()
    if suffix in (".so", ".dylib"):
        return _load_shared(path, entry_name)
    if suffix in (".o", ".obj"):
        return _load_object(path, entry_name)
    if suffix == ".ll":
        return _load_llvm_ir(path.read_text(), entry_name)
    raise BuildError(f"cannot load {path.name!r}: expected a .so, .o or .ll file")


# ---------------------------------------------------------------------------
# .so and .o
# ---------------------------------------------------------------------------

def _load_shared(path: Path, entry_name: str | None, object_code: bytes | None = None) -> Module:
    name = _pick_entry(elf_defined_symbols(path.read_bytes()), entry_name, path)
    try:
        lib = ctypes.CDLL(str(path.resolve()))
        meta_addr = ctypes.addressof(ctypes.c_char.in_dll(lib, META_PREFIX + name))
        address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except (OSError, AttributeError, ValueError) as err:
        raise BuildError(f"cannot load {path}: {err}") from err
    assert address is not None  # a symbol that dlsym found is not at address 0
    thread_pool.attach_library(lib)  # parallel loops run on this process's pool, not the library's own
    signature = Signature.from_meta_json(ctypes.string_at(meta_addr).decode())
    return Module(signature, address, keepalive=lib, object_code=object_code)


def _load_object(path: Path, entry_name: str | None) -> Module:
    data = path.read_bytes()
    _pick_entry(elf_defined_symbols(data), entry_name, path)
    with tempfile.TemporaryDirectory(prefix="autosched_load_") as tmp:
        shared = Path(tmp) / (path.stem + ".so")
        link_shared(path, shared)
        # The library stays mapped after its file is deleted with the directory.
        return _load_shared(shared, entry_name, object_code=data)


def _pick_entry(symbols: list, entry_name: str | None, path) -> str:
    """The entry whose meta string is among ``symbols`` (``entry_name`` or the only one)."""
    entries = sorted(s[len(META_PREFIX):] for s in set(symbols) if s.startswith(META_PREFIX))
    if entry_name is not None:
        if entry_name not in entries:
            raise BuildError(f"{path}: no entry {entry_name!r} (has {entries})")
        return entry_name
    if len(entries) != 1:
        raise BuildError(f"{path}: expected one {META_PREFIX}<name> symbol, found {entries}; pass entry_name")
    return entries[0]


def elf_defined_symbols(data: bytes) -> list:
    """Names of the symbols defined in an ELF64 little-endian file (.o or .so).

    Reads ``.symtab`` and ``.dynsym`` with their string tables; undefined
    symbols (section index 0) are left out.  Raises ``BuildError`` if ``data``
    is not such a file.
    """
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BuildError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    names = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type not in (_SHT_SYMTAB, _SHT_DYNSYM) or not entsize:
            continue
        str_offset, str_size = sections[link][4], sections[link][5]
        strtab = data[str_offset:str_offset + str_size]
        for k in range(size // entsize):
            st_name, _, _, st_shndx = struct.unpack_from("<IBBH", data, offset + k * entsize)
            if st_shndx != 0 and st_name:
                names.append(strtab[st_name:strtab.index(b"\0", st_name)].decode())
    return names


# ---------------------------------------------------------------------------
# .ll
# ---------------------------------------------------------------------------

def _load_llvm_ir(ir_text: str, entry_name: str | None) -> Module:

    if "GOMP_parallel" in ir_text:  # built with the gomp runtime
        try:
            load_libgomp()
        except RuntimeError as err:
            raise BuildError(f"the IR calls libgomp, which cannot be loaded: {err}") from err
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as err:
        raise BuildError(f"invalid LLVM IR: {err}") from err
    name = _pick_entry([g.name for g in mod.global_variables], entry_name, "<llvm ir>")
    machine = _host_target_machine(llvm)
    engine = llvm.create_mcjit_compiler(mod, machine)
    engine.finalize_object()
    meta_addr = engine.get_global_value_address(META_PREFIX + name)
    if thread_pool.has_hook(g.name for g in mod.global_variables):
        thread_pool.attach(engine.get_global_value_address(thread_pool.HOOK_SYMBOL))
    signature = Signature.from_meta_json(ctypes.string_at(meta_addr).decode())
    return Module(
        signature, engine.get_function_address(name), keepalive=(engine, mod), llvm_ir=ir_text,
        asm=lambda: machine.emit_assembly(llvm.parse_assembly(ir_text)),
        object_code=lambda: machine.emit_object(llvm.parse_assembly(ir_text)),
    )


def _host_target_machine(llvm):
    """An LLVM target machine for this CPU with all its features (position independent)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, reloc="pic", codemodel="default")
