"""The thread pool's code, emitted as LLVM IR (:class:`PoolEmitter`): claiming, waiting, threads.

How a module carries the pool and how a process shares one is ``thread_pool``'s docstring;
this is the algorithm of ``run`` and of the workers.

The job.  One 64-bit word ``claim = generation << 32 | chunks left`` is the only thing a
worker changes to take a chunk: compare-and-swap ``(g, r) -> (g, r - 1)`` with ``r > 0``,
then it runs chunk ``C - r``.  The job descriptor (function, closure, C) is read only after
a successful claim: a claimed chunk of generation g has not completed, so the master of g
has not returned and the descriptor is still g's.  A stale worker (one that saw an older
generation) fails its compare-and-swap and stops.  Each completed chunk adds 1 to ``done``;
the master waits for ``done == C`` (acquire), so the outputs of every chunk are visible
when the call returns.

Waiting.  A worker spins on the futex word ``seq`` (the generation of the last published
job) for :data:`WORKER_SPIN_NS`, then sleeps in ``futex(FUTEX_WAIT_PRIVATE)`` through libc's
``syscall``.  The master stores ``seq`` and then reads the sleeper count, the worker adds
itself to the count and then the kernel compares ``seq`` (both sequentially consistent), so
a wake-up is never lost and the master makes no system call while the workers spin.
The master, once no chunk is left to claim, spins for twice its own mean chunk time (a
running worker's last chunk ends by then; clamped to :data:`MASTER_SPIN_NS` ..
:data:`MASTER_SPIN_MAX_NS`), then calls ``sched_yield`` for :data:`MASTER_YIELD_NS`, then
sleeps on the futex word ``done``, which the worker that completes the last chunk wakes
(the same announce-then-check handshake, on ``waiting``).  A fixed short spin then sleep
cost about 10% of the quiet time (matmul 512^3: the master slept while the worker finished
its last 150 us chunk, then waited to be woken); spinning for the chunk time removes that.
The futex bounds the CPU burnt when a worker holding a chunk stays parked for long: under
group scheduling (autogroups) ``sched_yield`` only yields to threads of the caller's own
group, so it is still a busy wait as far as other sessions are concerned.  Workers block
all signals, so signals reach the caller's threads.

Threads.  ``T = num_threads`` as built (0: ``OMP_NUM_THREADS`` if it is a positive integer,
else the CPUs of the process's affinity mask, read once; the same rule as
``parallel.default_num_threads``), at most :data:`MAX_THREADS`; the pool grows to the
largest ``T - 1`` asked for and only workers ``0 .. T-2`` take part in a job.  When a thread
cannot be created, the caller does the chunks the missing thread would have taken.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.base.errors import BuildError

from . import llvm_types as L

# A worker with no job spins this long before it sleeps (ns): long enough to stay awake
# between back-to-back parallel loops (a few microseconds apart when called from Python),
# short enough not to take much CPU from other processes on a shared machine.
WORKER_SPIN_NS = 50_000
# The master waits for chunks still running on workers by spinning for two of its own chunk
# times, clamped to [MASTER_SPIN_NS, MASTER_SPIN_MAX_NS] (ns), then calling sched_yield for
# MASTER_YIELD_NS more, then sleeping on a futex until the last chunk wakes it.
MASTER_SPIN_NS = 20_000
MASTER_SPIN_MAX_NS = 1_000_000
MASTER_YIELD_NS = 2_000_000
MAX_THREADS = 256
PAUSES_PER_CLOCK_READ = 32
# Linux system call numbers of futex by architecture (first component of the triple).
SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "powerpc64le": 221}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
CLOCK_MONOTONIC = 1
SIG_BLOCK = 0
INT_MAX = 2**31 - 1

RUN_TYPE = ir.FunctionType(L.VOID, [L.PTR, L.PTR, L.I64, L.I32, L.I32])  # fn, closure, extent, T, k
CHUNK_TYPE = ir.FunctionType(L.VOID, [L.PTR, L.I64, L.I64])  # closure, chunk, chunks

_STATE_I32 = ("lock", "pid", "nworkers", "sleeping", "seq", "limit", "default_threads", "done", "waiting")
_STATE_I64 = ("claim", "nchunks")
_STATE_PTR = ("fn", "closure")



def store_atomic(bld: ir.IRBuilder, value, ptr, ordering: str, align: int) -> None:
    """``store atomic`` (llvmlite's ``IRBuilder.store_atomic`` needs typed pointers)."""
    bld._insert(ir.instructions.StoreAtomicInstr(bld.block, value, ptr, ordering, align))


def as_function(bld: ir.IRBuilder, value, fnty: ir.FunctionType):
    """``value`` (an opaque ``ptr``) as a callable of type ``fnty`` (a no-op bitcast that
    llvmlite does not fold away, so ``IRBuilder.call`` knows the function type)."""
    cast = ir.instructions.CastInstr(bld.block, "bitcast", value, fnty.as_pointer())
    bld._insert(cast)
    return cast


class PoolEmitter:
    """Emits the pool's state and functions into a module (``linkage`` of ``run``)."""

    def __init__(self, module: ir.Module, linkage: str, run_name: str = "__autosched_pool_run_local",
                 optimize: bool = False):
        self.module = module
        self.optimize = optimize  # False: optnone, so the kernel's O3 skips the pool (build time)
        self.g = {}
        for names, typ, init in ((_STATE_I32, L.I32, 0), (_STATE_I64, L.I64, 0), (_STATE_PTR, L.PTR, None)):
            for name in names:
                gv = ir.GlobalVariable(module, typ, f"__autosched_pool_s_{name}")
                gv.linkage = "internal"
                gv.initializer = ir.Constant(typ, init)
                gv.align = 64  # one cache line each: the master and the workers write different ones
                self.g[name] = gv
        self.decl = {
            "getpid": ir.FunctionType(L.I32, []),
            "sched_yield": ir.FunctionType(L.I32, []),
            "syscall": ir.FunctionType(L.I64, [L.I64], var_arg=True),
            "clock_gettime": ir.FunctionType(L.I32, [L.I32, L.PTR]),
            "pthread_create": ir.FunctionType(L.I32, [L.PTR, L.PTR, L.PTR, L.PTR]),
            "pthread_detach": ir.FunctionType(L.I32, [L.I64]),
            "pthread_sigmask": ir.FunctionType(L.I32, [L.I32, L.PTR, L.PTR]),
            "getenv": ir.FunctionType(L.PTR, [L.PTR]),
            "atoi": ir.FunctionType(L.I32, [L.PTR]),
            "sched_getaffinity": ir.FunctionType(L.I32, [L.I32, L.I64, L.PTR]),
        }
        arch = llvm.get_process_triple().split("-")[0]
        if arch not in SYS_FUTEX:
            raise BuildError(f"the thread pool knows no futex system call number for {arch}")
        self.sys_futex = SYS_FUTEX[arch]
        self.pause_fn = (L.declare(module, "llvm.x86.sse2.pause", L.VOID, [])
                         if arch in ("x86_64", "i686", "i386") else None)
        self.now = self._now()
        self.take = self._take()
        self.worker = self._worker()
        self.spawn = self._spawn()
        self.default_threads = self._default_threads()
        self.run = self._run(run_name, linkage)

    # -- helpers ------------------------------------------------------------------
    def _fn(self, name: str, fnty: ir.FunctionType, linkage: str = "internal"):
        """A new function and a builder in its first block (the entry block before it holds
        only the allocas, see :meth:`_alloca`)."""
        fn = ir.Function(self.module, fnty, name)
        fn.linkage = linkage
        fn.attributes.add("nounwind")
        if linkage == "internal":
            fn.attributes.add("noinline")
            if not self.optimize:
                fn.attributes.add("optnone")
        entry, body = fn.append_basic_block("entry"), fn.append_basic_block("body")
        ir.IRBuilder(entry).branch(body)
        return fn, ir.IRBuilder(body)

    def _libc(self, bld, name: str, args):
        fnty = self.decl[name]
        fn = self.module.globals.get(name) or ir.Function(self.module, fnty, name)
        return bld.call(fn, args)

    def _pause(self, bld) -> None:
        if self.pause_fn is not None:
            bld.call(self.pause_fn, [])

    def _futex(self, bld, op: int, val, word: str = "seq") -> None:
        null = ir.Constant(L.PTR, None)
        self._libc(bld, "syscall", [ir.Constant(L.I64, self.sys_futex), self.g[word],
                                    ir.Constant(L.I64, op), val, null, null, ir.Constant(L.I64, 0)])

    @staticmethod
    def _const(v: int, t=L.I32):
        return ir.Constant(t, v)

    @staticmethod
    def _alloca(fn, typ):
        """An ``alloca`` in ``fn``'s entry block (never inside a loop)."""
        entry = ir.IRBuilder(fn.blocks[0])
        entry.position_before(fn.blocks[0].terminator)
        return entry.alloca(typ)

    def _spin_then(self, bld, fn, ready_fn, spin_ns, after_spin):
        """Emit: spin (pause) until ``ready_fn(bld)`` is true or ``spin_ns`` (an int or an i64
        value) passed, then loop calling ``after_spin(bld, start)`` (``start``: ``now()`` when
        the wait began) between checks.  Returns with ``bld`` in the ready block."""
        start = self.now_call(bld)
        count = self._alloca(fn, L.I32)
        bld.store(self._const(0), count)
        spin_bb, pause_bb, clock_bb = (fn.append_basic_block(n) for n in ("spin", "pause", "clock"))
        slow_bb, ready_bb = fn.append_basic_block("slow"), fn.append_basic_block("ready")
        bld.branch(spin_bb)
        bld.position_at_end(spin_bb)
        bld.cbranch(ready_fn(bld), ready_bb, pause_bb)
        bld.position_at_end(pause_bb)
        self._pause(bld)
        c = bld.add(bld.load(count, typ=L.I32), self._const(1))
        bld.store(c, count)
        every = bld.icmp_unsigned("==", bld.and_(c, self._const(PAUSES_PER_CLOCK_READ - 1)), self._const(0))
        bld.cbranch(every, clock_bb, spin_bb)
        bld.position_at_end(clock_bb)
        waited = bld.sub(self.now_call(bld), start)
        limit = self._const(spin_ns, L.I64) if isinstance(spin_ns, int) else spin_ns
        bld.cbranch(bld.icmp_signed("<", waited, limit), spin_bb, slow_bb)
        bld.position_at_end(slow_bb)
        after_spin(bld, start)
        bld.cbranch(ready_fn(bld), ready_bb, slow_bb)
        bld.position_at_end(ready_bb)

    def now_call(self, bld):
        return bld.call(self.now, [])

    # -- functions ----------------------------------------------------------------
    def _now(self):
        """``i64 now()``: CLOCK_MONOTONIC in nanoseconds."""
        fn, bld = self._fn("__autosched_pool_now", ir.FunctionType(L.I64, []))
        ts_t = ir.LiteralStructType([L.I64, L.I64])
        ts = self._alloca(fn, ts_t)
        self._libc(bld, "clock_gettime", [self._const(CLOCK_MONOTONIC), ts])
        sec = bld.load(bld.gep(ts, [self._const(0), self._const(0)], source_etype=ts_t), typ=L.I64)
        nsec = bld.load(bld.gep(ts, [self._const(0), self._const(1)], source_etype=ts_t), typ=L.I64)
        bld.ret(bld.add(bld.mul(sec, self._const(1_000_000_000, L.I64)), nsec))
        return fn

    def _take(self):
        """``i64 take(i32 gen)``: run chunks of job ``gen`` until none is left (or a newer job);
        returns how many it ran."""
        fn, bld = self._fn("__autosched_pool_take", ir.FunctionType(L.I64, [L.I32]))
        gen = bld.zext(fn.args[0], L.I64)
        g = self.g
        ran = self._alloca(fn, L.I64)
        bld.store(self._const(0, L.I64), ran)
        loop_bb, have_bb, claim_bb, run_bb, done_bb = (
            fn.append_basic_block(n) for n in ("loop", "have", "claim", "run", "done"))
        bld.branch(loop_bb)
        bld.position_at_end(loop_bb)
        word = bld.load_atomic(g["claim"], "monotonic", 8, typ=L.I64)
        same = bld.icmp_unsigned("==", bld.lshr(word, self._const(32, L.I64)), gen)
        bld.cbranch(same, have_bb, done_bb)
        bld.position_at_end(have_bb)
        left = bld.and_(word, self._const(0xFFFFFFFF, L.I64))
        bld.cbranch(bld.icmp_unsigned("!=", left, self._const(0, L.I64)), claim_bb, done_bb)
        bld.position_at_end(claim_bb)
        res = bld.cmpxchg(g["claim"], word, bld.sub(word, self._const(1, L.I64)), "acq_rel", "monotonic")
        bld.cbranch(bld.extract_value(res, 1), run_bb, loop_bb)
        bld.position_at_end(run_bb)  # chunk claimed: the descriptor is this job's
        body = bld.load_atomic(g["fn"], "monotonic", 8, typ=CHUNK_TYPE.as_pointer())
        closure = bld.load_atomic(g["closure"], "monotonic", 8, typ=L.PTR)
        nchunks = bld.load_atomic(g["nchunks"], "monotonic", 8, typ=L.I64)
        bld.call(body, [closure, bld.sub(nchunks, left), nchunks])
        bld.store(bld.add(bld.load(ran, typ=L.I64), self._const(1, L.I64)), ran)
        # the last chunk wakes the master if it sleeps (seq_cst: see the master's wait in run)
        last = bld.add(bld.atomic_rmw("add", g["done"], self._const(1), "seq_cst"), self._const(1))
        check_bb, wake_bb = fn.append_basic_block("check_master"), fn.append_basic_block("wake_master")
        bld.cbranch(bld.icmp_unsigned("==", bld.zext(last, L.I64), nchunks), check_bb, loop_bb)
        bld.position_at_end(check_bb)
        asleep = bld.load_atomic(g["waiting"], "seq_cst", 4, typ=L.I32)
        bld.cbranch(bld.icmp_unsigned("!=", asleep, self._const(0)), wake_bb, loop_bb)
        bld.position_at_end(wake_bb)
        self._futex(bld, FUTEX_WAKE_PRIVATE, self._const(1, L.I64), "done")
        bld.branch(loop_bb)
        bld.position_at_end(done_bb)
        bld.ret(bld.load(ran, typ=L.I64))
        return fn

    def _worker(self):
        """``ptr worker(ptr arg)``: arg = (generation seen at start) << 32 | worker id."""
        fn, bld = self._fn("__autosched_pool_worker", ir.FunctionType(L.PTR, [L.PTR]))
        g = self.g
        mask = self._alloca(fn, ir.ArrayType(L.I8, 128))  # a sigset_t with every signal
        memset = L.declare(self.module, "llvm.memset.p0.i64", L.VOID, [L.PTR, L.I8, L.I64, L.I1])
        bld.call(memset, [mask, ir.Constant(L.I8, 0xFF), self._const(128, L.I64), ir.Constant(L.I1, 0)])
        self._libc(bld, "pthread_sigmask", [self._const(SIG_BLOCK), mask, ir.Constant(L.PTR, None)])
        arg = bld.ptrtoint(fn.args[0], L.I64)
        wid = bld.trunc(arg, L.I32)
        seen = self._alloca(fn, L.I32)
        bld.store(bld.trunc(bld.lshr(arg, self._const(32, L.I64)), L.I32), seen)
        cur = self._alloca(fn, L.I32)
        top_bb = fn.append_basic_block("wait")
        bld.branch(top_bb)
        bld.position_at_end(top_bb)

        def new_job(b):
            s = b.load_atomic(g["seq"], "acquire", 4, typ=L.I32)
            b.store(s, cur)
            return b.icmp_unsigned("!=", s, b.load(seen, typ=L.I32))

        def sleep(b, _start):
            b.atomic_rmw("add", g["sleeping"], self._const(1), "seq_cst")
            self._futex(b, FUTEX_WAIT_PRIVATE, b.zext(b.load(seen, typ=L.I32), L.I64))
            b.atomic_rmw("sub", g["sleeping"], self._const(1), "seq_cst")

        self._spin_then(bld, fn, new_job, WORKER_SPIN_NS, sleep)
        s = bld.load(cur, typ=L.I32)
        bld.store(s, seen)
        limit = bld.load_atomic(g["limit"], "monotonic", 4, typ=L.I32)
        take_bb = fn.append_basic_block("take")
        bld.cbranch(bld.icmp_signed("<", wid, limit), take_bb, top_bb)
        bld.position_at_end(take_bb)
        bld.call(self.take, [s])
        bld.branch(top_bb)
        return fn

    def _spawn(self):
        """``void spawn(i32 want)`` (lock held): start workers until there are ``want``."""
        fn, bld = self._fn("__autosched_pool_spawn", ir.FunctionType(L.VOID, [L.I32]))
        g = self.g
        tid = self._alloca(fn, L.I64)
        loop_bb, make_bb, ok_bb, done_bb = (fn.append_basic_block(n) for n in ("loop", "make", "ok", "done"))
        bld.branch(loop_bb)
        bld.position_at_end(loop_bb)
        n = bld.load_atomic(g["nworkers"], "monotonic", 4, typ=L.I32)
        bld.cbranch(bld.icmp_signed("<", n, fn.args[0]), make_bb, done_bb)
        bld.position_at_end(make_bb)
        seq = bld.zext(bld.load_atomic(g["seq"], "monotonic", 4, typ=L.I32), L.I64)
        arg = bld.or_(bld.shl(seq, self._const(32, L.I64)), bld.zext(n, L.I64))
        rc = self._libc(bld, "pthread_create", [tid, ir.Constant(L.PTR, None), self.worker,
                                                bld.inttoptr(arg, L.PTR)])
        bld.cbranch(bld.icmp_signed("==", rc, self._const(0)), ok_bb, done_bb)
        bld.position_at_end(ok_bb)
        self._libc(bld, "pthread_detach", [bld.load(tid, typ=L.I64)])
        store_atomic(bld, bld.add(n, self._const(1)), g["nworkers"], "monotonic", 4)
        bld.branch(loop_bb)
        bld.position_at_end(done_bb)
        bld.ret_void()
        return fn

    def _default_threads(self):
        """``i32 default_threads()``: OMP_NUM_THREADS if positive, else the affinity mask's CPUs."""
        fn, bld = self._fn("__autosched_pool_default_threads", ir.FunctionType(L.I32, []))
        g = self.g
        known_bb, env_bb, env_ok_bb, mask_bb, store_bb = (
            fn.append_basic_block(n) for n in ("known", "env", "env_ok", "mask", "store"))
        cached = bld.load_atomic(g["default_threads"], "monotonic", 4, typ=L.I32)
        bld.cbranch(bld.icmp_signed(">", cached, self._const(0)), known_bb, env_bb)
        bld.position_at_end(known_bb)
        bld.ret(cached)
        bld.position_at_end(env_bb)
        name = b"OMP_NUM_THREADS\0"
        name_t = ir.ArrayType(L.I8, len(name))
        name_g = ir.GlobalVariable(self.module, name_t, "__autosched_pool_env_name")
        name_g.linkage = "internal"
        name_g.global_constant = True
        name_g.initializer = ir.Constant(name_t, bytearray(name))
        env = self._libc(bld, "getenv", [name_g])
        from_env = self._alloca(fn, L.I32)
        bld.store(self._const(0), from_env)
        bld.cbranch(bld.icmp_unsigned("!=", env, ir.Constant(L.PTR, None)), env_ok_bb, mask_bb)
        bld.position_at_end(env_ok_bb)
        v = self._libc(bld, "atoi", [env])
        bld.store(v, from_env)
        bld.cbranch(bld.icmp_signed(">", v, self._const(0)), store_bb, mask_bb)
        bld.position_at_end(mask_bb)
        words_t = ir.ArrayType(L.I64, 16)  # a cpu_set_t of 1024 CPUs
        words = self._alloca(fn, words_t)
        bld.store(ir.Constant(words_t, [0] * 16), words)
        rc = self._libc(bld, "sched_getaffinity", [self._const(0), self._const(128, L.I64), words])
        ctpop = L.declare(self.module, "llvm.ctpop.i64", L.I64, [L.I64])
        count_bb, sum_bb = fn.append_basic_block("count"), fn.append_basic_block("sum")
        pre = bld.block
        bld.branch(count_bb)
        bld.position_at_end(count_bb)
        k = bld.phi(L.I64)
        acc = bld.phi(L.I64)
        k.add_incoming(self._const(0, L.I64), pre)
        acc.add_incoming(self._const(0, L.I64), pre)
        w = bld.load(bld.gep(words, [self._const(0, L.I64), k], source_etype=words_t), typ=L.I64)
        acc_next = bld.add(acc, bld.call(ctpop, [w]))
        k_next = bld.add(k, self._const(1, L.I64))
        k.add_incoming(k_next, count_bb)
        acc.add_incoming(acc_next, count_bb)
        bld.cbranch(bld.icmp_unsigned("<", k_next, self._const(16, L.I64)), count_bb, sum_bb)
        bld.position_at_end(sum_bb)
        total = acc_next
        count = bld.trunc(total, L.I32)
        good = bld.and_(bld.icmp_signed("==", rc, self._const(0)), bld.icmp_signed(">", count, self._const(0)))
        bld.store(bld.select(good, count, self._const(1)), from_env)
        bld.branch(store_bb)
        bld.position_at_end(store_bb)
        result = bld.load(from_env, typ=L.I32)
        store_atomic(bld, result, g["default_threads"], "monotonic", 4)
        bld.ret(result)
        return fn

    def _run(self, name: str, linkage: str):
        """``void run(fn, closure, extent, T, k)``: the master's side (module docstring)."""
        fn, bld = self._fn(name, RUN_TYPE, linkage)
        body, closure, extent, nthreads, per_thread = fn.args
        g = self.g
        c = self._const
        ret_bb, threads_bb, serial_bb = (fn.append_basic_block(n) for n in ("ret", "threads", "serial"))
        bld.cbranch(bld.icmp_signed("<=", extent, c(0, L.I64)), ret_bb, threads_bb)
        bld.position_at_end(ret_bb)
        bld.ret_void()
        # T, and C chunks
        bld.position_at_end(threads_bb)
        dflt_bb, have_bb = fn.append_basic_block("default"), fn.append_basic_block("have_threads")
        bld.cbranch(bld.icmp_signed(">", nthreads, c(0)), have_bb, dflt_bb)
        bld.position_at_end(dflt_bb)
        dflt = bld.call(self.default_threads, [])
        bld.branch(have_bb)
        bld.position_at_end(have_bb)
        t = bld.phi(L.I32)
        t.add_incoming(nthreads, threads_bb)
        t.add_incoming(dflt, dflt_bb)
        t = bld.select(bld.icmp_signed(">", t, c(MAX_THREADS)), c(MAX_THREADS), t)
        k = bld.select(bld.icmp_signed(">", per_thread, c(0)), per_thread, c(1))
        want = bld.mul(bld.zext(t, L.I64), bld.zext(k, L.I64))
        nchunks = bld.select(bld.icmp_signed("<", extent, want), extent, want)
        many = bld.and_(bld.icmp_signed(">", t, c(1)), bld.icmp_signed(">", nchunks, c(1, L.I64)))
        lock_bb, cas_bb, locked_bb = (fn.append_basic_block(n) for n in ("try_lock", "cas", "locked"))
        bld.cbranch(many, lock_bb, serial_bb)
        # try-lock: the lock word holds the pid of the process whose thread holds it (0: free); a
        # value other than our pid was inherited through fork from a thread that is not in
        # this process, so the lock is free for us
        bld.position_at_end(lock_bb)
        me = self._libc(bld, "getpid", [])
        held = bld.load_atomic(g["lock"], "monotonic", 4, typ=L.I32)
        bld.cbranch(bld.icmp_signed("==", held, me), serial_bb, cas_bb)
        bld.position_at_end(cas_bb)
        got = bld.extract_value(bld.cmpxchg(g["lock"], held, me, "acquire", "monotonic"), 1)
        bld.cbranch(got, locked_bb, serial_bb)
        # a child forked after the pool started has none of its threads: forget them
        bld.position_at_end(locked_bb)
        reset_bb, pool_bb = fn.append_basic_block("reset"), fn.append_basic_block("pool")
        owner = bld.load_atomic(g["pid"], "monotonic", 4, typ=L.I32)
        bld.cbranch(bld.icmp_signed("==", owner, me), pool_bb, reset_bb)
        bld.position_at_end(reset_bb)
        for field in ("nworkers", "sleeping", "default_threads"):
            store_atomic(bld, c(0), g[field], "monotonic", 4)
        store_atomic(bld, me, g["pid"], "monotonic", 4)
        bld.branch(pool_bb)
        # the master: workers, publish, take chunks, wait for every chunk
        bld.position_at_end(pool_bb)
        bld.call(self.spawn, [bld.sub(t, c(1))])
        nworkers = bld.load_atomic(g["nworkers"], "monotonic", 4, typ=L.I32)
        publish_bb, unlock_serial_bb = fn.append_basic_block("publish"), fn.append_basic_block("no_workers")
        bld.cbranch(bld.icmp_signed(">", nworkers, c(0)), publish_bb, unlock_serial_bb)
        bld.position_at_end(unlock_serial_bb)
        store_atomic(bld, c(0), g["lock"], "release", 4)
        bld.branch(serial_bb)
        bld.position_at_end(publish_bb)
        store_atomic(bld, body, g["fn"], "monotonic", 8)
        store_atomic(bld, closure, g["closure"], "monotonic", 8)
        store_atomic(bld, nchunks, g["nchunks"], "monotonic", 8)
        store_atomic(bld, bld.sub(t, c(1)), g["limit"], "monotonic", 4)
        store_atomic(bld, c(0), g["done"], "monotonic", 4)
        gen = bld.add(bld.load_atomic(g["seq"], "monotonic", 4, typ=L.I32), c(1))
        word = bld.or_(bld.shl(bld.zext(gen, L.I64), c(32, L.I64)), nchunks)
        store_atomic(bld, word, g["claim"], "release", 8)
        store_atomic(bld, gen, g["seq"], "seq_cst", 4)
        sleepers = bld.load_atomic(g["sleeping"], "seq_cst", 4, typ=L.I32)
        wake_bb, take_bb = fn.append_basic_block("wake"), fn.append_basic_block("take")
        bld.cbranch(bld.icmp_signed(">", sleepers, c(0)), wake_bb, take_bb)
        bld.position_at_end(wake_bb)
        self._futex(bld, FUTEX_WAKE_PRIVATE, c(INT_MAX, L.I64))
        bld.branch(take_bb)
        bld.position_at_end(take_bb)
        started = self.now_call(bld)
        ran = bld.call(self.take, [gen])
        # spin for two of the master's own chunk times (the chunk a running worker still has
        # should end by then), at least MASTER_SPIN_NS and at most MASTER_SPIN_MAX_NS
        per_chunk = bld.sdiv(bld.sub(self.now_call(bld), started),
                             bld.select(bld.icmp_signed(">", ran, c(0, L.I64)), ran, c(1, L.I64)))
        budget = bld.mul(per_chunk, c(2, L.I64))
        budget = bld.select(bld.icmp_signed("<", budget, c(MASTER_SPIN_NS, L.I64)), c(MASTER_SPIN_NS, L.I64), budget)
        budget = bld.select(bld.icmp_signed(">", budget, c(MASTER_SPIN_MAX_NS, L.I64)),
                            c(MASTER_SPIN_MAX_NS, L.I64), budget)

        def all_done(b):
            done = b.zext(b.load_atomic(g["done"], "acquire", 4, typ=L.I32), L.I64)
            return b.icmp_unsigned("==", done, nchunks)

        def wait(b, start):  # sched_yield for MASTER_YIELD_NS more, then sleep on the futex
            yield_bb, futex_bb, sleep_bb, after_bb = (
                fn.append_basic_block(n) for n in ("master_yield", "master_futex", "master_sleep", "master_awake"))
            waited = b.sub(self.now_call(b), start)
            b.cbranch(b.icmp_signed("<", waited, b.add(budget, c(MASTER_YIELD_NS, L.I64))), yield_bb, futex_bb)
            b.position_at_end(yield_bb)
            self._libc(b, "sched_yield", [])
            b.branch(after_bb)
            b.position_at_end(futex_bb)  # announce, then sleep unless done changed since it was read
            store_atomic(b, c(1), g["waiting"], "seq_cst", 4)
            done = b.load_atomic(g["done"], "seq_cst", 4, typ=L.I32)
            b.cbranch(b.icmp_unsigned("!=", b.zext(done, L.I64), nchunks), sleep_bb, after_bb)
            b.position_at_end(sleep_bb)
            self._futex(b, FUTEX_WAIT_PRIVATE, b.zext(done, L.I64), "done")
            b.branch(after_bb)
            b.position_at_end(after_bb)

        self._spin_then(bld, fn, all_done, budget, wait)
        store_atomic(bld, c(0), g["waiting"], "monotonic", 4)
        store_atomic(bld, c(0), g["lock"], "release", 4)
        bld.ret_void()
        # serial: the whole range as one chunk on the caller
        bld.position_at_end(serial_bb)
        bld.call(as_function(bld, body, CHUNK_TYPE), [closure, c(0, L.I64), c(1, L.I64)])
        bld.ret_void()
        return fn
