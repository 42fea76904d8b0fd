"""Floor 3: how to compute it: Ansor's State and its transform steps.

    loop_state        State / Stage / Iterator (copy-on-write) and their text form
    iter_index        leaf-loop extents and root-axis index expressions of split/fuse relations
    transform_step    loop steps: split, follow split, fuse, reorder, annotation, pragma, storage align
    dataflow_step     compute location and dataflow steps: compute_at/inline/root, cache, rfactor; replay
    schedule_api      the manual schedule API over the same steps (s[C].split, tile, bind, ...)
    schedule_printer  a State as equivalent Python schedule code
    layout_rewrite    tile-ordered copies of layout-free placeholders
"""
