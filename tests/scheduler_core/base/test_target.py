"""Targets: parsing, canonical text, validation against what LLVM knows, vector widths.

Every expectation comes from LLVM (its cpu="help" tables and the vector probe) or
from the host's own feature string, so the tests hold on any x86-64 host whatever
its instruction set; the CPU-name tests are skipped on other process triples.

Expected: ``Target.parse(str(t)) == t``; a typo or an unknown name is an
InvalidTargetError whose message names the allowed values (close matches first);
skylake-avx512 / haswell / nehalem have 64 / 32 / 16-byte vector units.
"""

from __future__ import annotations

import os
import subprocess
import sys

import llvmlite.binding as llvm
import pytest

from scheduler_core.base import llvm_cpu
from scheduler_core.base.errors import BuildError, InvalidTargetError
from scheduler_core.base.llvm_cpu import (
    cpu_vector_unit_bytes,
    host_cpu,
    host_features,
    llvm_cpu_names,
    llvm_feature_names,
)
from scheduler_core.base.target import HardwareParams, Target

x86_64 = pytest.mark.skipif(not llvm.get_process_triple().startswith("x86_64"),
                            reason="x86-64 CPU names and registers")


def _host_enabled() -> set:
    return {f[1:] for f in host_features().split(",") if f.startswith("+")}


def _host_bytes_from_features() -> int:
    have = _host_enabled()
    return 64 if "avx512f" in have else 32 if {"avx", "avx2"} & have else 16


# -- parsing and canonical text ------------------------------------------------------

ROUND_TRIP = [
    "llvm",
    "cuda",
    "llvm -num-cores=2",
    "llvm -mcpu=native",
    "llvm -mtriple=aarch64-unknown-linux-gnu -num-cores=1",
    "cuda -arch=sm_80 -model=a100",
    pytest.param("llvm -mcpu=haswell", marks=x86_64),
    pytest.param("llvm -mcpu=skylake-avx512 -mattr=+avx512f,-avx512bw -num-cores=4", marks=x86_64),
    pytest.param("llvm -mattr=+avx2,-avx512f", marks=x86_64),
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(text):
    t = Target.parse(text)
    assert Target.parse(str(t)) == t
    assert Target.parse(t) is t
    assert str(Target.parse(str(t))) == str(t)


@x86_64
def test_fields_and_canonical_text():
    t = Target.parse("llvm  -num-cores=4   -mattr=+avx2,,+fma -mcpu=haswell")
    assert (t.kind, t.mcpu, t.mattr, t.num_cores, t.mcpu_given) == ("llvm", "haswell", ("+avx2", "+fma"), 4, True)
    assert str(t) == "llvm -mcpu=haswell -mattr=+avx2,+fma -num-cores=4"
    assert str(Target.parse("llvm -num-cores=0")) == "llvm"
    assert Target.parse("llvm -num-cores=007").num_cores == 7
    assert str(Target.parse("llvm -mtriple=aarch64-linux-gnu")) == "llvm -mtriple=aarch64-linux-gnu"
    cuda = Target.parse("cuda -arch=sm_80 -model=a100")
    assert cuda.options == (("arch", "sm_80"), ("model", "a100")) and str(cuda) == "cuda -arch=sm_80 -model=a100"
    assert cuda.mcpu == "" and cuda.vector_unit_bytes == 16 and cuda.features == frozenset()


def test_default_and_native_are_the_host():
    plain = Target.parse("llvm")
    assert plain.mcpu == host_cpu() and not plain.mcpu_given and plain.is_host and str(plain) == "llvm"
    native = Target.parse("llvm -mcpu=native")
    assert native.mcpu == host_cpu() and native.mcpu_given and native.is_host
    assert str(native) == f"llvm -mcpu={host_cpu()}" and Target.parse(str(native)) == native


# -- validation: messages name the allowed values ------------------------------------

@x86_64
def test_mcpu_typo_names_close_matches_first():
    with pytest.raises(InvalidTargetError) as err:
        Target.parse("llvm -mcpu=skylake-avx51")
    msg = str(err.value)
    assert "unknown -mcpu='skylake-avx51'" in msg and "'native'" in msg
    assert msg.index("skylake-avx512") < msg.index("alderlake")  # the close match comes first
    assert all(name in msg for name in ("haswell", "znver3", "x86-64"))  # then every name LLVM knows
    assert isinstance(err.value, BuildError) and isinstance(err.value, ValueError)


@x86_64
@pytest.mark.parametrize("text,needles", [
    ("llvm -mattr=avx2", ["'avx2'", "+feature or -feature", "+avx2 or -avx2"]),
    ("llvm -mattr=+avx5121f", ["unknown feature 'avx5121f'", "avx512f", "LLVM knows"]),
    ("llvm -mattr=+avx2,~fma", ["'~fma'", "+feature or -feature", "closest: fma", "LLVM knows"]),
])
def test_bad_mattr(text, needles):
    with pytest.raises(InvalidTargetError) as err:
        Target.parse(text)
    assert all(n in str(err.value) for n in needles), str(err.value)[:300]


@x86_64
def test_cpu_llvm_cannot_generate_code_for_is_rejected_not_fatal():
    """i686 is in LLVM's list, but emitting x86-64 code for it aborts LLVM: parse rejects it."""
    assert "i686" in llvm_cpu_names()
    with pytest.raises(InvalidTargetError, match="64-bit code requested"):
        Target.parse("llvm -mcpu=i686")
    with pytest.raises(InvalidTargetError, match="LLVM cannot generate"):
        _ = Target(kind="llvm", mcpu="no-such-cpu").vector_unit_bytes  # built by hand: still no abort


@pytest.mark.parametrize("text,needles", [
    ("llvm -foo=1", ["unknown option '-foo'", "-mcpu=", "-mattr=", "-mtriple=", "-num-cores="]),
    ("llvm -arch=sm_80", ["unknown option '-arch'", "-mcpu="]),
    ("cuda -mcpu=haswell", ["unknown option '-mcpu'", "-arch=", "-model="]),
    ("llvm mcpu=haswell", ["malformed target option 'mcpu=haswell'", "-key=value"]),
    ("llvm -mcpu", ["malformed target option '-mcpu'"]),
    ("llvm -num-cores=x", ["-num-cores must be a non-negative integer", "'x'"]),
    ("llvm -num-cores=-1", ["-num-cores must be a non-negative integer"]),
    ("llvm -num-cores=1.5", ["-num-cores must be a non-negative integer"]),
])
def test_bad_options(text, needles):
    with pytest.raises(InvalidTargetError) as err:
        Target.parse(text)
    assert all(n in str(err.value) for n in needles), str(err.value)


@pytest.mark.parametrize("text", ["rocm", "opencl -mcpu=x", "llvm; rm -rf /", "", "   "])
def test_unknown_kind_names_the_kinds(text):
    with pytest.raises(InvalidTargetError) as err:
        Target.parse(text)
    assert "unknown target" in str(err.value) and "llvm, cuda" in str(err.value)


# -- what LLVM knows -----------------------------------------------------------------

@x86_64
def test_llvm_tables():
    cpus, features = llvm_cpu_names(), llvm_feature_names()
    assert {"skylake-avx512", "haswell", "nehalem", "x86-64"} <= set(cpus) and host_cpu() in cpus
    assert {"avx", "avx2", "avx512f", "fma"} <= set(features)
    assert list(cpus) == sorted(cpus) and len(cpus) > 50
    # LLVM prints the tables once per process: a second read comes from a child process, the same
    child = llvm_cpu._parse_help_tables(llvm_cpu._run_child(llvm_cpu._HELP_SCRIPT).stderr)
    assert child == {"cpus": cpus, "features": features}


@x86_64
def test_llvm_tables_are_read_without_showing_them():
    code = ("from scheduler_core.base.llvm_cpu import llvm_cpu_names, host_cpu; import sys; "
            "n = llvm_cpu_names(); print(len(n), host_cpu() in n); print('after', file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[1] == "True" and int(proc.stdout.split()[0]) == len(llvm_cpu_names())
    assert "Available CPUs" not in proc.stderr and "after" in proc.stderr  # captured, and fd 2 restored


def test_help_table_parser():
    text = ("Available CPUs for this target:\n\n  alpha  - Select alpha.\n  beta   - Select beta.\n\n"
            "Available features for this target:\n\n  f1  - Enable f1.\n\n"
            "Use +feature to enable a feature, or -feature to disable it.\n  not-a-name - after the tables\n")
    assert llvm_cpu._parse_help_tables(text) == {"cpus": ("alpha", "beta"), "features": ("f1",)}


@x86_64
@pytest.mark.parametrize("cpu,features,expected", [
    ("skylake-avx512", "", 64),
    ("haswell", "", 32),
    ("sandybridge", "", 32),
    ("nehalem", "", 16),
    ("x86-64", "+avx512f", 64),
    ("haswell", "-avx", 16),
])
def test_vector_width_comes_from_llvm(cpu, features, expected):
    assert cpu_vector_unit_bytes(cpu, features) == expected


@x86_64
def test_target_vector_width_and_features_of_other_cpus():
    for cpu, width, has, lacks in [("skylake-avx512", 64, {"avx512f", "avx2"}, set()),
                                   ("haswell", 32, {"avx2", "avx"}, {"avx512f"}),
                                   ("sandybridge", 32, {"avx"}, {"avx2"}),
                                   ("nehalem", 16, set(), {"avx"})]:
        if cpu == host_cpu():
            continue  # the host's width is read from its feature string (next test)
        t = Target.parse(f"llvm -mcpu={cpu}")
        assert t.vector_unit_bytes == width and has <= t.features and not lacks & t.features, cpu
    t = Target.parse("llvm -mcpu=skylake-avx512 -mattr=-avx512f,+fma")
    assert t.vector_unit_bytes == 32 and "avx512f" not in t.features and "fma" in t.features


def test_host_width_matches_the_host_feature_string():
    t = Target.parse("llvm")
    assert t.vector_unit_bytes == _host_bytes_from_features()
    assert t.features == frozenset(_host_enabled())


@x86_64
def test_jit_runs_on_the_host_and_warns_about_what_it_lacks():
    cpu, feats, warnings = Target.parse("llvm").jit_cpu_features()
    assert (cpu, feats, warnings) == (host_cpu(), host_features(), [])
    wide = Target.parse("llvm -mcpu=skylake-avx512 -mattr=+avx512f")
    cpu, feats, warnings = wide.jit_cpu_features()
    assert (cpu, feats) == (host_cpu(), host_features())
    host_has_avx512 = "avx512f" in _host_enabled()
    wider = wide.vector_unit_bytes > _host_bytes_from_features()
    assert any("64-byte vectors" in w for w in warnings) == (wider and not wide.is_host)
    assert any("'+avx512f'" in w for w in warnings) == (not host_has_avx512)
    assert wide.export_cpu_features() == ("skylake-avx512", "+avx512f")


@x86_64
def test_hardware_params_for_target():
    assert HardwareParams.for_target(Target.parse("llvm -mcpu=nehalem -num-cores=3")) == HardwareParams(3, 16, 64, 64)
    hp = HardwareParams.for_target(Target.parse("llvm -mcpu=skylake-avx512 -mattr=+avx512f"))
    assert hp.num_cores == (os.cpu_count() or 1) and hp.vector_unit_bytes == 64
    host = HardwareParams.for_target(Target.parse("llvm -num-cores=2"))
    assert host == HardwareParams(2, _host_bytes_from_features(), 64, 64)


def test_kind_is_an_enum_that_reads_as_its_text():
    from scheduler_core.base.target import TargetKind

    cpu, gpu = Target.parse("llvm"), Target.parse("cuda -arch=sm_90")
    assert cpu.kind is TargetKind.LLVM and gpu.kind is TargetKind.CUDA
    assert not cpu.is_gpu and gpu.is_gpu and TargetKind.CUDA.is_gpu and not TargetKind.LLVM.is_gpu
    assert gpu.kind == "cuda" and str(gpu.kind) == f"{gpu.kind}" == "cuda" and {"cuda": 1}[gpu.kind] == 1
    assert Target(kind="cuda").kind is TargetKind.CUDA  # a string kind is converted
    assert not hasattr(Target, "str")  # str(target) is the canonical text
    with pytest.raises(ValueError):
        Target(kind="opencl")
