"""A measured program cannot read the API token: not in its own environment (the runner's
children are scrubbed), not in its parents' (``worker_env`` scrubs the workers; ``autosched
serve``, the API and the RQ workers are non-dumpable, so ``/proc/<pid>/environ`` is closed to
the programs they measure).

    parent (AUTOSCHED_API_TOKEN in its environment at exec, as ``autosched serve``)
      -> child with worker_env() (as an RQ worker) running a LocalRunner
        -> the runner's worker process, where the measured program runs and walks up its
           parents' /proc/<pid>/environ looking for the token
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG
from tests.scheduler_core.c_programs import compile_matmul_stand_ins
from tests.workloads import matmul
from workers.redis_conn import socket_path

N = 16
TOKEN = "s3cret-api-token"
# returns 30 + k when the environ of its k-th parent holds the token, 0 when none does
_PARENTS = r"""
pid_t p = getppid();
char path[64], buf[1 << 16];
for (int k = 0; k < 4 && p > 1; ++k) {
  snprintf(path, sizeof path, "/proc/%d/environ", (int)p);
  FILE* f = fopen(path, "r");
  if (f) {
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t j = 0; j + 20 <= n; ++j) if (!memcmp(buf + j, "AUTOSCHED_API_TOKEN=", 20)) return 30 + k;
  }
  snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
  f = fopen(path, "r");
  if (!f) break;
  int self, parent; char comm[256], state;
  int got = fscanf(f, "%d %255s %c %d", &self, comm, &state, &parent);
  fclose(f);
  if (got != 4) break;
  p = parent;
}
return 0;
"""

_CHILD = """
import json, sys
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import BuildResult, MeasureInput
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.schedule.loop_state import State
from tests.workloads import matmul
dag = ComputeDAG(matmul(N, N, N))
inp = MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))
with LocalRunner(timeout_s=20, number=1, repeat=1, min_repeat_ms=0) as runner:
    (res,) = runner.run([inp], [BuildResult(sys.argv[1], tuple(dag.tensors), 0, "", 0.0)])
print(json.dumps({"error_no": int(res.error_no), "error_msg": str(res.error_msg)}))
""".replace("N, N, N", f"{N}, {N}, {N}")

_DIRECT = """
import ctypes, json, sys
print(json.dumps({"returned": ctypes.CDLL(sys.argv[1]).default_function(None, None, None)}))
"""

_PARENT = """
import subprocess, sys
from workers.processes import make_non_dumpable, worker_env
if sys.argv[2] == "protected":
    assert make_non_dumpable()
out = subprocess.run([sys.executable, "-c", sys.argv[3], sys.argv[1]], env=worker_env(), capture_output=True,
                     text=True, timeout=120)
sys.stdout.write(out.stdout)
sys.stderr.write(out.stderr)
"""


@pytest.fixture(scope="module")
def parents_lib(tmp_path_factory) -> str:
    return compile_matmul_stand_ins(ComputeDAG(matmul(N, N, N)), {"parents": _PARENTS},
                                    tmp_path_factory.mktemp("secrets"))["parents"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
@pytest.mark.parametrize("mode", ["protected", "control"])
def test_a_measured_program_cannot_read_the_token_of_its_parents(parents_lib, mode):
    """protected: serve's way (non-dumpable, the runner below; as root the runner's worker also has
    no capabilities): the program finds no token.  control: the same code called in a plain child
    of an unprotected parent finds it one level up, so the check is real."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "AUTOSCHED_API_TOKEN": TOKEN, "PYTHONPATH": str(root)}
    child = _CHILD if mode == "protected" else _DIRECT
    out = subprocess.run([sys.executable, "-c", _PARENT, parents_lib, mode, child], env=env, cwd=root,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "protected":
        assert res["error_no"] == 0, res
    else:
        assert res["returned"] == 30, res


# returns 40 when it can connect to the service's Redis socket, + 2 when to a TCP port on loopback
_REDIS = r"""
int out = 0;
int s = socket(AF_UNIX, SOCK_STREAM, 0);
struct sockaddr_un a;
memset(&a, 0, sizeof a);
a.sun_family = AF_UNIX;
strncpy(a.sun_path, SOCKET_PATH, sizeof a.sun_path - 1);
if (s >= 0 && connect(s, (struct sockaddr*)&a, sizeof a) == 0) {
  const char ping[] = "PING\r\n";
  char reply[16] = {0};
  if (write(s, ping, sizeof ping - 1) > 0 && read(s, reply, sizeof reply - 1) > 0 && reply[0] == '+') out += 40;
}
if (s >= 0) close(s);
int t = socket(AF_INET, SOCK_STREAM, 0);
struct sockaddr_in b;
memset(&b, 0, sizeof b);
b.sin_family = AF_INET;
b.sin_port = htons(TCP_PORT);
b.sin_addr.s_addr = htonl(0x7f000001);
if (t >= 0 && connect(t, (struct sockaddr*)&b, sizeof b) == 0) out += 2;
if (t >= 0) close(t);
return out;
"""

_SERVICE_PARENT = """
import socket, subprocess, sys
from workers.processes import make_non_dumpable, worker_env
from workers.redis_conn import get_connection, stop_embedded
lib, mode, child, data_dir, port = sys.argv[1:6]
conn = get_connection(data_dir=data_dir)  # the service's embedded Redis, as serve starts it
assert conn.ping()
listener = socket.socket()
listener.bind(("127.0.0.1", int(port)))
listener.listen(4)
try:
    if mode == "protected":
        assert make_non_dumpable()
    env = worker_env(data_dir) if mode == "protected" else None
    out = subprocess.run([sys.executable, "-c", child, lib], env=env, capture_output=True, text=True, timeout=120)
finally:
    stop_embedded()
sys.stdout.write(out.stdout)
sys.stderr.write(out.stderr)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux's")
@pytest.mark.parametrize("mode", ["protected", "control"])
def test_a_measured_program_cannot_talk_to_redis_or_the_network(tmp_path, mode):
    """protected: a worker's environment (worker_env: the data directory and Redis socket to hide),
    the runner below it: the program reaches neither the embedded Redis (its socket is covered in
    the runner's mount namespace) nor a TCP port on loopback (a network namespace of its own).
    control: the same code in a plain child reaches both, so the check is real."""
    root = Path(__file__).resolve().parents[2]
    data_dir = tmp_path / "data"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    body = _REDIS.replace("SOCKET_PATH", json.dumps(socket_path(data_dir))).replace("TCP_PORT", str(port))
    lib = compile_matmul_stand_ins(ComputeDAG(matmul(N, N, N)), {"redis": body}, tmp_path)["redis"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("REDIS_URL", None)
    child = _CHILD if mode == "protected" else _DIRECT
    out = subprocess.run([sys.executable, "-c", _SERVICE_PARENT, lib, mode, child, str(data_dir), str(port)],
                         env=env, cwd=root, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "protected":
        assert res["error_no"] == 0, res
        assert "not isolated" not in out.stderr
    else:
        assert res["returned"] == 42, res


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="runs a child as another (unprivileged) user: needs root and setpriv")
def test_an_unprivileged_runner_child_isolates_itself_in_a_user_namespace():
    """Where the service does not run as root, the runner's child first enters a user namespace,
    which needs a single-threaded process: with the environment a runner child gets
    (OPENBLAS_NUM_THREADS=1 beside the isolation paths) it does, as uid 65534, and the covered
    directory is empty for it."""
    base = Path(tempfile.mkdtemp(prefix="autosched_userns_"))  # pytest's tmp_path is closed to other users
    hidden = base / "data"
    hidden.mkdir()
    (hidden / "redis.sock").write_text("not for the programs")
    for p in (base, hidden):
        p.chmod(0o777)
    root = Path(__file__).resolve().parents[2]
    code = ("import os, json; from scheduler_core.measure.popen_pool import isolate_from_service, ISOLATION; "
            f"ok = isolate_from_service([{str(hidden)!r}]); "
            f"print(json.dumps({{'ok': ok, 'how': ISOLATION, 'seen': os.listdir({str(hidden)!r})}}))")
    env = {**os.environ, "PYTHONPATH": str(root), "OPENBLAS_NUM_THREADS": "1"}
    try:
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              code], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"] and "user" in res["how"]["namespaces"] and res["seen"] == [], res
