"""The host side of a CUDA program without a GPU: the host code is walked once per binding of
sizes (``plan_host``), and ``time_evaluator`` times launches prepared before its loop, with no
synchronisation, allocation or argument inspection inside it.  A fake ``pycuda.driver`` records
every driver call in order, so the tests can see what happens between the two timing events."""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.runtime import cuda_driver
from scheduler_core.runtime.cuda_module import CudaModule, plan_host
from scheduler_core.runtime.device import Device
from tests.scheduler_core.gpu import gpu_schedules as G


class _FakeDriver:
    """The parts of ``pycuda.driver`` the package calls, logging each call to ``log``."""

    def __init__(self):
        self.log: list[tuple] = []
        fake = self

        class Context:
            @staticmethod
            def synchronize():
                fake.log.append(("synchronize",))

            @staticmethod
            def pop():
                fake.log.append(("pop",))

        class _Ctx:
            def push(self):
                fake.log.append(("push",))

        class Device:
            def __init__(self, index):
                self.index = index

            @staticmethod
            def count():
                return 1

            def retain_primary_context(self):
                return _Ctx()

        class Event:
            def __init__(self):
                self.at = None

            def record(self):
                fake.log.append(("record", self))
                self.at = len(fake.log)

            def synchronize(self):
                fake.log.append(("event_synchronize",))

            def time_since(self, start):
                return 1.0 * (self.at - start.at)  # one "millisecond" per driver call in between

        self.Context, self.Device, self.Event = Context, Device, Event

    def init(self):
        pass

    def mem_alloc(self, nbytes):
        self.log.append(("mem_alloc", nbytes))
        return 0x1000 + 256 * sum(1 for e in self.log if e[0] == "mem_alloc")

    def memcpy_htod(self, dst, src):
        self.log.append(("memcpy_htod",))

    def memcpy_dtoh(self, dst, src):
        self.log.append(("memcpy_dtoh",))


class _FakeFunction:
    def __init__(self, name, log):
        self.name, self.log, self.arg_format = name, log, None

    def prepare(self, fmt):
        self.log.append(("prepare", self.name, fmt))
        self.arg_format = fmt
        return self

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        assert self.arg_format is not None and len(args) == len(self.arg_format.replace("s", ""))
        self.log.append(("launch", self.name, grid, block, args, shared_size))

    def set_attribute(self, attribute, value):
        self.log.append(("set_attribute", self.name, attribute, value))


@pytest.fixture
def fake_gpu(monkeypatch):
    drv = _FakeDriver()
    monkeypatch.setattr(cuda_driver, "pycuda_driver", lambda: drv)
    monkeypatch.setattr(cuda_driver, "_CONTEXTS", {})
    monkeypatch.setattr(Device, "unusable_reason", lambda self: None)
    monkeypatch.setattr(CudaModule, "_load", lambda self, index: {
        d["symbol"]: _FakeFunction(d["symbol"], drv.log) for d in self.launch["kernels"]})
    return drv


def test_the_host_plan_of_a_scan_has_one_launch_per_row():
    # seed 001's scan: the init kernel, then a host loop over rows 1..m-1 launching the update
    case = G.scan_cumsum(m=10, n=1000)
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    plan = plan_host(mod.kernel_func, mod.launch["kernels"], {"m": 10, "n": 1000})
    symbols = [c.symbol for c in plan.calls]
    assert len(symbols) == 10 and len(set(symbols)) == 2 and symbols[0] not in symbols[1:]
    assert all(c.grid == (4, 1, 1) and c.block == (256, 1, 1) for c in plan.calls)
    buffer_args = {a for c in plan.calls for a in c.args if isinstance(a, tuple)}
    assert buffer_args <= {("buffer", t.name) for t in case.args} | {("buffer", n) for n, _, _ in plan.allocations}
    # a size bound to 0 plans no launch at all (CUDA refuses an empty grid)
    case = G.vector_add()
    vadd = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    assert plan_host(vadd.kernel_func, vadd.launch["kernels"], {"n": 0}).calls == ()
    assert len(plan_host(vadd.kernel_func, vadd.launch["kernels"], {"n": 5}).calls) == 1


def test_time_evaluator_times_prepared_launches_with_nothing_else_between_the_events(fake_gpu):
    case = G.scan_cumsum(m=10, n=1000)
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    dev = sc.cuda(0)
    arrays = [sc.nd.array(a, dev) for a in case.arrays()]
    fake_gpu.log.clear()
    result = mod.time_evaluator(mod.entry_name, dev, number=3, repeat=2, min_repeat_ms=0)(*arrays)
    log = fake_gpu.log
    assert len(result.results) == 2
    # each kernel's argument format is set once, before any launch
    first_launch = next(i for i, e in enumerate(log) if e[0] == "launch")
    assert [e for e in log[first_launch:] if e[0] == "prepare"] == []
    # between each pair of events: exactly number x 10 launches, and nothing else
    records = [i for i, e in enumerate(log) if e[0] == "record"]
    assert len(records) == 4
    for start, end in zip(records[::2], records[1::2]):
        between = log[start + 1:end]
        assert [e[0] for e in between] == ["launch"] * 30
        symbols = [e[1] for e in between]
        assert symbols[10:20] == symbols[:10] and len(set(symbols[:10])) == 2
    # the measured intervals are what the events saw: 31 driver calls -> 31 "ms" / 3 calls
    assert result.results[0] == pytest.approx(31 / 1e3 / 3)


def test_calling_the_module_launches_every_kernel_then_waits_once(fake_gpu):
    case = G.scan_cumsum(m=10, n=1000)
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    dev = sc.cuda(0)
    arrays = [sc.nd.array(a, dev) for a in case.arrays()]
    fake_gpu.log.clear()
    mod(*arrays)
    kinds = [e[0] for e in fake_gpu.log]
    launches = [i for i, k in enumerate(kinds) if k == "launch"]
    assert len(launches) == 10
    assert kinds.count("synchronize") == 1 and kinds.index("synchronize") > launches[-1]
    assert np.all(np.diff(launches) == 1)  # no context switch or wait between the launches


def test_a_launch_with_more_than_48_KiB_of_dynamic_shared_memory_opts_in_once(fake_gpu):
    case = G.matmul_shared(M=128, N=128, K=128, tile=128, step=8, kt=64, fetch_threads=256)
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_90 -max_shared_memory_per_block=65536")
    dev = sc.cuda(0)
    arrays = [sc.nd.array(a, dev) for a in case.arrays()]
    fake_gpu.function_attribute = type("function_attribute", (), {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 8})
    fake_gpu.log.clear()
    mod.time_evaluator(mod.entry_name, dev, number=2, repeat=1)(*arrays)
    opt_ins = [e for e in fake_gpu.log if e[0] == "set_attribute"]
    launches = [e for e in fake_gpu.log if e[0] == "launch"]
    assert [e[2:] for e in opt_ins] == [(8, 65536)]
    assert launches and all(e[5] == 65536 for e in launches)


def test_one_array_as_input_and_output_is_refused_before_any_launch(fake_gpu):
    # the kernels declare their buffers __restrict__: an in-place call would be silently wrong
    case = G.vector_add()
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    dev = sc.cuda(0)
    a, b, c = [sc.nd.array(x, dev) for x in case.arrays()]
    fake_gpu.log.clear()
    with pytest.raises(sc.RuntimeArgumentError, match=r"same device memory.*__restrict__"):
        mod(a, b, a)
    assert not [e for e in fake_gpu.log if e[0] == "launch"]
    mod(a, a, c)  # the same array as both inputs: only read, allowed
    assert [e[0] for e in fake_gpu.log].count("launch") == 1
