"""`autosched worker --gpu N` on a GPU host, with a fake nvidia-smi and a fake pycuda: the
worker names its queue by device N's arch without initialising CUDA in the process that RQ
forks work-horses from, and pins device N as the runner's device 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, os, sys
    from scheduler_core.base.errors import DeviceRuntimeError
    from workers.queues import gpu_measure_queue, pin_cuda_device
    out = {}
    for index in (0, 1, 2):
        try:
            out[index] = gpu_measure_queue(index)
        except DeviceRuntimeError as err:
            out[index] = "error: " + str(err)
    out["pinned"] = pin_cuda_device(1) if "pin" in sys.argv else None
    out["visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    out["pycuda.driver imported"] = "pycuda.driver" in sys.modules
    print(json.dumps(out))
""")


def _fake_host(tmp_path: Path, with_pycuda: bool = True) -> dict[str, str]:
    """PATH with an nvidia-smi that knows two GPUs (0: 9.0, 1: 8.6); PYTHONPATH with a pycuda
    whose driver module fails on import (as CUDA would in a forked work-horse)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   "while [ $# -gt 0 ]; do if [ \"$1\" = -i ]; then dev=$2; fi; shift; done\n"
                   "case \"$dev\" in 0|GPU-aaaa) echo 9.0;; 1|GPU-bbbb) echo 8.6;;"
                   " *) echo \"No devices were found\"; exit 6;; esac\n")
    smi.chmod(0o755)
    paths = [str(REPO)]
    if with_pycuda:
        pkg = tmp_path / "site" / "pycuda"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "driver.py").write_text("raise ImportError('CUDA initialised in the worker process')\n")
        paths.insert(0, str(tmp_path / "site"))
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _probe(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_gpu_queue_named_by_each_devices_arch_without_cuda_in_the_worker(tmp_path):
    out = _probe(_fake_host(tmp_path), "pin")
    assert out["0"] == "measure:cuda:sm-90" and out["1"] == "measure:cuda:sm-86"
    assert out["pycuda.driver imported"] is False  # the forking process never touched CUDA
    assert out["pinned"] == "1" and out["visible"] == "1"  # --gpu 1 measures on device 1


def test_gpu_queue_follows_cuda_visible_devices(tmp_path):
    env = _fake_host(tmp_path)
    env["CUDA_VISIBLE_DEVICES"] = "GPU-bbbb,GPU-aaaa"
    out = _probe(env, "pin")
    assert out["0"] == "measure:cuda:sm-86" and out["1"] == "measure:cuda:sm-90"
    assert out["2"].startswith("error: CUDA device 2 is hidden")
    assert out["pinned"] == "GPU-aaaa" and out["visible"] == "GPU-aaaa"


def test_gpu_queue_without_pycuda_says_what_to_install(tmp_path):
    out = _probe(_fake_host(tmp_path, with_pycuda=False))
    assert out["0"].startswith("error: measuring on a GPU needs pycuda")


@pytest.mark.parametrize("bad", [-1])
def test_pin_rejects_a_negative_index(bad):
    from scheduler_core.base.errors import DeviceRuntimeError
    from workers.queues import pin_cuda_device
    with pytest.raises(DeviceRuntimeError, match="must be >= 0"):
        pin_cuda_device(bad)
