"""The best schedule of a task, read from Redis and made into a program by the one driver path.

    best index (Redis) --decode_record--> State --driver.program_from_state--> Program
        Program.lowered   the text /tasks/{id}/best shows
        Program.build()   the module whose .so/.o/.ll/.asm are the task's artifacts

Both the API's best-schedule answer and the tune job's artifacts go through
:func:`best_program`, so the lowered program a user reads is the program they download.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler_core.driver.program import Program, program_from_state
from scheduler_core.measure.record import RawRecord, parse_line
from scheduler_core.measure.record_file import decode_record
from scheduler_core.schedule.schedule_printer import state_to_python

from .records import TaskRecord
from .store import RedisStore


def _replayed_best(store: RedisStore, workload_key: str, target: str):
    """``(cost_s, record line, replayed State)`` of the best record, or None without one."""
    best = store.best_record(workload_key, target)
    if best is None:
        return None
    inp, _ = decode_record(best[1], {workload_key: store.load_dag(workload_key)})
    return best[0], best[1], inp.state


def best_program(store: RedisStore, workload_key: str, target: str) -> Program | None:
    """The Program of the task's best record, or None while it has no successful measurement."""
    found = _replayed_best(store, workload_key, target)
    return None if found is None else program_from_state(found[2], target)


def describe_best(store: RedisStore, task: TaskRecord) -> dict[str, Any] | None:
    """The best record of ``task`` as the API shows it, or None without one.

    Keys: ``cost_s`` (seconds), ``gflops``, ``steps`` (the record's step list), ``script``
    (Python schedule code), ``lowered`` (the program in the artifact), ``record`` (decoded line).
    """
    found = _replayed_best(store, task.workload_key, task.target)
    if found is None:
        return None
    cost_s, line, state = found
    program = program_from_state(state, task.target)
    raw = parse_line(line)
    steps = list(raw.steps) if isinstance(raw, RawRecord) else []
    return {"cost_s": cost_s, "gflops": state.dag.flop_ct / cost_s / 1e9, "steps": steps,
            "script": state_to_python(state), "lowered": program.lowered, "record": json.loads(line)}
