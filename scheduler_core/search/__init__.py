"""The search floor (above the wings sketch_rules and cost_model).

    search_task       SearchTask (Task + tuning), TuningOptions, register_workload
    search_policy     SketchPolicy: sketches, initial population, evolution, eps-greedy batches
    program_measurer  ProgramMeasurer: build, run, check the best, callbacks
    task_scheduler    TaskScheduler: one trial budget across the tasks of a model
"""
