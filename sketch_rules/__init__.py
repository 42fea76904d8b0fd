"""sketch_rules: Ansor's rules for sketches, random annotations and mutations.

    ComputeDAG --generate_sketches--> sketches --sample_init_population--> complete States
    State --apply_mutation (MutateTileSize, ...)--> State

The search layer (``scheduler_core.search.search_policy``) drives these functions; the
package imports only the compiler layer of ``scheduler_core``.  Every function
takes a duck-typed ``policy``: ``policy.task`` (``compute_dag``, ``target``,
``hardware_params`` with ``num_cores``...), ``policy.params``
(:class:`SketchPolicyParams`) and, where random, a ``numpy.random.Generator``.

Reading guide: ``sketch_rule`` (the rule contract), ``cpu_sketch_rules``,
``const_tensor_rule`` (Winograd's constant-tensor stages) and ``scan_sketch_rule``
(the rules), ``sketch_generation`` (the derivation),
``init_population``, ``mutation``; ``state_queries``, ``step_history``,
``tiling``, ``compute_location``, ``split_factors`` and ``random_pick`` are their helpers.

GPU targets (``cuda``): ``gpu_sketch_rules`` (shared-memory cache reads, cross-thread
reduction, TVM's GPU rule order), InitThreadBind in ``init_population``, the GPU
mutation weights in ``mutation``, the thread-block limits in ``gpu_params``.  The
``default_*_rules(policy)`` functions pick the rules of the policy's target, and
:func:`generate_sketches`, :func:`sample_init_population` and :func:`apply_mutation`
use them when no rules are given.
"""

from .const_tensor_rule import RuleSimplifyComputeWithConstTensor
from .cpu_sketch_rules import (
    RuleAddCacheWrite,
    RuleAddRfactor,
    RuleAlwaysInline,
    RuleMultiLevelTiling,
    RuleMultiLevelTilingWithFusion,
    RuleSkipStage,
)
from .gpu_params import GpuLimits, gpu_limits
from .gpu_sketch_rules import (
    RuleAddCacheRead,
    RuleCrossThreadReduction,
    RuleSpecialComputeLocationGPU,
    gpu_sketch_rules,
)
from .init_population import (
    InitChangeComputeLocation,
    InitFillTileSize,
    InitParallel,
    InitThreadBind,
    InitUnroll,
    InitVectorization,
    PopulationGenerationRule,
    apply_init_rules,
    default_init_rules,
    sample_init_population,
)
from .mutation import (
    DEFAULT_MUTATION_RULES,
    GPU_MUTATION_RULES,
    MutateAutoUnroll,
    MutateComputeLocation,
    MutateParallel,
    MutateTileSize,
    MutationRule,
    apply_mutation,
    default_mutation_rules,
)
from .params import SketchPolicyParams
from .scan_sketch_rule import RuleScanUpdate
from .sketch_generation import (
    default_sketch_rules,
    generate_sketches,
    register_sketch_rule,
    registered_sketch_rules,
    unregister_sketch_rule,
)
from .sketch_rule import ConditionKind, CustomSketchRule, SketchRule

__all__ = [
    "SketchPolicyParams", "ConditionKind", "SketchRule", "CustomSketchRule",
    "RuleAlwaysInline", "RuleAddRfactor", "RuleAddCacheWrite", "RuleMultiLevelTilingWithFusion",
    "RuleMultiLevelTiling", "RuleScanUpdate", "RuleSimplifyComputeWithConstTensor",
    "RuleSkipStage", "default_sketch_rules",
    "generate_sketches", "register_sketch_rule", "unregister_sketch_rule",
    "registered_sketch_rules", "PopulationGenerationRule", "InitFillTileSize",
    "InitChangeComputeLocation", "InitParallel", "InitUnroll", "InitVectorization",
    "default_init_rules", "apply_init_rules", "sample_init_population", "MutationRule",
    "MutateTileSize", "MutateComputeLocation", "MutateAutoUnroll", "MutateParallel",
    "DEFAULT_MUTATION_RULES", "apply_mutation",
    "RuleAddCacheRead", "RuleSpecialComputeLocationGPU", "RuleCrossThreadReduction",
    "gpu_sketch_rules", "InitThreadBind", "GPU_MUTATION_RULES", "default_mutation_rules",
    "GpuLimits", "gpu_limits",
]
