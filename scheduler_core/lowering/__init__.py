"""Floor 4: State -> loop program (bound inference, buffers, guards).

    lower  lower_state(state) -> PrimFunc (no passes); the attach tree and region inference
    gpu    lower_for_gpu(func, "cuda") -> the kernel form of a cuda target
           (docs/gpu_kernel_form.md): kernels, launch dimensions, shared memory, barriers;
           its passes are split_host_device, thread_allreduce, unify_thread_binding,
           thread_sync, guard_sinking and launch_params (one module each)
"""
