"""docker-compose.yml wires the service as docs/architecture.md ("Service") lays it out.

Expected: four services (redis, api, worker-cpu, worker-gpu); Redis with AOF on and
its data on a named volume; the API and worker-cpu built from the one Dockerfile and
every app service pointed at ``redis://redis:6379/0``; the API served by uvicorn's app
factory on 8000; worker-cpu on the ``tune`` and an LLVM measurement queue; worker-gpu
built from Dockerfile.gpu (CUDA toolkit + pycuda), ``worker --gpu 0`` (the measurement
queue of its device's arch) with an NVIDIA GPU reservation.  Where a compose client is
installed, ``config -q`` must accept the file as well.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

yaml = pytest.importorskip("yaml")

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
REDIS_URL = "redis://redis:6379/0"
APP_SERVICES = ("api", "worker-cpu")  # worker-gpu has its own image (Dockerfile.gpu: CUDA toolkit + pycuda)


@pytest.fixture(scope="module")
def services():
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _env(service) -> dict:
    env = service.get("environment", {})
    if isinstance(env, list):  # the "KEY=value" spelling
        env = dict(item.split("=", 1) for item in env)
    return env


def _argv(service) -> list[str]:
    """Entrypoint + command as one argument list."""
    def as_list(v):
        return v.split() if isinstance(v, str) else list(v or [])
    return as_list(service.get("entrypoint")) + as_list(service.get("command"))


def _queues(service) -> list[str]:
    argv = _argv(service)
    assert "worker" in argv and "--queues" in argv, argv
    return [a for a in argv[argv.index("--queues") + 1:] if not a.startswith("-")]


def test_the_four_services(services):
    assert set(services) == {"redis", "api", "worker-cpu", "worker-gpu"}


def test_redis_persists_with_aof_on_a_volume(services):
    redis = services["redis"]
    assert redis["image"].split(":") == ["redis", "7"]
    argv = _argv(redis)
    assert argv[argv.index("--appendonly") + 1] == "yes"
    volumes = yaml.safe_load(COMPOSE.read_text())["volumes"]
    assert any(str(v).split(":")[0] in volumes and str(v).split(":")[1] == "/data"
               for v in redis["volumes"])


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_share_one_image_and_point_at_redis(services, name):
    service = services[name]
    assert service["build"] == "." and service["image"] == services["api"]["image"]
    assert _env(service)["REDIS_URL"] == REDIS_URL
    assert "redis" in service["depends_on"]
    assert (ROOT / "Dockerfile").is_file()


def test_api_runs_the_app_factory_on_8000(services):
    api = services["api"]
    argv = _argv(api)
    assert argv[:3] == ["uvicorn", "api.main:create_app", "--factory"]
    assert argv[argv.index("--port") + 1] == "8000"
    assert any(str(p).endswith(":8000") for p in api["ports"])


def test_cpu_worker_takes_search_and_llvm_measurement_jobs(services):
    queues = _queues(services["worker-cpu"])
    assert "tune" in queues
    assert any(q.startswith("measure:llvm:") or q.startswith("${") and "measure:llvm:" in q
               for q in queues)


def test_gpu_worker_reserves_an_nvidia_gpu_and_takes_cuda_measurements(services):
    gpu = services["worker-gpu"]
    argv = _argv(gpu)
    assert "worker" in argv and argv[argv.index("--gpu") + 1] == "0"  # measure:cuda:<arch of GPU 0>
    assert "tune" not in argv
    assert _env(gpu)["REDIS_URL"] == REDIS_URL and "redis" in gpu["depends_on"]
    assert gpu["build"]["dockerfile"] == "Dockerfile.gpu"
    text = (ROOT / "Dockerfile.gpu").read_text()
    assert "FROM nvidia/cuda:" in text and "-devel-" in text and ".[service,cuda]" in text
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_dockerfile_installs_the_service_extra_on_python_311_slim():
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert 'pip install -e ".[service]"' in text


def _compose_client():
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_accepts_the_file():
    client = _compose_client()
    if client is None:
        pytest.skip("no docker compose client installed")
    proc = subprocess.run(client + ["-f", str(COMPOSE), "config", "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
