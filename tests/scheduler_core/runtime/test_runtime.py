"""Runtime: devices, NDArrays, calling/timing compiled functions, export and load.

No codegen is needed: the compiled functions are a hand-written LLVM IR vector add
(JIT-compiled with llvmlite, the path codegen takes) and small C functions built
with the system C compiler, both with codegen's ABI and ``__autosched_meta_`` string.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field

import llvmlite.binding as llvm
import numpy as np
import pytest

from scheduler_core import testing
from scheduler_core.base.errors import BuildError, DeviceRuntimeError, RuntimeArgumentError
from scheduler_core.ir import tir
from scheduler_core.ir.expr import IntImm, Var
from scheduler_core.runtime import Module, context, cpu, cuda, device, load_module, nd
from scheduler_core.runtime.export import find_c_compiler


@dataclass
class FakeCompiledFunction:
    """Codegen's CompiledFunction contract, with real machine code behind it."""

    name: str
    func: tir.PrimFunc
    llvm_ir: str
    object_code: bytes
    address: int
    engine: object
    asm: str = ""
    target: object = None
    warnings: list = field(default_factory=list)

    def get_asm(self) -> str:
        return self.asm


def _meta(name, params, scalars=()):
    return json.dumps({"name": name, "params": [{"name": p, "dtype": d, "shape": s} for p, d, s in params],
                       "scalar_params": list(scalars)})


def _primfunc(name, params, scalars=()):
    bufs = tuple(tir.Buffer(p, d, tuple(s)) for p, d, s in params)
    return tir.PrimFunc(name, bufs, tuple(scalars), tir.Evaluate(IntImm(0)))


VADD_IR = """
@__autosched_meta_vadd = constant [{size} x i8] c"{meta}\\00"
define i32 @vadd(ptr noalias %A, ptr noalias %B, ptr noalias %C, i32 %n) {{
entry:
  %any = icmp sgt i32 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i32 [0, %entry], [%next, %loop]
  %k = sext i32 %i to i64
  %pa = getelementptr float, ptr %A, i64 %k
  %pb = getelementptr float, ptr %B, i64 %k
  %pc = getelementptr float, ptr %C, i64 %k
  %a = load float, ptr %pa
  %b = load float, ptr %pb
  %s = fadd float %a, %b
  store float %s, ptr %pc
  %next = add i32 %i, 1
  %done = icmp eq i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}}
"""

C_SOURCE = r"""
#include <stdint.h>
int32_t mm(float* A, float* B, float* C) {
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 3; ++j) {
    float acc = 0.f;
    for (int k = 0; k < 8; ++k) acc += A[i * 8 + k] * B[k * 3 + j];
    C[i * 3 + j] = acc;
  }
  return 0;
}
int32_t pad1(int32_t* A, int32_t* B, int32_t n) {
  for (int i = 0; i < n; ++i) B[i] = A[i];
  B[n] = n;
  return 0;
}
int32_t bump(double* X) { X[0] += 1.0; return 0; }
int32_t fail(float* X, int32_t n) { return n > 3 ? 7 : 0; }
"""

N = Var("n")
C_FUNCS = {
    "mm": ([("A", "float32", (4, 8)), ("B", "float32", (8, 3)), ("C", "float32", (4, 3))], ()),
    "pad1": ([("A", "int32", (N,)), ("B", "int32", (N + 1,))], (N,)),
    "bump": ([("X", "float64", (1,))], ()),
    "fail": ([("X", "float32", (N,))], (N,)),
}


def _jit_vadd():
    meta = _meta("vadd", [(p, "float32", ["n"]) for p in "ABC"], ["n"])
    escaped = meta.replace("\\", "\\5C").replace('"', "\\22")
    ir = VADD_IR.format(size=len(meta.encode()) + 1, meta=escaped)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(reloc="pic", opt=2)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(ir), machine)
    engine.finalize_object()
    func = _primfunc("vadd", [(p, "float32", (N,)) for p in "ABC"], (N,))
    return FakeCompiledFunction("vadd", func, ir, machine.emit_object(llvm.parse_assembly(ir)),
                                engine.get_function_address("vadd"), engine,
                                asm=machine.emit_assembly(llvm.parse_assembly(ir)))


def _c_meta_defs():
    defs = []
    for name, (params, scalars) in C_FUNCS.items():
        text = _meta(name, [(p, d, [s if isinstance(s, int) else str(s) for s in shape]) for p, d, shape in params],
                     [v.name for v in scalars])
        defs.append(f'const char __autosched_meta_{name}[] = "{text.replace(chr(34), chr(92) + chr(34))}";')
    return "\n".join(defs)


@pytest.fixture(scope="module")
def vadd():
    return _jit_vadd()


@pytest.fixture(scope="module")
def c_funcs(tmp_path_factory):
    """name -> FakeCompiledFunction for each C function (one object file holds them all)."""
    tmp = tmp_path_factory.mktemp("cfuncs")
    (tmp / "k.c").write_text(C_SOURCE + _c_meta_defs())
    cc = find_c_compiler()
    subprocess.run([cc, "-O2", "-fPIC", "-c", str(tmp / "k.c"), "-o", str(tmp / "k.o")], check=True)
    subprocess.run([cc, "-shared", "-o", str(tmp / "k.so"), str(tmp / "k.o")], check=True)
    lib = ctypes.CDLL(str(tmp / "k.so"))
    obj = (tmp / "k.o").read_bytes()
    return {name: FakeCompiledFunction(name, _primfunc(name, params, scalars), "", obj,
                                       ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, lib)
            for name, (params, scalars) in C_FUNCS.items()}


def _vadd_inputs(n, rng):
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32), np.zeros(n, np.float32)


# -- devices and arrays -----------------------------------------------------

def test_devices_and_tvm_spellings():
    assert cpu() == cpu(0) == device("cpu") == context("llvm -mcpu=core-avx2", 0) == device(1)
    assert context("cuda", 0) == cuda(0) and device("nvptx").kind == "cuda"
    assert str(cpu(1)) == "cpu(1)" and cpu().device_type == 1 and cuda().device_type == 2
    cpu().sync()
    with pytest.raises(ValueError):
        device("opencl")
    if not cuda().exist:
        with pytest.raises(DeviceRuntimeError, match="cuda"):
            cuda().sync()
        with pytest.raises(DeviceRuntimeError):
            nd.array(np.zeros(3), device=cuda())


def test_a_gpu_without_pycuda_does_not_exist(monkeypatch):
    # a host whose driver sees the GPU but lacks pycuda: code that checks dev.exist (the seeds)
    # must fall back instead of failing at the first array
    import importlib
    import importlib.util

    device_module = importlib.import_module("scheduler_core.runtime.device")  # (the package exports device())
    monkeypatch.setattr(device_module, "cuda_unavailable_reason", lambda index=0: None)  # the driver sees it
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pycuda" else real_find_spec(name, *a))
    assert not cuda(0).exist
    assert "pycuda is not installed" in cuda(0).unusable_reason()
    with pytest.raises(DeviceRuntimeError, match="pycuda"):
        cuda(0).sync()


def test_ndarray_copies_and_converts():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = nd.array(src.T, cpu())  # positional device; non-contiguous source
    src[0, 0] = 100
    assert a.shape == (4, 3) and a.dtype == "float32" and a.device == cpu(0) and a.ctx == cpu(0)
    np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)
    a.numpy()[0, 0] = -1  # numpy() is a copy
    assert a.asnumpy()[0, 0] == 0
    e = nd.empty((2, 5), "int32", ctx=cpu(0))
    assert e.shape == (2, 5) and e.dtype == "int32"
    e.copyfrom(np.ones((2, 5)))
    np.testing.assert_array_equal(e.numpy(), np.ones((2, 5), np.int32))
    with pytest.raises(ValueError, match="shape"):
        e.copyfrom(np.ones((5, 2)))


def test_assert_allclose_accepts_ndarrays():
    x = np.linspace(0, 1, 10, dtype=np.float32)
    testing.assert_allclose(nd.array(x), x)
    testing.assert_allclose(nd.array(x * (1 + 1e-6)), nd.array(x), rtol=1e-5)
    with pytest.raises(AssertionError):
        testing.assert_allclose(nd.array(x + 1e-3), x, rtol=1e-5)
    with pytest.raises(AssertionError, match="shape"):
        testing.assert_allclose(x[None, :], x)


# -- calling ----------------------------------------------------------------

def test_call_with_numpy_and_ndarrays_binds_symbolic_n(vadd):
    mod, rng = Module.from_compiled(vadd), np.random.default_rng(0)
    assert mod.entry_name == "vadd" and mod.imported_modules == []
    for n in (1, 7, 1000):
        a, b, c = _vadd_inputs(n, rng)
        mod(a, b, c)
        np.testing.assert_array_equal(c, a + b)
        ta, tb, tc = nd.array(a), nd.array(b), nd.empty((n,), device=cpu())
        mod(ta, tb, tc)
        testing.assert_allclose(tc.numpy(), a + b)
    mod(a, b, c, 1000)  # the symbolic size may also be passed explicitly
    mod["vadd"](a, b, c)


@pytest.mark.parametrize("args_of, message", [
    (lambda a, b, c: (a, b.astype(np.float64), c), r"argument 1 \(B\): expected dtype float32, got float64"),
    (lambda a, b, c: (a, b, c.reshape(4, 4)), r"argument 2 \(C\): expected 1 dimensions, got 2"),
    (lambda a, b, c: (a, b, c[:8]), r"argument 2 \(C\): expected shape \(16,\), got \(8,\) \(n = 16 from axis 0"),
    (lambda a, b, c: (a, np.zeros(32, np.float32)[::2], c), r"argument 1 \(B\): array is not C-contiguous"),
    (lambda a, b, c: (a, b), r"vadd takes 3 array arguments \(A, B, C\).*got 2"),
    (lambda a, b, c: (a, b, c, 15), r"argument 3 \(n\): 15 contradicts n = 16"),
    (lambda a, b, c: (a, b.tolist(), c), r"argument 1 \(B\): expected an NDArray or numpy.ndarray, got list"),
])
def test_argument_errors_name_the_argument(vadd, args_of, message):
    mod = Module.from_compiled(vadd)
    with pytest.raises(RuntimeArgumentError, match=message):
        mod(*args_of(*_vadd_inputs(16, np.random.default_rng(1))))


def test_fixed_shape_error_message_and_result(c_funcs):
    mod, rng = Module.from_compiled(c_funcs["mm"]), np.random.default_rng(2)
    a, b = rng.random((4, 8), dtype=np.float32), rng.random((8, 3), dtype=np.float32)
    with pytest.raises(RuntimeArgumentError, match=r"^argument 2 \(C\): expected shape \(4, 3\), got \(4, 2\)$"):
        mod(a, b, np.zeros((4, 2), np.float32))
    c = nd.empty((4, 3))
    mod(nd.array(a), nd.array(b), c)
    testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_shape_expression_is_checked_after_binding(c_funcs):
    mod = Module.from_compiled(c_funcs["pad1"])
    a, b = np.arange(5, dtype=np.int32), np.zeros(6, np.int32)
    mod(a, b)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4, 5])
    with pytest.raises(RuntimeArgumentError, match=r"argument 1 \(B\): expected shape \(6,\), got \(5,\)"):
        mod(a, np.zeros(5, np.int32))


def test_nonzero_return_raises(c_funcs):
    mod = Module.from_compiled(c_funcs["fail"])
    mod(np.zeros(3, np.float32))
    with pytest.raises(DeviceRuntimeError, match="fail returned 7"):
        mod(np.zeros(4, np.float32))


# -- timing -----------------------------------------------------------------

def test_time_evaluator_respects_number_and_repeat(c_funcs):
    mod, x = Module.from_compiled(c_funcs["bump"]), np.zeros(1)
    res = mod.time_evaluator("bump", cpu(), number=5, repeat=3)(x)
    assert x[0] == 1 + 5 * 3  # one warm-up call, then repeat * number calls
    assert len(res.results) == 3 and all(0 < t < 1e-3 for t in res.results)
    assert res.mean == pytest.approx(np.mean(res.results))


def test_time_evaluator_min_repeat_ms_grows_number(c_funcs):
    mod, x = Module.from_compiled(c_funcs["bump"]), np.zeros(1)
    start = time.perf_counter()
    res = mod.time_evaluator(mod.entry_name, cpu(), number=1, repeat=2, min_repeat_ms=5)(x)
    assert time.perf_counter() - start >= 2 * 5e-3
    assert x[0] > 1 + 2 * 100 and len(res.results) == 2 and res.mean > 0


def test_time_evaluator_vadd_with_cache_flush_and_errors(vadd):
    mod = Module.from_compiled(vadd)
    a, b, c = _vadd_inputs(4096, np.random.default_rng(3))
    res = mod.time_evaluator("vadd", "llvm -mcpu=core-avx2", number=20, repeat=2, enable_cpu_cache_flush=True)(a, b, c)
    assert len(res.results) == 2 and res.mean > 0
    np.testing.assert_array_equal(c, a + b)
    with pytest.raises(RuntimeArgumentError, match="no function 'main'"):
        mod.time_evaluator("main", cpu())
    with pytest.raises(DeviceRuntimeError):
        mod.time_evaluator("vadd", cuda())
    with pytest.raises(ValueError):
        mod.time_evaluator("vadd", cpu(), number=0)
    with pytest.raises(RuntimeArgumentError, match=r"argument 0 \(A\)"):
        mod.time_evaluator("vadd", cpu())(a[:10], b, c)


# -- sources, export and load -------------------------------------------------

def test_get_source_and_save_formats(vadd, tmp_path):
    mod = Module.from_compiled(vadd)
    assert "define i32 @vadd" in mod.get_source() and "@vadd" in mod.get_source("ll")
    assert "vadd" in mod.get_source("asm")
    for ext in ("o", "ll", "s", "bc"):
        mod.save(str(tmp_path / f"vadd.{ext}"))
    assert (tmp_path / "vadd.o").read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "vadd.ll").read_text() == vadd.llvm_ir
    assert (tmp_path / "vadd.bc").read_bytes()[:2] == b"BC"
    with pytest.raises(BuildError, match="unknown format"):
        mod.save(str(tmp_path / "vadd.txt"))


def _check_vadd_module(mod, n=37):
    a, b, c = _vadd_inputs(n, np.random.default_rng(n))
    mod(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    with pytest.raises(RuntimeArgumentError, match=r"argument 2 \(C\): expected shape \(37,\), got \(36,\)"):
        mod(a, b, c[:-1])


def test_export_library_and_load_so(vadd, tmp_path):
    header = Module.from_compiled(vadd).export_library(str(tmp_path / "vadd.so"))
    assert header == tmp_path / "vadd.h"
    loaded = load_module(str(tmp_path / "vadd.so"))
    assert loaded.entry_name == "vadd" and loaded.signature.scalar_params == ("n",)
    _check_vadd_module(loaded)
    assert loaded.time_evaluator("vadd", cpu(), number=3)(*_vadd_inputs(64, np.random.default_rng(0))).mean > 0
    with pytest.raises(BuildError, match="no LLVM IR"):
        loaded.get_source("ll")


def test_header_declares_entry_with_names_and_types(vadd, c_funcs, tmp_path):
    text = Module.from_compiled(vadd).export_library(tmp_path / "vadd.so").read_text()
    assert "#include <stdint.h>" in text and "#ifndef AUTOSCHED_VADD_H" in text
    assert "int32_t vadd(float* A, float* B, float* C, int32_t n);" in text
    assert "A: float32[n]" in text and "extern const char __autosched_meta_vadd[];" in text
    from scheduler_core.runtime.export import header_text
    pad = header_text(Module.from_compiled(c_funcs["pad1"]).signature)
    assert "int32_t pad1(int32_t* A, int32_t* B, int32_t n);" in pad and "B: int32[(n + 1)]" in pad


def test_save_object_and_load_it(vadd, c_funcs, tmp_path):
    Module.from_compiled(vadd).save(str(tmp_path / "vadd.o"))
    loaded = load_module(tmp_path / "vadd.o")
    _check_vadd_module(loaded)
    loaded.export_library(tmp_path / "again.so")  # a loaded object can be exported again
    _check_vadd_module(load_module(tmp_path / "again.so"))
    Module.from_compiled(c_funcs["pad1"]).save(tmp_path / "k.o")  # the C object holds four entries
    with pytest.raises(BuildError, match="pass entry_name"):
        load_module(tmp_path / "k.o")
    pad = load_module(tmp_path / "k.o", entry_name="pad1")  # meta shape "(n + 1)" is parsed
    b = np.zeros(4, np.int32)
    pad(np.array([7, 8, 9], np.int32), b)
    np.testing.assert_array_equal(b, [7, 8, 9, 3])
    with pytest.raises(RuntimeArgumentError, match=r"argument 1 \(B\): expected shape \(4,\), got \(3,\)"):
        pad(np.zeros(3, np.int32), np.zeros(3, np.int32))


def test_load_llvm_ir(vadd, tmp_path):
    Module.from_compiled(vadd).save(tmp_path / "vadd.ll")
    loaded = load_module(tmp_path / "vadd.ll")
    _check_vadd_module(loaded)
    assert "vadd" in loaded.get_source("asm") and loaded.object_code()[:4] == b"\x7fELF"


def test_export_errors(vadd, tmp_path, monkeypatch):
    mod = Module.from_compiled(vadd)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(BuildError, match="no C compiler"):
        mod.export_library(tmp_path / "x.so")
    monkeypatch.delenv("CC")
    broken = Module(mod.signature, vadd.address, keepalive=vadd, object_code=b"not an object file")
    with pytest.raises(BuildError, match="linking .* failed"):
        broken.export_library(tmp_path / "y.so")
    with pytest.raises(BuildError, match="expected a .so, .o or .ll"):
        load_module(__file__)


LOADER_SCRIPT = r"""
import ctypes, json, re, sys
so, header = sys.argv[1], open(sys.argv[2]).read()
ret, name, args = re.search(r"^(\w+) (\w+)\((.*)\);$", header, re.M).groups()
ctype = {"float*": ctypes.POINTER(ctypes.c_float), "int32_t": ctypes.c_int32}
fn = getattr(ctypes.CDLL(so), name)
fn.restype, fn.argtypes = ctype[ret], [ctype[a.rsplit(" ", 1)[0]] for a in args.split(", ")]
n = 5
A, B, C = (ctypes.c_float * n)(*range(n)), (ctypes.c_float * n)(*[10.0] * n), (ctypes.c_float * n)()
print(json.dumps({"rc": fn(A, B, C, n), "C": list(C)}))
"""


def test_shared_library_loads_in_a_plain_ctypes_process(vadd, tmp_path):
    header = Module.from_compiled(vadd).export_library(tmp_path / "vadd.so")
    out = subprocess.run([sys.executable, "-c", LOADER_SCRIPT, str(tmp_path / "vadd.so"), str(header)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"rc": 0, "C": [10.0, 11.0, 12.0, 13.0, 14.0]}


def test_shared_library_links_into_a_c_program(vadd, tmp_path):
    Module.from_compiled(vadd).export_library(tmp_path / "vadd.so")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "vadd.h"\n'
        "int main(void) { float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3];\n"
        '  int rc = vadd(a, b, c, 3); printf("%d %g %g %g\\n", rc, c[0], c[1], c[2]); return rc; }\n')
    exe = tmp_path / "main"
    subprocess.run([find_c_compiler(), str(tmp_path / "main.c"), str(tmp_path / "vadd.so"), "-o", str(exe),
                    f"-Wl,-rpath,{tmp_path}"], check=True, capture_output=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split() == ["0", "5", "7", "9"]
