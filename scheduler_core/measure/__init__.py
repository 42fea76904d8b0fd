"""Floor 9: measuring programs and keeping the records.

    MeasureInput --LocalBuilder--> BuildResult --LocalRunner--> MeasureResult --record--> JSON line

    data           MeasureInput, BuildResult, MeasureResult, MeasureErrorNo, FAILED_COST_S
    popen_pool     crash-safe worker processes with timeouts
    local_builder  builds in worker processes (through driver.program)
    local_runner   times in worker processes; the reference check
    record         record lines: encode, parse, read, best, distill (ours, v1, and TVM's v0.6 lines)
    tvm_record     TVM's log format: targets, hardware params, step layouts, resolving a TVM workload_key
"""
