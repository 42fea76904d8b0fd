"""Floor 2: what to compute: tensors, the ComputeDAG and the task.

    tensor           placeholder / compute / scan operations and their output tensors
    compute_dag      ComputeDAG: ops in order, FLOP count, workload_key, JSON round trip
    dag_json(_expr)  the versioned JSON wire format (validating decoder)
    access_analysis  Ansor's per-op access analysis (inlinable, needs tiling, fusable)
    access_bounds    proof that every tensor access stays inside its tensor (run at validation)
    shape_binding    binding symbolic shape variables from input arrays
    reference        a numpy evaluator of any DAG (the correctness reference)
    task             Task: DAG + workload_key + Target + HardwareParams, as plain frozen data
    workload_registry  register_workload: name -> function returning a workload's tensors (TVM's keys)
"""
