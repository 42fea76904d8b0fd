"""The machine's float32 FMA peak, measured with a small JIT-compiled FMA loop.

The loop keeps ACCUMULATORS independent vector accumulators (enough to cover the FMA
latency on two FMA ports) of the host's widest float32 vector (16 lanes with AVX-512,
8 with AVX2, 4 otherwise) and runs ``n`` iterations: 2 * ACCUMULATORS * lanes * n FLOPs.
It is compiled for the host CPU with llvmlite and run from one thread, then from one
thread per CPU at once (ctypes releases the GIL during the call).

    python benchmarks/fma_peak.py    # prints GFLOP/s on 1 thread and on all CPUs
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time

import llvmlite.binding as llvm
from llvmlite import ir

ACCUMULATORS = 12
_KEEP: list = []


def _lanes() -> int:
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 16
    if features.get("avx2") or features.get("avx"):
        return 8
    return 4


def _compile(lanes: int):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, lanes)
    i64 = ir.IntType(64)
    module = ir.Module(name="fma_peak")
    module.triple = llvm.get_process_triple()
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), name=f"llvm.fma.v{lanes}f32")
    fn = ir.Function(module, ir.FunctionType(f32, [i64]), name="fma_loop")
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    accs = [b.phi(vec) for _ in range(ACCUMULATORS)]
    x = ir.Constant(vec, [0.999999] * lanes)
    y = ir.Constant(vec, [1e-7] * lanes)
    new = [b.call(fma, [acc, x, y]) for acc in accs]
    i_next = b.add(i, ir.Constant(i64, 1))
    b.cbranch(b.icmp_signed("<", i_next, fn.args[0]), loop, done)
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(i_next, loop)
    for k, (acc, nxt) in enumerate(zip(accs, new)):
        acc.add_incoming(ir.Constant(vec, [float(k + 1)] * lanes), entry)
        acc.add_incoming(nxt, loop)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.fadd(total, v)
    s = b.extract_element(total, ir.Constant(ir.IntType(32), 0))
    for lane in range(1, lanes):
        s = b.fadd(s, b.extract_element(total, ir.Constant(ir.IntType(32), lane)))
    b.ret(s)
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    _KEEP.append(engine)
    return ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("fma_loop"))


def _run(fn, n: int, threads: int) -> float:
    """Seconds for ``threads`` simultaneous calls ``fn(n)``."""
    workers = [threading.Thread(target=fn, args=(n,)) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t0


def measure(n: int = 20_000_000, repeat: int = 5) -> dict:
    """Best GFLOP/s of ``repeat`` runs on 1 thread and on ``os.cpu_count()`` threads."""
    lanes = _lanes()
    fn = _compile(lanes)
    fn(1000)
    flops = 2.0 * ACCUMULATORS * lanes * n
    threads = os.cpu_count() or 1
    one = min(_run(fn, n, 1) for _ in range(repeat))
    every = min(_run(fn, n, threads) for _ in range(repeat))
    return {"lanes": lanes, "accumulators": ACCUMULATORS, "threads": threads,
            "gflops_1_thread": flops / one / 1e9, "gflops_all_threads": threads * flops / every / 1e9}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
