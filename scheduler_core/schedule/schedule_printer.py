"""Print a State as the equivalent Python schedule code (seed 000's ``print_best``).

The code uses the manual schedule API and expects ``s`` (a Schedule from
``te.create_schedule``), ``te`` and one variable per original stage named
like the stage (``matmul``, ``out``); executing it rebuilds an equivalent
schedule: same loops, same annotations, same program.
"""

from __future__ import annotations

import re

from scheduler_core.ir.name_supply import fresh_name

from . import dataflow_step as df
from . import transform_step as ts
from .loop_state import State


def py_name(name: str) -> str:
    """A Python identifier for a stage or iterator name (``i.0@j.0@`` -> ``i_0_j_0``)."""
    s = re.sub(r"[^0-9a-zA-Z_]", "_", name).strip("_") or "v"
    return "_" + s if s[0].isdigit() else s


class _Printer:
    def __init__(self, init: State):
        self.lines: list = []
        self.state = init
        self.tensor_names: list = []
        self.iter_names: list = []
        self.used: set = set()
        for st in init.stages:
            self.tensor_names.append(self._fresh(py_name(st.name)))
            self.iter_names.append({})
        for k, st in enumerate(init.stages):
            if st.op_type == "compute":
                self._axes_line(k)

    def _fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def _axes_line(self, k: int):
        st = self.state.stages[k]
        t = self.tensor_names[k]
        names = {}
        for it in st.iters:
            names[it.name] = self._fresh(f"{t}_{py_name(it.name)}")
        self.iter_names[k] = names
        lhs = ", ".join(names[it.name] for it in st.iters)
        if len(st.iters) == 1:
            lhs += ","
        self.lines.append(f"{lhs} = tuple({t}.op.axis) + tuple({t}.op.reduce_axis)")

    def _it(self, k: int, iter_id: int) -> str:
        return self.iter_names[k][self.state.stages[k].iters[iter_id].name]

    def _s(self, k: int) -> str:
        return f"s[{self.tensor_names[k]}]"

    def _split(self, k: int, iter_id: int, lengths, inner_to_outer: bool):
        var = self._it(k, iter_id)
        cur = var
        if inner_to_outer:
            for ln in reversed(lengths):
                o, i = self._fresh(cur + "_o"), self._fresh(cur + "_i")
                self.lines.append(f"{o}, {i} = {self._s(k)}.split({cur}, factor={ln})")
                cur = o
        else:
            for ln in lengths:
                o, i = self._fresh(cur + "_o"), self._fresh(cur + "_i")
                self.lines.append(f"{o}, {i} = {self._s(k)}.split({cur}, nparts={ln})")
                cur = i

    def step(self, step):
        before = self.state
        after = step.apply(before)
        k: int = getattr(step, "stage_id", -1)  # every step printed below has a stage_id
        if isinstance(step, (ts.SplitStep, ts.FollowSplitStep, ts.FollowFusedSplitStep)):
            if isinstance(step, ts.SplitStep):
                lengths, i2o = step.lengths, step.inner_to_outer
            elif isinstance(step, ts.FollowSplitStep):
                lengths, i2o = step.lengths(before), True
            else:
                lengths, i2o = (step.length(before),), step.factor_or_nparts
            self._split(k, step.iter_id, lengths, i2o)
            self._rename_split(k, before, after, step.iter_id, len(lengths), i2o)
        elif isinstance(step, ts.FuseStep):
            olds = [self._it(k, i) for i in step.iter_ids]
            if len(olds) > 1:
                new = self._fresh("_".join(olds) + "_fused")
                self.lines.append(f"{new} = {self._s(k)}.fuse({', '.join(olds)})")
                self.iter_names[k][after.stages[k].iters[step.iter_ids[0]].name] = new
        elif isinstance(step, ts.ReorderStep):
            order = ", ".join(self._it(k, i) for i in step.after_ids)
            self.lines.append(f"{self._s(k)}.reorder({order})")
        elif isinstance(step, ts.AnnotationStep):
            x = self._it(k, step.iter_id)
            a = step.annotation
            if a in ("parallel", "vectorize", "unroll"):
                self.lines.append(f"{self._s(k)}.{a}({x})")
            elif a != "none":
                self.lines.append(f'{self._s(k)}.bind({x}, te.thread_axis("{a}"))')
        elif isinstance(step, ts.PragmaStep):
            key, val = step.parsed()
            self.lines.append(f'{self._s(k)}.pragma({self._it(k, step.iter_id)}, "{key}", {val!r})')
        elif isinstance(step, ts.ComputeAtStep):
            self.lines.append(f"{self._s(k)}.compute_at({self._s(step.target_stage_id)}, "
                              f"{self._it(step.target_stage_id, step.target_iter_id)})")
        elif isinstance(step, df.ComputeInlineStep):
            self.lines.append(f"{self._s(k)}.compute_inline()")
        elif isinstance(step, ts.ComputeRootStep):
            self.lines.append(f"{self._s(k)}.compute_root()")
        elif isinstance(step, ts.StorageAlignStep):
            self.lines.append(f"{self._s(k)}.storage_align({self._it(k, step.iter_id)}, {step.factor}, {step.offset})")
        elif isinstance(step, df.CacheReadStep):
            readers = ", ".join(self.tensor_names[r] for r in step.reader_stage_ids)
            new = self._fresh(py_name(after.stages[k + 1].name))
            self.lines.append(f'{new} = s.cache_read({self.tensor_names[k]}, "{step.scope_name}", [{readers}])')
            self.tensor_names.insert(k + 1, new)
            self.iter_names.insert(k + 1, {})
            self.state = after
            self._axes_line(k + 1)
            return
        elif isinstance(step, (df.CacheWriteStep, df.RfactorStep)):
            t = self.tensor_names[k]
            new = self._fresh(py_name(after.stages[k].name))
            if isinstance(step, df.CacheWriteStep):
                # A multi-output op's cache_write returns a list; any output names the stage.
                first = "[0]" if after.stages[k].op.num_outputs > 1 else ""
                self.lines.append(f'{new} = s.cache_write({t}, "{step.scope_name}"){first}')
            else:
                self.lines.append(f"{new} = s.rfactor({t}, {self._it(k, step.iter_id)}, "
                                  f"factor_axis={step.factor_iter_id})")
            self.tensor_names.insert(k, new)
            self.iter_names.insert(k, {})
            self.state = after
            self._axes_line(k)
            self._axes_line(k + 1)
            return
        self.state = after

    def _rename_split(self, k, before, after, iter_id, n, inner_to_outer):
        # The printed chain of single splits produced variables; map the new iterators to them.
        names = [line.split(" = ")[0].split(", ") for line in self.lines[-n:]]
        new_iters = after.stages[k].iters[iter_id: iter_id + n + 1]
        if inner_to_outer:
            inner_vars = [pair[1] for pair in names]  # innermost first
            outer = names[-1][0]
            vars_ = [outer] + list(reversed(inner_vars))
        else:
            outer_vars = [pair[0] for pair in names]
            vars_ = outer_vars + [names[-1][1]]
        for it, v in zip(new_iters, vars_):
            self.iter_names[k][it.name] = v


def state_to_python(state: State) -> str:
    """The Python schedule code that rebuilds ``state`` from a fresh schedule."""
    p = _Printer(State.from_dag(state.dag))
    for step in state.transform_steps:
        p.step(step)
    return "\n".join(p.lines) + "\n"
