"""Floor 4: State -> loop program (bound inference, buffers, guards).

    lower  lower_state(state) -> PrimFunc (no passes); the attach tree and region inference
"""
