"""CUDA C code generation: hand-built kernel-form programs printed, compiled to PTX, checked.

The programs follow docs/gpu_kernel_form.md.  The tests assert on the structure of the
printed source (not its whitespace), compile it with the nvcc on PATH (skipped with the
reason where there is none: no GPU is needed to compile) and read the register and shared
memory use back from ``ptxas -v``.  Floor division is checked numerically by compiling the
generated helpers into a host program.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from scheduler_core.base.errors import BuildError
from scheduler_core.codegen.cuda_codegen import cuda_source, kernel_symbols
from scheduler_core.codegen.cuda_launch import launch_description, launch_json
from scheduler_core.driver.nvcc import (
    compile_cuda,
    find_tool,
    nvcc_available,
    parse_ptxas_info,
)
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T

ARCH = "sm_80"
NO_NVCC = nvcc_available()
needs_nvcc = pytest.mark.skipif(NO_NVCC is not None, reason=f"CUDA compile checks need nvcc: {NO_NVCC}")


# -- building blocks ------------------------------------------------------------------

def loop(var, extent, body, kind="serial", start=0):
    return T.For(var, E.const(start), E.as_expr(extent), kind, body)


def load(buf, idx, lanes=1):
    return E.BufferLoad(buf, idx, buf.dtype, lanes)


def buf(name, shape, dtype="float32", scope="global"):
    return T.Buffer(name, dtype, tuple(E.as_expr(s) for s in shape), scope)


def func(name, params, body, scalars=(), **attrs):
    return T.PrimFunc(name, tuple(params), tuple(scalars), body, {"target_kind": "cuda", **attrs})


def ptx_of(f):
    src = cuda_source(f, "cuda -arch=sm_80")
    return src, compile_cuda(src, ARCH, "ptx")


def kernel_bodies(src: str) -> dict:
    """symbol -> the text of its kernel (signature to closing brace)."""
    out = {}
    for m in re.finditer(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', src):
        start = m.start()
        end = src.find("\n}\n", start)
        out[m.group(1)] = src[start:end + 2]
    return out


def signature(src: str, symbol: str) -> list:
    m = re.search(rf"\b{symbol}\(([^)]*)\)", src)
    assert m, src
    return [p.strip() for p in m.group(1).split(",")]


# -- kernels ----------------------------------------------------------------------------

def vector_add(n, threads=64):
    A, B, C = (buf(x, (n,)) for x in "ABC")
    bx, tx = E.Var("i.outer"), E.Var("i.inner")
    i = bx * threads + tx
    body = T.IfThenElse(i < n, T.Store(C, i, load(A, i) + load(B, i)), likely=True)
    scalars = (n,) if isinstance(n, E.Var) else ()
    grid = (n + threads - 1) // threads
    return func("myadd", (A, B, C), loop(bx, grid, loop(tx, threads, body, "threadIdx.x"), "blockIdx.x"),
                scalars)


def tiled_matmul(M=64, N=64, K=64):
    """C = A @ B: 32x32 block tiles, 128 threads computing 2x4 each in a local accumulator;
    A and B tiles of depth 2 (64 elements each) fetched cooperatively by threads < 64."""
    BM = BN = 32
    BK = 2
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    As = buf("A.shared", (BM, BK), scope="shared")
    Bs = buf("B.shared", (BK, BN), scope="shared")
    Cl = buf("C.local", (2, 4), scope="local")
    by, bx, tx = E.Var("i.outer"), E.Var("j.outer"), E.Var("ij.inner")
    ko, ki, i, j = (E.Var(x) for x in ("k.outer", "k.inner", "i", "j"))
    r, c = tx // 8, tx % 8
    init = loop(i, 2, loop(j, 4, T.Store(Cl, i * 4 + j, E.const(0.0)), "unrolled"), "unrolled")
    fill_a = T.IfThenElse(tx < 64, T.Store(As, tx, load(A, (by * BM + tx // BK) * K + ko * BK + tx % BK)))
    fill_b = T.IfThenElse(tx < 64, T.Store(Bs, tx, load(B, (ko * BK + tx // BN) * N + bx * BN + tx % BN)))
    acc = T.Store(Cl, i * 4 + j, load(Cl, i * 4 + j)
                  + load(As, (r * 2 + i) * BK + ki) * load(Bs, ki * BN + c * 4 + j))
    compute = loop(ki, BK, loop(i, 2, loop(j, 4, acc, "unrolled"), "unrolled"), "unrolled")
    kloop = loop(ko, K // BK, T.seq(fill_a, fill_b, T.Barrier(), compute, T.Barrier()))
    write = loop(i, 2, loop(j, 4, T.Store(C, (by * BM + r * 2 + i) * N + bx * BN + c * 4 + j,
                                          load(Cl, i * 4 + j))))
    per_thread = T.Allocate(Cl, T.seq(init, kloop, write))
    body = loop(by, M // BM, loop(bx, N // BN, T.Allocate(As, T.Allocate(Bs, loop(
        tx, 128, per_thread, "threadIdx.x"))), "blockIdx.x"), "blockIdx.y")
    launch = {"name": "mm_kernel0", "grid": [N // BN, M // BM, 1], "block": [128, 1, 1],
              "shared_bytes": 2 * BM * BK * 4, "params": ["A", "B", "C"]}
    return func("mm", (A, B, C), body, kernels=[launch])


def vectorized(n=4096):
    """Each of 64 threads of a block handles 4 contiguous floats: aligned float4 loads and
    stores, a float2 store, an unaligned (scalar) vector store, a copy, a vector select and a
    predicated store, and a loop still marked vectorized."""
    A, B, C, D, F, G, H = (buf(x, (n,)) for x in "ABCDFGH")
    bx, tx, v = E.Var("bx"), E.Var("tx"), E.Var("v")
    t = bx * 64 + tx
    r4 = E.Ramp(t * 4, E.const(1), 4)
    r2 = E.Ramp(t * 2, E.const(1), 2)
    odd = E.Ramp(t * 4 + 1, E.const(1), 4)
    two = E.Broadcast(E.const(2.0), 4)
    stmts = [
        T.Store(C, r4, E.BinaryOp("add", E.BinaryOp("mul", load(A, r4, 4), two, "float32"),
                                  load(B, r4, 4), "float32")),
        T.Store(D, r2, E.BinaryOp("sub", load(A, r2, 2), E.Broadcast(E.const(1.0), 2), "float32")),
        T.Store(F, odd, E.Call("exp", (load(A, r4, 4),), "float32")),
        T.Store(G, r4, load(B, r4, 4)),
        T.Store(H, r4, E.Select(E.CmpOp("lt", r4, E.Broadcast(E.const(100), 4)), load(A, r4, 4),
                                E.Broadcast(E.const(0.0), 4), "float32")),
        T.Store(C, r4, load(A, r4, 4), predicate=E.CmpOp("lt", r4, E.Broadcast(E.const(n - 3), 4))),
        loop(v, 4, T.Store(D, t * 4 + v, load(B, t * 4 + v) + E.const(1.0)), "vectorized"),
    ]
    body = loop(bx, n // 256, loop(tx, 64, T.seq(*stmts), "threadIdx.x"), "blockIdx.x")
    return func("vec", (A, B, C, D, F, G, H), body)


def two_kernels(n=1000):
    """T = exp(A) (kernel 0) into a global intermediate; B = T * 2 (kernel 1)."""
    A, B = buf("A", (n,)), buf("B", (n,))
    Tb = buf("T_exp", (n,))
    b0, t0, b1, t1 = (E.Var(x) for x in ("b0", "t0", "b1", "t1"))
    i0, i1 = b0 * 128 + t0, b1 * 256 + t1
    k0 = loop(b0, (n + 127) // 128, loop(t0, 128, T.IfThenElse(
        i0 < n, T.Store(Tb, i0, E.call("exp", load(A, i0)))), "threadIdx.x"), "blockIdx.x")
    k1 = loop(b1, (n + 255) // 256, loop(t1, 256, T.IfThenElse(
        i1 < n, T.Store(B, i1, load(Tb, i1) * E.const(2.0))), "threadIdx.x"), "blockIdx.x")
    launches = [
        {"name": "chain_kernel0", "grid": [(n + 127) // 128, 1, 1], "block": [128, 1, 1],
         "shared_bytes": 0, "params": ["A", "T_exp"]},
        {"name": "chain_kernel1", "grid": [(n + 255) // 256, 1, 1], "block": [256, 1, 1],
         "shared_bytes": 0, "params": ["T_exp", "B"]},
    ]
    return func("chain", (A, B), T.Allocate(Tb, T.seq(k0, k1)), kernels=launches)


def symbolic_2d():
    """B[i, j] = A[i, j] + 1 over symbolic n x m, flat index through a host LetStmt."""
    n, m = E.Var("n"), E.Var("m")
    nm = E.Var("nm")
    A, B = buf("A", (n, m)), buf("B", (n, m))
    bx, tx = E.Var("bx"), E.Var("tx")
    i = bx * 256 + tx
    kern = loop(bx, (nm + 255) // 256, loop(tx, 256, T.IfThenElse(
        i < nm, T.Store(B, (i // m) * m + i % m, load(A, i) + E.const(1.0))), "threadIdx.x"), "blockIdx.x")
    return func("sym", (A, B), T.LetStmt(nm, n * m, kern), (n, m))


# -- tests: structure ---------------------------------------------------------------

def test_vector_add_structure():
    src = cuda_source(vector_add(E.Var("n")))
    assert 'extern "C" __global__ void __launch_bounds__(64) myadd_kernel0(' in src
    assert signature(src, "myadd_kernel0") == [
        "const float* __restrict__ A", "const float* __restrict__ B", "float* __restrict__ C", "int n"]
    assert "((int)blockIdx.x)" in src and "((int)threadIdx.x)" in src
    assert re.search(r"if \(\(\(\(\(int\)blockIdx\.x\) \* 64\) \+ \(\(int\)threadIdx\.x\)\) < n\)", src)
    assert "for (" not in src  # GPU-tagged loops are not loops
    # one statement per line, nested bodies indented
    body = kernel_bodies(src)["myadd_kernel0"].splitlines()
    assert body[1].startswith("  if (") and body[2].startswith("    C[") and body[3] == "  }"


def test_constant_vector_add_uses_plain_division():
    src = cuda_source(vector_add(1000))
    assert "floordiv" not in src and "long long" not in src


def test_tiled_matmul_structure():
    src = cuda_source(tiled_matmul())
    k = kernel_bodies(src)["mm_kernel0"]
    assert "__launch_bounds__(128)" in src
    assert re.search(r"__shared__ float A_shared\[64\];", k)
    assert re.search(r"__shared__ float B_shared\[64\];", k)
    assert re.search(r"^\s+float C_local\[8\];", k, re.M)
    assert k.count("__syncthreads();") == 2
    assert k.count("if ((((int)threadIdx.x) < 64)) {") + k.count("if (((int)threadIdx.x) < 64) {") == 2
    assert "#pragma unroll" in k
    assert "((int)blockIdx.y)" in k and "((int)blockIdx.x)" in k
    # tx // 2 and tx % 2 of a non-negative thread index print as / and %
    assert "floordiv" not in src and "floormod" not in src
    assert "(((int)threadIdx.x) / 2)" in k and "(((int)threadIdx.x) % 2)" in k
    # serial loops are for loops
    assert re.search(r"for \(int k_outer = 0; k_outer < 32; \+\+k_outer\) \{", k)


def test_barrier_ordering_in_k_loop():
    k = kernel_bodies(cuda_source(tiled_matmul()))["mm_kernel0"]
    fill = k.index("A_shared[((int)threadIdx.x)] =")
    first, second = [m.start() for m in re.finditer(r"__syncthreads\(\);", k)]
    mac = k.index("A_shared[(", fill + 10)  # the multiply-accumulate reads the tile
    assert fill < first < mac < second


def test_vectorized_loads_and_stores():
    src = cuda_source(vectorized())
    k = kernel_bodies(src)["vec_kernel0"]
    # aligned float4 loads hoisted, float4 store of the lanes
    assert re.search(r"const float4 _v\d+ = \*\(const float4\*\)\(A \+ ", k)
    assert re.search(r"\*\(float4\*\)\(C \+ .*\) = make_float4\(", k)
    assert re.search(r"_v\d+\.x", k) and re.search(r"_v\d+\.w", k)
    # float2
    assert re.search(r"\*\(float2\*\)\(D \+ .*\) = make_float2\(", k)
    # unaligned base (t*4 + 1): four scalar stores of expf
    assert len(re.findall(r"^\s+F\[", k, re.M)) == 4
    assert k.count("expf(") == 4
    # a plain copy is one float4 load and store
    assert re.search(r"\*\(float4\*\)\(G \+ .*\) = \*\(const float4\*\)\(B \+ ", k)
    # a vector select stays lazy per lane (loads only in the taken branch)
    assert len(re.findall(r"\? A\[", k)) == 4
    # a predicated store: per lane, guarded
    assert len(re.findall(r"if \(.*< 4093\)\) \{", k)) == 4 or len(re.findall(r"< 4093", k)) == 4
    # a loop still marked vectorized becomes an unrolled loop
    assert re.search(r"#pragma unroll\n\s+for \(int v = 0; v < 4; \+\+v\)", k)


def test_vector_store_reading_its_own_buffer_reads_all_lanes_first():
    n = 64
    A = buf("A", (n,))
    tx = E.Var("tx")
    # A[tx*4+1 .. +4] = A[tx*4 .. +4] (overlapping, unaligned): every load before any store
    src_r = E.Ramp(tx * 4, E.const(1), 4)
    dst_r = E.Ramp(tx * 4 + 1, E.const(1), 4)
    f = func("shift", (A,), loop(tx, 15, T.Store(A, dst_r, load(A, src_r, 4)), "threadIdx.x"))
    k = kernel_bodies(cuda_source(f))["shift_kernel0"]
    lines = [ln.strip() for ln in k.splitlines()[1:-1]]
    temps = [ln for ln in lines if ln.startswith("float _s")]
    stores = [ln for ln in lines if ln.startswith("A[")]
    assert len(temps) == 4 and len(stores) == 4
    assert max(lines.index(t) for t in temps) < min(lines.index(s) for s in stores)


def test_two_kernels_and_intermediate():
    f = two_kernels()
    src = cuda_source(f)
    assert kernel_symbols(f) == ["chain_kernel0", "chain_kernel1"]
    assert signature(src, "chain_kernel0") == ["const float* __restrict__ A", "float* __restrict__ T_exp"]
    assert signature(src, "chain_kernel1") == ["const float* __restrict__ T_exp", "float* __restrict__ B"]
    assert "__launch_bounds__(128) chain_kernel0" in src and "__launch_bounds__(256) chain_kernel1" in src
    assert "expf(A[" in src
    desc = json.loads(launch_json(f))
    assert [k["symbol"] for k in desc["kernels"]] == ["chain_kernel0", "chain_kernel1"]
    assert desc["intermediates"] == [{"name": "T_exp", "dtype": "float32", "shape": [1000]}]
    assert desc["kernels"][0]["args"] == [{"kind": "param", "index": 0, "name": "A"},
                                          {"kind": "intermediate", "index": 0, "name": "T_exp"}]
    assert desc["kernels"][1]["grid"] == [4, 1, 1] and desc["kernels"][1]["block"] == [256, 1, 1]


def test_launch_params_order_follows_the_launch_description():
    f = two_kernels()
    launches = [dict(k) for k in f.attrs["kernels"]]
    launches[0]["params"] = ["T_exp", "A"]
    g = T.PrimFunc(f.name, f.params, f.scalar_params, f.body, {**f.attrs, "kernels": launches})
    assert signature(cuda_source(g), "chain_kernel0") == [
        "float* __restrict__ T_exp", "const float* __restrict__ A"]
    launches[0]["params"] = ["T_exp"]  # A is used but not passed
    bad = T.PrimFunc(f.name, f.params, f.scalar_params, f.body, {**f.attrs, "kernels": launches})
    with pytest.raises(BuildError, match="missing from its launch"):
        cuda_source(bad)


def test_symbolic_shape_kernel():
    f = symbolic_2d()
    src = cuda_source(f)
    sig = signature(src, "sym_kernel0")
    # the host let nm = n*m is passed after the scalar params (as the GPU lowering lists it);
    # its range needs 64 bits
    assert sig == ["const float* __restrict__ A", "float* __restrict__ B", "int m", "long long nm"]
    assert "((long long)((int)blockIdx.x))" in src
    # i // m and i % m of a non-negative i by a non-negative m: C's / and % are floor here
    assert "floordiv" not in src and "floormod" not in src
    assert " / ((long long)m))" in src and " % ((long long)m))" in src
    desc = launch_description(f)
    assert desc["kernels"][0]["grid"][0] == "floordiv((nm + 255), 256)"
    assert desc["kernels"][0]["args"][2:] == [
        {"kind": "scalar", "index": 1, "name": "m", "dtype": "int32"},
        {"kind": "host", "name": "nm", "dtype": "int64"}]


def test_host_let_not_passed_is_recomputed_in_the_kernel():
    f = symbolic_2d()
    launch = {"name": "sym_kernel0", "grid": ["floordiv((nm + 255), 256)", 1, 1], "block": [256, 1, 1],
              "shared_bytes": 0, "params": ["A", "B", "n", "m"]}
    g = T.PrimFunc(f.name, f.params, f.scalar_params, f.body, {**f.attrs, "kernels": [launch]})
    src = cuda_source(g)
    assert signature(src, "sym_kernel0")[2:] == ["int n", "int m"]
    assert re.search(r"long long nm = \(\(\(long long\)n\) \* \(\(long long\)m\)\);", src)


def test_host_loop_around_kernels():
    """A scan-like host loop launching a kernel per step: the step is a kernel parameter."""
    A = buf("A", (10, 256))
    t, tx = E.Var("t"), E.Var("tx")
    kern = loop(tx, 256, T.Store(A, t * 256 + tx, load(A, (t - 1) * 256 + tx) + E.const(1.0)), "threadIdx.x")
    f = func("scan", (A,), loop(t, 9, kern, start=1))
    src = cuda_source(f)
    assert signature(src, "scan_kernel0") == ["float* __restrict__ A", "int t"]
    assert "for (" not in src
    assert launch_description(f)["kernels"][0]["args"][1] == {"kind": "host", "name": "t", "dtype": "int32"}


def test_int64_where_the_index_range_needs_it():
    big = buf("Big", (65536, 65536))
    out = buf("Out", (65536,))
    bx, tx, k = E.Var("bx"), E.Var("tx"), E.Var("k")
    red = loop(k, 65536, T.Store(out, bx * 256 + tx, load(out, bx * 256 + tx)
                                 + load(big, (bx * 256 + tx) * 65536 + k)))
    f = func("wide", (big, out), loop(bx, 256, loop(tx, 256, red, "threadIdx.x"), "blockIdx.x"))
    k_src = kernel_bodies(cuda_source(f))["wide_kernel0"]
    assert "(long long)" in k_src
    assert "Out[((((int)blockIdx.x) * 256) + ((int)threadIdx.x))]" in k_src  # int where it fits
    big_index = re.search(r"Big\[(.*)\]\);", k_src).group(1)
    assert "65536LL" in big_index or "(long long)" in big_index


def test_hostile_names_are_mangled():
    names = ["a*/\n#define x", "int", "threadIdx", "__shared__", "expf", "A", "A"]
    bufs = [buf(nm, (64,)) for nm in names]
    out = buf("out put", (64,))
    tx = E.Var("tx */ evil")
    total = load(bufs[0], tx)
    for b in bufs[1:]:
        total = total + load(b, tx)
    total = E.call("exp", total)
    f = func("f*/ #include <x>\n", (*bufs, out), loop(tx, 64, T.Store(out, tx, total), "threadIdx.x"))
    src = cuda_source(f)
    for line in src.splitlines():  # no user text starts a preprocessor line or leaves a comment
        assert not line.lstrip().startswith("#") or line in ("#include <cuda_fp16.h>", "#pragma unroll")
        if "#include <x>" in line:
            assert line.startswith("// ")
    sym = kernel_symbols(f)[0]
    assert re.fullmatch(r"[A-Za-z_]\w*", sym)
    params = [p.split()[-1] for p in signature(src, sym)]
    assert len(set(params)) == len(params)
    for p in params:
        assert re.fullmatch(r"[A-Za-z_]\w*", p)
        assert p not in ("int", "threadIdx", "__shared__", "expf") and not p.startswith("__")
    assert "expf(" in src  # the math function is not shadowed


def test_floordiv_of_possibly_negative_operand_has_floor_semantics():
    """floordiv/floormod by a constant of tx - 16 (negative for tx < 16) print floor helpers;
    the same of tx + 16 (non-negative) plain / and %.  The printed helper expressions are
    evaluated here with C's truncating / and % and must match Python's floor // and %."""
    A = buf("A", (64,), "int32")
    tx = E.Var("tx")
    neg, pos = tx - 16, tx + 16
    stmts = T.seq(T.Store(A, tx, neg // 4 + neg % 4 * 100 + neg // (-3) * 10000),
                  T.Store(A, tx + 32, pos // 4 + pos % 4 * 100))
    f = func("fd", (A,), loop(tx, 32, stmts, "threadIdx.x"))
    src = cuda_source(f)
    k = kernel_bodies(src)["fd_kernel0"]
    lines = [ln.strip() for ln in k.splitlines() if ln.strip().startswith("A[")]
    assert "floordiv_i32(" in lines[0] and "floormod_i32(" in lines[0]
    assert "floordiv" not in lines[1] and " / 4)" in lines[1] and " % 4)" in lines[1]

    def c_div(a, b):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q

    def c_mod(a, b):
        return a - c_div(a, b) * b

    class CInt(int):
        """An int with C's truncating / and %."""
        def __add__(self, o): return CInt(int(self) + int(o))
        def __radd__(self, o): return CInt(int(o) + int(self))
        def __sub__(self, o): return CInt(int(self) - int(o))
        def __rsub__(self, o): return CInt(int(o) - int(self))
        def __mul__(self, o): return CInt(int(self) * int(o))
        def __rmul__(self, o): return CInt(int(o) * int(self))
        def __truediv__(self, o): return CInt(c_div(int(self), int(o)))
        def __mod__(self, o): return CInt(c_mod(int(self), int(o)))
        def __xor__(self, o): return CInt(int(self) ^ int(o))
        def __neg__(self): return CInt(-int(self))

    # The helpers of the generated source, in Python with C semantics (ternaries rewritten).
    helper_src = src[src.index("int floordiv_i32"):src.index("\n}", src.index("int floormod_i32")) + 2]
    assert "(r != 0 && ((r ^ b) < 0)) ? q - 1 : q" in helper_src
    assert "(r != 0 && ((r ^ b) < 0)) ? r + b : r" in helper_src

    def floordiv_i32(a, b):
        a, b = CInt(a), CInt(b)
        q, r = a / b, a % b
        return q - 1 if (r != 0 and (r ^ b) < 0) else q

    def floormod_i32(a, b):
        a, b = CInt(a), CInt(b)
        r = a % b
        return r + b if (r != 0 and (r ^ b) < 0) else r

    for line, expr in zip(lines, (neg, pos)):
        rhs = line.split(" = ", 1)[1].rstrip(";")
        for t in range(32):
            py = rhs.replace("((int)threadIdx.x)", f"CInt({t})")
            got = eval(py, {"CInt": CInt, "floordiv_i32": floordiv_i32, "floormod_i32": floormod_i32})
            x = t - 16 if expr is neg else t + 16
            want = x // 4 + x % 4 * 100 + (x // -3 * 10000 if expr is neg else 0)
            assert got == want, (t, py)


@needs_nvcc
def test_floor_helpers_numerically_on_the_host(tmp_path):
    """The generated floordiv/floormod helpers (__host__ __device__) compiled into a host
    program with nvcc and run on the CPU against Python's floor division."""
    A = buf("A", (64,), "int64")
    tx = E.Var("tx")
    e64 = E.cast("int64", tx) - E.const(16, "int64")
    stmts = T.seq(T.Store(A, tx, e64 // E.const(5, "int64")),
                  T.Store(A, tx + 32, E.cast("int64", (tx - 16) % 5)))
    src = cuda_source(func("fd", (A,), loop(tx, 32, stmts, "threadIdx.x")))
    assert "floordiv_i64(" in src and "floormod_i32(" in src
    helpers = src[:src.index('extern "C"')]
    vals = list(range(-40, 41))
    divs = [1, 2, 3, 5, 7, -1, -2, -3, -7]
    prog = helpers + "\n#include <cstdio>\nint main() {\n"
    for a in vals:
        for b in divs:
            prog += f'  printf("%d %d %lld %lld\\n", floordiv_i32({a}, {b}), floormod_i32({a}, {b}), ' \
                    f"floordiv_i64({a}LL, {b}LL), floormod_i64({a}LL, {b}LL));\n"
    prog += "  return 0;\n}\n"
    cu = tmp_path / "floor.cu"
    cu.write_text(prog)
    exe = tmp_path / "floor"
    res = subprocess.run([find_tool("nvcc"), "-o", str(exe), str(cu)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split("\n")
    k = 0
    for a in vals:
        for b in divs:
            assert out[k].split() == [str(a // b), str(a % b)] * 2, (a, b, out[k])
            k += 1


def test_math_intrinsics_and_fast_math():
    A, B = buf("A", (64,)), buf("B", (64,))
    tx = E.Var("tx")
    x = load(A, tx)
    val = (E.call("exp", x) + E.call("sqrt", x) + E.call("erf", x) + E.call("tanh", x)
           + E.call("rsqrt", x) + E.call("sigmoid", x) + E.call("log", x) + E.call("round", x)
           + E.binary("max", x, E.const(-3.4028234663852886e38)) + E.binary("min", x, E.const(0.5)))
    body = loop(tx, 64, T.Store(B, tx, val), "threadIdx.x")
    src = cuda_source(func("m", (A, B), body))
    for fn in ("expf(", "sqrtf(", "erff(", "tanhf(", "rsqrtf(", "logf(", "rintf(", "fmaxf(", "fminf("):
        assert fn in src, fn
    assert "__expf" not in src
    assert "(1.0f / (1.0f + expf((-A[" in src
    assert "-3.4028235e+38f" in src  # float32's lowest, exactly
    fast = cuda_source(func("m", (A, B), body, fast_math=True))
    assert "__expf(" in fast and "__logf(" in fast and "expf(A" not in fast.replace("__expf(A", "")


def casts_source():
    A = buf("A", (64,), "int32")
    F = buf("F", (64,), "float64")
    H = buf("H", (64,), "float16")
    tx = E.Var("tx")
    xi = load(A, tx)
    stmts = T.seq(
        T.Store(A, tx, E.binary("max", E.binary("min", xi, E.const(7)), E.const(-2147483648))),
        T.Store(F, tx, E.select(xi > 0, E.cast("float64", xi), E.const(float("inf"), "float64"))),
        T.Store(H, tx, E.cast("float16", E.call("exp", E.cast("float32", load(H, tx))))),
        T.Store(A, tx, E.Call("abs", (xi,), "int32")),
    )
    return cuda_source(func("c", (A, F, H), loop(tx, 64, stmts, "threadIdx.x")))


def test_casts_select_int_min_max_and_constants():
    src = casts_source()
    assert "#include <cuda_fp16.h>" in src
    assert "max(min(A[((int)threadIdx.x)], 7), (-2147483647 - 1))" in src
    assert "((double)A[" in src and "__longlong_as_double(0x7ff0000000000000LL)" in src
    assert "((half)expf(((float)H[" in src
    assert "abs(A[" in src


def test_not_kernel_form_is_a_build_error():
    A = buf("A", (4,))
    i = E.Var("i")
    par = func("p", (A,), loop(i, 4, T.Store(A, i, E.const(1.0)), "parallel"))
    with pytest.raises(BuildError, match="parallel"):
        cuda_source(par)
    g = buf("G", (4,))  # a global buffer allocated inside a kernel
    inside = func("q", (A,), loop(i, 4, T.Allocate(g, T.Store(A, i, load(g, i))), "threadIdx.x"))
    with pytest.raises(BuildError, match="only shared and local buffers"):
        cuda_source(inside)
    with pytest.raises(BuildError, match="cuda target"):
        cuda_source(vector_add(8), "llvm")


def test_one_thread_kernel_without_gpu_loops():
    A = buf("A", (4,))
    i = E.Var("i")
    f = func("one", (A,), loop(i, 4, T.Store(A, i, E.const(1.0))))
    src = cuda_source(f)
    assert "__launch_bounds__(1) one_kernel0" in src
    assert launch_description(f)["kernels"][0]["grid"] == [1, 1, 1]


def test_parse_ptxas_info():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k0' for 'sm_80'
ptxas info    : Function properties for k0
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, 4096 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'k1' for 'sm_80'
ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 360 bytes cmem[0]
"""
    info = parse_ptxas_info(log)
    assert info["k0"] == {"registers": 40, "shared_bytes": 4096, "spill_stores": 4, "spill_loads": 12,
                          "stack_bytes": 8, "cmem_bytes": 380}
    assert info["k1"]["registers"] == 8 and info["k1"]["shared_bytes"] == 0
