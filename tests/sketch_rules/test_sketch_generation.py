"""Structure of the sketches the rules derive, Ansor's style: the expected sketches
are listed in each docstring (after TVM's test_auto_scheduler_sketch_generation.py).

The stub policy has 2 cores (the development machine), so the rfactor cases use
spatial sizes at most 16 x 2 = 32 where Ansor's tests (4 cores) use 64; with
``num_cores=4`` the numbers are Ansor's own.
"""

from __future__ import annotations

import pytest

from scheduler_core.base.errors import ScheduleError
from scheduler_core.schedule.transform_step import SplitStep
from sketch_rules import (
    ConditionKind,
    CustomSketchRule,
    SketchRule,
    default_sketch_rules,
    generate_sketches,
    register_sketch_rule,
    unregister_sketch_rule,
)
from sketch_rules.state_queries import is_tiled
from sketch_rules.step_history import has_cache_write_stage, has_rfactor_stage
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy

MLT_NAMES_2D = ["i.0", "j.0", "i.1", "j.1", "k.0", "i.2", "j.2", "k.1", "i.3", "j.3"]


def names(stage) -> list:
    return [it.name for it in stage.iters]


def assert_compute_at(state, stage_id: int, where: str, target=None):
    st = state.stages[stage_id]
    assert st.compute_at == where, (st.name, st.compute_at)
    if target is not None:
        tgt = state.stages[st.attach[0]]
        assert (tgt.name, st.attach[1]) == target


def sketches_of(tensors, **kw):
    return generate_sketches(make_policy(tensors, **kw))


def test_cpu_matmul_sketch():
    """matmul 512x512x512 on llvm gives 3 sketches (Ansor: test_cpu_matmul_sketch):
        No.0: multi-level tiling "SSRSRS" of 'matmul' (stage 2): i0 j0 i1 j1 k0 i2 j2 k1 i3 j3
        No.1: cache_write; 'matmul.local' (stage 2) tiled and computed at 'matmul' (stage 3)
              loop j.0, 'matmul' tiled to fusion level 1
        No.2: the same at 'matmul' loop j.1 (fusion level 2)
    No rfactor: the 512*512 spatial loops are longer than the reduction.
    """
    sk = sketches_of(W.matmul(512, 512, 512))
    assert len(sk) == 3
    assert names(sk[0].stages[2]) == MLT_NAMES_2D
    assert all(it.extent is None for it in sk[0].stages[2].iters)
    assert len(sk[0].stages) == 3 and not has_cache_write_stage(sk[0], 2)
    for s, level, level_names in ((sk[1], 1, ["i.0", "j.0", "i.1", "j.1"]),
                                  (sk[2], 2, ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2"])):
        assert [st.name for st in s.stages] == ["A", "B", "matmul.local", "matmul"]
        assert has_cache_write_stage(s, 2) and not has_cache_write_stage(s, 3)
        assert names(s.stages[2]) == MLT_NAMES_2D
        assert names(s.stages[3]) == level_names
        assert_compute_at(s, 2, "iter", ("matmul", f"j.{level - 1}"))
    assert [r.to_record() for r in sk[1].transform_steps][-1] == ["CA", 2, 3, 1]
    assert [r.to_record() for r in sk[2].transform_steps][-1] == ["CA", 2, 3, 3]


@pytest.mark.parametrize("n, cores", [(4, 2), (8, 4)])
def test_cpu_matmul_rfactor_sketch(n, cores):
    """matmul n x n x 512 with n*n <= 16 x cores gives 2 rfactor + 3 tiling sketches
    (Ansor, 8x8x512 on 4 cores):
        No.0: rfactor, the outer piece of the split reduction kept (stage 2 'matmul.rf')
        No.1: rfactor, the inner piece kept and moved innermost in 'matmul.rf'
        No.2: multi-level tiling
        No.3, No.4: multi-level tiling with cache_write, fusion levels 1 and 2
    The rfactor split's length is unknown in the sketches (filled by InitFillTileSize).
    """
    sk = sketches_of(W.matmul(n, n, 512), num_cores=cores)
    assert len(sk) == 5
    for s in sk[:2]:
        assert [st.name for st in s.stages] == ["A", "B", "matmul.rf", "matmul"]
        assert has_rfactor_stage(s, 2) and not has_rfactor_stage(s, 3)
        split = [st for st in s.transform_steps if isinstance(st, SplitStep)]
        assert [st.lengths for st in split] == [(None,)]
    assert names(sk[0].stages[2])[-1] == "k.1" or sk[0].stages[2].iters[-1].kind == "reduce"
    assert sk[1].stages[2].iters[-1].kind == "spatial"  # the kept inner piece, innermost
    assert [r.to_record() for r in sk[0].transform_steps] != [r.to_record() for r in sk[1].transform_steps]
    assert names(sk[2].stages[2]) == MLT_NAMES_2D
    for s in sk[3:]:
        assert has_cache_write_stage(s, 2)
        assert_compute_at(s, 2, "iter")
    assert names(sk[3].stages[3]) != names(sk[4].stages[3])


def test_cpu_matmul_small_reduction_has_no_rfactor():
    """matmul 4x4x8 on 2 cores: the spatial loops (16) are longer than the reduction (8),
    no rfactor: 3 sketches, as for the large matmul (4x4x16 would get rfactor: Ansor
    factorizes when spatial <= reduction)."""
    assert len(sketches_of(W.matmul(4, 4, 8))) == 3
    assert len(sketches_of(W.matmul(4, 4, 16))) == 5


@pytest.mark.parametrize("make", [lambda: W.matmul_add(512, 512, 512),
                                  lambda: W.matmul_bias_relu(512, 512, 512)])
def test_cpu_matmul_fused_epilogue_sketch(make):
    """matmul + bias (seed 000; stages A, B, matmul, C, out) gives 3 sketches:
        No.0: 'matmul' (stage 2) tiled "SSRSRS", computed at 'out' (stage 4) loop j.0;
              'out' follows the spatial splits to level 1: i.0 j.0 i.1 j.1
        No.1: the same at fusion level 2: 'out' = i.0 j.0 i.1 j.1 i.2 j.2, at loop j.1
        No.2: 'matmul' tiled at root, 'out' untouched
    No cache_write: the element-wise consumer 'out' is the write-back stage.
    matmul + bias + ReLU gives the same three.
    """
    sk = sketches_of(make())
    assert len(sk) == 3
    out_id = len(sk[0].stages) - 1
    for s, level in ((sk[0], 1), (sk[1], 2)):
        assert len(s.stages) == len(sk[2].stages)  # no cache stage
        assert names(s.stages[2]) == MLT_NAMES_2D
        assert len(s.stages[out_id].iters) == 2 * (level + 1)
        assert_compute_at(s, 2, "iter", (s.stages[out_id].name, f"j.{level - 1}"))
    assert names(sk[2].stages[2]) == MLT_NAMES_2D
    assert_compute_at(sk[2], 2, "root")
    assert not is_tiled(sk[2].stages[out_id])


def test_cpu_conv2d_bias_relu_sketch():
    """conv2d NCHW + bias + ReLU (stages data, pad, kernel, conv2d, bias, bias_relu) gives 3
    sketches (Ansor: test_cpu_conv2d_bn_relu_sketch):
        No.0: 'conv2d' (stage 3) tiled "SSRSRS" (4 spatial x 4 + 3 reduce x 2 = 22 loops),
              computed at 'bias_relu' (stage 5), which is tiled to fusion level 1
        No.1: the same at fusion level 2
        No.2: 'conv2d' tiled at root, 'bias_relu' untiled
    'pad' (stage 1) is never inlined by the sketch rules (its if_then_else makes it not
    strictly inlineable, as in Ansor) and stays untiled at root.
    """
    sk = sketches_of(W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3))
    assert len(sk) == 3
    for s in sk:
        assert [st.name for st in s.stages] == ["data", "pad", "kernel", "conv2d", "bias", "bias_relu"]
        assert not is_tiled(s.stages[1]) and s.stages[1].compute_at == "root"
        assert len(s.stages[3].iters) == 22
    assert_compute_at(sk[0], 3, "iter", ("bias_relu", "x.0"))
    assert_compute_at(sk[1], 3, "iter", ("bias_relu", "x.1"))
    assert is_tiled(sk[0].stages[5]) and is_tiled(sk[1].stages[5])
    assert_compute_at(sk[2], 3, "root")
    assert not is_tiled(sk[2].stages[5])


def test_cpu_softmax_sketch():
    """softmax 1x1024 (stages A, row_max, exp, row_sum, softmax) gives
    (2 rfactor + 1 default for row_sum) x (2 rfactor + 1 default for row_max) = 9 sketches,
    in Ansor's order (test_cpu_softmax_sketch): sketch i*3+j has
        j in {0, 1}: 'row_max.rf' at stage 1;  i in {0, 1}: 'row_sum.rf' at stage 4 (3
        when row_max has no rfactor); sketch 8 has no steps.
    'exp' is not inlined (exp is an expensive intrinsic, so not strictly inlineable).
    """
    sk = sketches_of(W.softmax(1, 1024))
    assert len(sk) == 9
    for i in range(3):
        for j in range(3):
            s = sk[i * 3 + j]
            assert has_rfactor_stage(s, 1) == (j in (0, 1))
            if i in (0, 1):
                assert has_rfactor_stage(s, 4 if j in (0, 1) else 3)
            assert all(st.compute_at != "inlined" for st in s.stages)
    assert len(sk[8].transform_steps) == 0


def test_cpu_layer_norm_sketch():
    """layer norm (stages A, total, mean, sqsum, gamma, beta, layer_norm) gives 27 sketches:
    'mean' is always inlined (strictly inlineable); 'total' and 'sqsum' each get 2 rfactor
    sketches + 1 default; 'layer_norm' reads mean[i] and gamma[j] (two inputs missing an
    axis), so Ansor's rule tiles it: plain "SSRSRS" or cache_write with fusion level 1 / 2.
    """
    sk = sketches_of(W.layer_norm(64, 128))
    assert len(sk) == 27
    for s in sk:
        mean = [k for k, st in enumerate(s.stages) if st.name == "mean"][0]
        assert s.stages[mean].compute_at == "inlined"
    assert sum(any(st.name == "layer_norm.local" for st in s.stages) for s in sk) == 18


def test_cpu_elementwise_sketches_have_no_steps():
    """RGB->YUV (seed 003) and transpose: one sketch each, no steps (nothing to tile;
    the init rules parallelize and vectorize)."""
    for tensors in (W.rgb_to_yuv(1920, 1080), W.transpose(64, 32)):
        sk = sketches_of(tensors)
        assert len(sk) == 1 and sk[0].transform_steps == ()


@pytest.mark.parametrize("make, n", [(lambda: W.batch_matmul(4, 64, 64, 64), 3),
                                     (lambda: W.depthwise_conv2d(1, 32, 56, 56, 3, 3), 3)])
def test_cpu_other_tiled_sketches(make, n):
    """batch_matmul and depthwise conv2d (output stages that need tiling): plain tiling and
    cache_write with fusion levels 1 and 2 -> 3 sketches."""
    sk = sketches_of(make())
    assert len(sk) == n
    assert not has_cache_write_stage(sk[0], len(sk[0].stages) - 1)
    assert all(has_cache_write_stage(s, len(s.stages) - 2) for s in sk[1:])


def test_cpu_cumsum_scan_sketch():
    """cumsum scan (seed 001; stages X, s_init, s_state, s_update, scan) gives 2 sketches:
        No.0: 's_update' (stage 3) loops t, i.0 (parallel), i.1 -- i split with unknown length
        No.1: the same split, all serial
    The scan stage and 's_init' (computed before the scan) are left as they are.
    """
    sk = sketches_of(W.cumsum_scan(128, 1024))
    assert len(sk) == 2
    for s, ann in ((sk[0], "parallel"), (sk[1], "none")):
        upd = s.stages[3]
        assert upd.name == "s_update" and names(upd) == ["t", "i.0", "i.1"]
        assert upd.iters[1].annotation == ann and upd.iters[2].extent is None
        assert s.stages[4].op_type == "scan" and not s.stages[4].relations
        assert s.stages[1].compute_at == "root" and not is_tiled(s.stages[1])


def test_cpu_multi_state_scan_sketch():
    """A scan with two states has two update stages, each with the 2 scan sketches: 4."""
    assert len(sketches_of(W.two_state_scan(16, 32, 48))) == 4


def test_tiling_structure_comes_from_params():
    """``cpu_multi_level_tiling_structure="SRS"`` tiles matmul as i0 j0 k0 i1 j1."""
    sk = sketches_of(W.matmul(64, 64, 64), cpu_multi_level_tiling_structure="SRS")
    assert names(sk[0].stages[2]) == ["i.0", "j.0", "k", "i.1", "j.1"]


def test_cpu_custom_sketch_rule():
    """A registered rule is tried first (Ansor: test_cpu_custom_sketch): a rule that says
    APPLY_AND_SKIP_REST everywhere and returns the state as is plus a split of i by
    [8, 2], both finished (-1), gives exactly those 2 sketches."""
    def meet(policy, state, stage_id):
        return ConditionKind.APPLY_AND_SKIP_REST

    def apply(policy, state, stage_id):
        return [(state, -1), (SplitStep(2, 0, 512, (8, 2), True).apply(state), -1)]

    rule = register_sketch_rule(CustomSketchRule(meet, apply, "split_i"))
    try:
        sk = sketches_of(W.matmul(512, 512, 512))
    finally:
        unregister_sketch_rule(rule)
    assert len(sk) == 2
    assert [it.const_extent for it in sk[0].stages[2].iters] == [512, 512, 512]
    assert [it.const_extent for it in sk[1].stages[2].iters] == [32, 8, 2, 512, 512]
    assert len(sketches_of(W.matmul(512, 512, 512))) == 3  # unregistered again


def test_explicit_rules_list_replaces_the_defaults():
    """``rules=[RuleSkipStage()]`` gives the initial state only; the default list is
    TVM's CPU order with the scan rule before RuleSkipStage."""
    policy = make_policy(W.matmul(64, 64, 64))
    rules = default_sketch_rules()
    assert [type(r).__name__ for r in rules] == [
        "RuleAlwaysInline", "RuleSimplifyComputeWithConstTensor", "RuleAddRfactor",
        "RuleAddCacheWrite",
        "RuleMultiLevelTilingWithFusion", "RuleMultiLevelTiling", "RuleScanUpdate",
        "RuleSkipStage"]
    sk = generate_sketches(policy, rules=rules[-1:])
    assert len(sk) == 1 and sk[0].transform_steps == ()


def test_a_rule_that_never_moves_on_is_stopped():
    """A rule that keeps returning the same stage id ends in a ScheduleError, not a hang."""
    class Loop(SketchRule):
        def meet_condition(self, policy, state, stage_id):
            return ConditionKind.APPLY

        def apply(self, policy, state, stage_id):
            return [(state, stage_id), (state, stage_id)]

    with pytest.raises(ScheduleError):
        generate_sketches(make_policy(W.matmul(8, 8, 8)), rules=[Loop()])


def test_register_rejects_non_rules():
    with pytest.raises(TypeError):
        register_sketch_rule(lambda p, s, k: None)
