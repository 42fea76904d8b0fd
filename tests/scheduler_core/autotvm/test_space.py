"""AutoTVM config spaces, configs and templates (no measurement): lengths, printing, apply, errors."""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import autotvm, te
from scheduler_core.autotvm.measure import cuda_refusal
from scheduler_core.autotvm.space import (
    AnnotateSpace,
    OtherOptionSpace,
    ReorderSpace,
    SplitSpace,
    get_factors,
)
from scheduler_core.base.errors import BuildError, InvalidWorkloadError, ScheduleError

from .templates import YUV_MATRIX, add_knob, rgb_yuv_trans  # noqa: F401  (registers the templates)


def run_yuv(func, w, h):
    rgb = np.random.default_rng(0).uniform(size=(w, h, 3)).astype(np.float32)
    out = sc.nd.empty((w, h, 3))
    func(sc.nd.array(rgb), out)
    np.testing.assert_allclose(out.numpy(), rgb.dot(YUV_MATRIX), rtol=1e-3, atol=1e-6)


def test_seed003_space_has_the_32_factors_of_1080_and_prints_like_tvm():
    task = autotvm.task.create("test/rgb_yuv_trans", args=(1920, 1080), target="llvm")
    assert len(task.config_space) == 32 == len(get_factors(1080))
    assert str(task.config_space) == ("ConfigSpace (len=32, space_map=\n"
                                      "   0 tile_y: Split(policy=factors, product=1080, num_outputs=2) len=32\n)")
    # the seed's log: index 30 is [-1, 540], 26 is [-1, 180], 3 is [-1, 4]
    assert str(task.config_space.get(30)) == "[('tile_y', [-1, 540])],None,30"
    assert task.config_space.get(26)["tile_y"].size == [-1, 180]
    assert task.config_space.get(3).index == 3
    assert task.flop == 1920 * 1080 * 3 * 15  # 5 per channel formula (TVM's FlopEstimator: both branches)
    assert (task.name, task.args) == ("test/rgb_yuv_trans", (1920, 1080))
    assert task.target == sc.Target.parse("llvm")


def test_split_policies_and_options():
    assert [e.size for e in SplitSpace([12]).entities] == [[-1, f] for f in (1, 2, 3, 4, 6, 12)]
    assert [e.size[1] for e in SplitSpace([12], policy="power2").entities] == [1, 2, 4, 8]
    assert [e.size[1] for e in SplitSpace([12], policy="verbose").entities] == [1, 2, 3, 4, 6, 8, 12]
    assert [e.size[1] for e in SplitSpace([12], max_factor=4).entities] == [1, 2, 3, 4]
    assert [e.size[1] for e in SplitSpace([12], filter=lambda e: e.size[1] % 2 == 0).entities] == [2, 4, 6, 12]
    assert [e.size for e in SplitSpace([12], policy="candidate", candidate=[[-1, 3], [2, 6]]).entities] == \
        [[-1, 3], [-1, 6]]
    three = SplitSpace([16], num_outputs=3)  # (a, b) powers of two with a * b | 16
    assert len(three) == 15 and all(16 % (e.size[1] * e.size[2]) == 0 for e in three.entities)
    with pytest.raises(InvalidWorkloadError, match="unknown policy"):
        SplitSpace([12], policy="halves")
    with pytest.raises(InvalidWorkloadError, match="no way to split"):
        SplitSpace([12], filter=lambda e: False)


def test_knob_reorder_annotate_lengths():
    axes = ["a", "b", "c", "d"]
    assert len(ReorderSpace(axes, "all")) == 24
    assert len(ReorderSpace(axes, "identity")) == 1
    inter = ReorderSpace(axes, "interval_all", interval=(1, 3))
    assert len(inter) == 2 and [e.perm for e in inter.entities] == [[0, 1, 2, 3], [0, 2, 1, 3]]
    assert len(AnnotateSpace(axes, "try_unroll")) == 16
    assert len(AnnotateSpace(axes, "try_vec")) == 2
    assert len(AnnotateSpace(axes, "try_unroll_vec")) == 24
    assert len(OtherOptionSpace([0, 1, 2])) == 3
    with pytest.raises(InvalidWorkloadError, match="interval"):
        ReorderSpace(axes, "interval_all", interval=(3, 9))


def test_matmul_space_length_index_order_and_configs_match_numpy():
    task = autotvm.task.create("test/matmul_knobs", args=(32, 32, 32), target="llvm")
    space = task.config_space
    assert space.dims == [21, 6, 2, 6, 3] and len(space) == 21 * 6 * 2 * 6 * 3
    assert space.point2knob(1) == [1, 0, 0, 0, 0]  # the first knob varies fastest, as in TVM
    assert space.knob2point(space.point2knob(3001)) == 3001
    rng = np.random.default_rng(1)
    a = rng.uniform(size=(32, 32)).astype(np.float32)
    b = rng.uniform(size=(32, 32)).astype(np.float32)
    for index in (0, 777, 2000, 3001, len(space) - 1):
        cfg = space.get(index)
        s, args = task.instantiate(cfg)
        c = sc.nd.empty((32, 32))
        sc.build(s, args)(sc.nd.array(a), sc.nd.array(b), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)
        text = s.to_python()
        if cfg["ann"].anns == ["vec"]:
            assert "vectorize" in text
        if cfg["parallel"].val:
            assert "parallel" in text
    with pytest.raises(IndexError, match="out of range"):
        space.get(len(space))


def test_fallback_config_builds_and_matches_numpy():
    s, args = rgb_yuv_trans(64, 60)  # no task, no history: each knob's default ([-1, 1])
    assert "split" in s.to_python()
    run_yuv(sc.build(s, args), 64, 60)


def test_knob_values_apply():
    task = autotvm.task.create("test/add_knob", args=(1000,), target="llvm")
    assert len(task.config_space) == 3
    for k, factor in enumerate((4, 8, 16)):
        cfg = task.config_space.get(k)
        assert cfg["factor"].val == factor
        s, args = task.instantiate(cfg)
        x = np.arange(1000, dtype=np.float32)
        out = sc.nd.empty((1000,))
        sc.build(s, args)(sc.nd.array(x), sc.nd.array(2 * x), out)
        np.testing.assert_allclose(out.numpy(), 3 * x)


def test_errors_are_clear():
    with pytest.raises(InvalidWorkloadError, match="no template is registered under 'nope/nothing'"):
        autotvm.task.create("nope/nothing", args=(1,))
    with pytest.raises(ScheduleError, match="outside a template"):
        autotvm.get_config()
    with pytest.raises(InvalidWorkloadError, match="knob 'f' is defined twice"):
        autotvm.task.create("test/knob_twice", args=(16,))
    with pytest.raises(InvalidWorkloadError, match="template argument args\\[0\\]"):
        autotvm.task.create("test/add_knob", args=(object(),))
    task = autotvm.task.create("test/add_knob", args=(64,))
    with pytest.raises(InvalidWorkloadError, match="no knob 'missing'"):
        task.config_space.get(0)["missing"]
    with pytest.raises(InvalidWorkloadError, match="no constant extent"):
        a = te.placeholder((8,), name="a")
        b = te.compute((8,), lambda i: a[i] + 1.0, name="b")
        s = te.create_schedule(b.op)
        outer, _ = s[b].split(b.op.axis[0], factor=2)
        autotvm.ConfigSpace().define_split("x", outer)


def test_gpu_branch_builds_for_cuda_and_emulates_on_cpu():
    task = autotvm.task.create("test/rgb_yuv_trans", args=(64, 60, "cuda"), target="cuda")
    assert len(task.config_space) == len(get_factors(64 * 60))
    cfg = next(task.config_space.get(k) for k in range(len(task.config_space))
               if task.config_space.get(k)["xy_split"].size[1] == 64)
    s, args = task.instantiate(cfg)
    mod = sc.build(s, args, "cuda")
    src = mod.get_source("cu")
    assert "blockIdx.x" in src and "threadIdx.x" in src and '"grid": [\n    60' in mod.get_source()
    rgb = np.random.default_rng(0).uniform(size=(64, 60, 3)).astype(np.float32)
    out = np.zeros((64, 60, 3), np.float32)
    mod.emulate(rgb, out)
    np.testing.assert_allclose(out, rgb.dot(YUV_MATRIX), rtol=1e-3, atol=1e-6)


def test_tuning_for_cuda_without_a_gpu_is_refused_clearly():
    if cuda_refusal() is None:
        pytest.skip("a GPU is attached here")
    task = autotvm.task.create("test/rgb_yuv_trans", args=(64, 60, "cuda"), target="cuda")
    with pytest.raises(BuildError, match="cannot tune 'test/rgb_yuv_trans' for cuda"):
        autotvm.tuner.RandomTuner(task).tune(n_trial=2, measure_option=autotvm.measure_option())


def test_target_context_and_apply_config():
    with sc.target.create("llvm") as t:
        assert sc.target.current() is t and t == sc.Target.parse("llvm")
        with sc.target.create("cuda"):
            assert sc.target.current().kind == "cuda"
        assert sc.target.current() is t
    assert sc.target.current() is None
    task = autotvm.task.create("test/add_knob", args=(64,))
    with autotvm.ApplyConfig(task.config_space.get(2)):
        assert autotvm.get_config()["factor"].val == 16


def test_model_tuner_knob_features_and_diverse_pick():
    task = autotvm.task.create("test/matmul_knobs", args=(32, 32, 32), target="llvm")
    space = task.config_space
    tuner = autotvm.tuner.LGBMTuner(task, feature_type="knob", diversity=0.5)
    feats = tuner.knobs.features(np.arange(len(space)))
    # tile_i: log2 of 3 lengths, tile_j: 2, parallel: 1, order: 5 positions, ann: 1 code
    assert feats.shape == (len(space), 3 + 2 + 1 + 5 + 1)
    assert feats[space.knob2point([0, 5, 0, 0, 0]), 3:5].tolist() == [0.0, 5.0]  # tile_j [-1, 32]: 1 x 32
    far = space.knob2point([0, 1, 1, 1, 1])
    assert tuner.diverse_pick([0, 1, 2, far], 2) == [0, far]  # new values of four knobs beat rank
