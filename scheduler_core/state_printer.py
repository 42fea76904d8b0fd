"""A readable text form of a State (in the spirit of Ansor's ``State`` print)."""

from __future__ import annotations

from .printer import expr_str


def state_str(state) -> str:
    """One block per stage: its loops (name, extent, annotation) and compute location."""
    lines = []
    placeholders = [st.name for st in state.stages if st.op_type == "placeholder"]
    if placeholders:
        lines.append("Placeholder: " + ", ".join(placeholders))
    for st in state.stages:
        if st.op_type == "placeholder":
            continue
        where = st.compute_at
        if where == "iter":
            where = f"compute_at {state.stages[st.attach[0]].name}.{st.attach[1]}"
        lines.append(f"{st.name} ({st.op_type}, {where})")
        prag = st.pragma_dict()
        for it in st.iters:
            ext = "?" if it.extent is None else expr_str(it.extent)
            ann = "" if it.annotation == "none" else f" {it.annotation}"
            extra = "".join(f" {k}={v}" for k, v in prag.get(it.name, {}).items())
            lines.append(f"  for {it.name} (0,{ext}){ann}{extra}")
    return "\n".join(lines)
