"""The runner's worker: no secrets in its environment, no core files, bounded memory and CPU.

Measured programs here are C files compiled to .so (test_measure.py's approach): each
exports ``default_function`` with the matmul's signature and reports what it sees of
its process through its return value (0: as it should be; non-zero: RUNTIME_DEVICE
with "returned N" in the message).
"""

from __future__ import annotations

import os

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import BuildResult, MeasureErrorNo, MeasureInput
from scheduler_core.measure.local_runner import LocalRunner, arg_specs, cpu_limit_s, default_mem_limit_bytes
from scheduler_core.measure.popen_pool import PopenPool, WorkerLimits, worker_environment
from scheduler_core.schedule.loop_state import State
from tests.scheduler_core.c_programs import compile_matmul_stand_ins
from tests.workloads import matmul

N = 16
E = MeasureErrorNo
MEM_LIMIT = 1 << 30  # 1 GiB: room for Python and numpy, not for the 4 GiB the "hog" asks for

_BODIES = {
    "env": 'const char* names[] = {"REDIS_URL", "AUTOSCHED_API_TOKEN", "MY_API_KEY", "DB_PASSWORD",'
           ' "SOME_SECRET"};'
           " for (int k = 0; k < 5; ++k) if (getenv(names[k])) return 10 + k;"
           ' if (!getenv("AUTOSCHED_SANDBOX_PLAIN")) return 20;'  # ordinary variables still pass
           " return 0;",
    "hog": "size_t n = (size_t)4 << 30; char* p = (char*)malloc(n);"
           " if (!p) return 9;"
           " for (size_t k = 0; k < n; k += 4096) p[k] = 1;"
           " free(p); return 0;",
    "core": "struct rlimit r; if (getrlimit(RLIMIT_CORE, &r)) return 99;"
            " return r.rlim_cur == 0 && r.rlim_max == 0 ? 0 : 7;",
    "aslimit": f"struct rlimit r; if (getrlimit(RLIMIT_AS, &r)) return 99;"
               f" return r.rlim_cur == {MEM_LIMIT}ULL ? 0 : 8;",
    "spin": "volatile int spin = 1; while (spin) {} return 0;",
    "cpulimit": "struct rlimit r; if (getrlimit(RLIMIT_CPU, &r)) return 99;"
                " return r.rlim_cur == RLIM_INFINITY ? 6 : 0;",
}


@pytest.fixture(scope="module")
def plain():
    dag = ComputeDAG(matmul(N, N, N))
    return MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))


@pytest.fixture(scope="module")
def libs(tmp_path_factory, plain):
    """{kind: BuildResult of a .so exporting ``default_function`` for the N x N matmul}."""
    dag = plain.task.compute_dag
    paths = compile_matmul_stand_ins(dag, _BODIES, tmp_path_factory.mktemp("sandbox"))
    return {kind: BuildResult(path, tuple(dag.tensors), 0, "", 0.0) for kind, path in paths.items()}


@pytest.fixture(scope="module")
def runner():
    secrets = {"REDIS_URL": "redis://:hunter2@localhost:6379/0", "AUTOSCHED_API_TOKEN": "t0ken",
               "MY_API_KEY": "k", "DB_PASSWORD": "p", "SOME_SECRET": "s", "AUTOSCHED_SANDBOX_PLAIN": "1"}
    saved = {k: os.environ.get(k) for k in secrets}
    os.environ.update(secrets)  # the worker starts on the first run, with these in the parent
    r = LocalRunner(timeout_s=10, number=1, repeat=1, min_repeat_ms=0, mem_limit_bytes=MEM_LIMIT)
    try:
        yield r
    finally:
        r.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(runner, plain, br):
    (res,) = runner.run([plain], [br])
    return res


def test_worker_sees_no_secrets(runner, plain, libs):
    assert os.environ["REDIS_URL"]  # the parent has them ...
    res = _run(runner, plain, libs["env"])
    assert res.error_no == E.NO_ERROR, res.error_msg  # ... the measured program does not


def test_worker_has_no_core_files_and_bounded_memory_and_cpu(runner, plain, libs):
    for kind in ("core", "aslimit", "cpulimit"):
        res = _run(runner, plain, libs[kind])
        assert res.error_no == E.NO_ERROR, (kind, res.error_msg)


def test_a_program_allocating_past_the_limit_is_an_error_and_the_runner_goes_on(runner, plain, libs):
    hog = _run(runner, plain, libs["hog"])
    assert hog.error_no == E.RUNTIME_DEVICE, hog.error_msg
    assert "returned 9" in hog.error_msg  # malloc said no: the machine's memory was never at stake
    after = _run(runner, plain, libs["core"])
    assert after.error_no == E.NO_ERROR, after.error_msg


def test_worker_environment_drops_secret_names():
    env = worker_environment({"REDIS_URL": "x", "AUTOSCHED_API_TOKEN": "x", "GITHUB_TOKEN": "x",
                              "aws_secret_access_key": "x", "PGPASSWORD": "x", "SSH_KEY_PATH": "x",
                              "PATH": "/bin", "HOME": "/root", "OMP_NUM_THREADS": "2"})
    assert env == {"PATH": "/bin", "HOME": "/root", "OMP_NUM_THREADS": "2"}


def test_limits_defaults_and_cpu_bound():
    assert default_mem_limit_bytes() >= 1 << 30
    assert cpu_limit_s(10) >= 4 * 10 + 10
    assert WorkerLimits.from_json(WorkerLimits(0, 123, 4.5).to_json()) == WorkerLimits(0, 123, 4.5)
    with pytest.raises(ValueError):
        LocalRunner(mem_limit_bytes=-1)


def test_cpu_limit_kills_a_spinning_program(libs):
    """RLIMIT_CPU is re-armed per task: a program past it dies of SIGXCPU, the pool goes on."""
    args = lambda kind: (libs[kind].filename, arg_specs(libs[kind].args), None, 1, 1, 0.0, False)  # noqa: E731
    with PopenPool(1, preload=("scheduler_core.measure.local_runner",),
                   limits=WorkerLimits(core_bytes=0, cpu_s_per_task=1)) as pool:
        spin, ok = pool.map("scheduler_core.measure.local_runner:run_in_worker", [args("spin"), args("core")],
                            timeout_s=30)
    assert spin.status == "died" and "SIGXCPU" in spin.value, spin
    assert spin.wall_s < 20
    assert ok.status == "ok" and ok.value["error_no"] == E.NO_ERROR, ok
