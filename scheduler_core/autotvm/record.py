"""Template records in the auto-scheduler's record file format, and ``apply_history_best``.

A template record is an ordinary record line (``scheduler_core.measure.record``) of the DAG
the template built, with the steps of the State the config made, plus the field

    "t": {"name": "multimedia/rgb_yuv_trans", "args": [1920, 1080],
          "config": {"index": 26, "code_hash": null, "entity": [["tile_y", "sp", [-1, 180]]]}}

(the config in TVM's log form).  The DAG line precedes the first record of its workload, as
``RecordToFile`` writes it, so ``load_records``, ``load_best_record``, ``distill``, the CLI and
the workers' store read a file that mixes template records and search records unchanged, and
each template record replays as the program it measured.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.measure.data import MeasureInput as CoreMeasureInput
from scheduler_core.measure.data import MeasureResult
from scheduler_core.measure.record import DagLine, RawRecord, encode_dag_line, encode_record
from scheduler_core.measure.record_file import iter_lines
from scheduler_core.schedule.loop_state import State

from .config import ConfigEntity
from .task import DispatchContext, args_to_json, logger


def template_field(inp: Any) -> dict:
    """The ``"t"`` field of an autotvm MeasureInput: its template, arguments and config."""
    return {"name": inp.task.name, "args": args_to_json(inp.task.args), "config": inp.config.to_json_dict()}


def encode(inp: Any, res: MeasureResult) -> tuple:
    """``(workload_key, dag, line)`` of one measured config (a config the template rejected is
    recorded with the task's DAG and no steps)."""
    core = inp.core
    if core is None:
        task = inp.task.core_task
        core = CoreMeasureInput(task, State.from_dag(task.compute_dag))
    return core.task.workload_key, core.task.compute_dag, encode_record(core, res, template=template_field(inp))


def append_records(filename: str | os.PathLike, inputs: list, results: list) -> None:
    """Append template records (and each new workload's DAG line) to ``filename``; one write, fsync'ed."""
    name = str(filename)
    written = set()
    if os.path.exists(name):
        written = {item.workload_key for item in iter_lines(name, skip_invalid=True) if isinstance(item, DagLine)}
    lines = []
    for inp, res in zip(inputs, results):
        key, dag, line = encode(inp, res)
        if key not in written:
            lines.append(encode_dag_line(key, dag))
            written.add(key)
        lines.append(line)
    if not lines:
        return
    os.makedirs(os.path.dirname(os.path.abspath(name)), exist_ok=True)
    with open(name, "a+b") as f:
        prefix = b""
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            prefix = b"" if f.read(1) == b"\n" else b"\n"
        f.write(prefix + "".join(line + "\n" for line in lines).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def load_from_file(filename: str | os.PathLike, skip_invalid: bool = True) -> Iterator[tuple]:
    """``(template name, args list, target text, ConfigEntity, RawRecord)`` of each template record.

    Search records, DAG lines and (with ``skip_invalid``) invalid lines are passed over.
    """
    for item in iter_lines(filename, skip_invalid):
        if isinstance(item, RawRecord) and item.template is not None:
            try:
                config = ConfigEntity.from_json_dict(item.template["config"])
            except SchedulerCoreError:
                if skip_invalid:
                    continue
                raise
            yield item.template["name"], item.template["args"], item.target, config, item


def _canonical_target(text: str) -> str:
    try:
        return str(Target.parse(text))
    except SchedulerCoreError:
        return " ".join(str(text).split())


class ApplyHistoryBest(DispatchContext):
    """The best config per (template, args, target) of record files (TVM's ``ApplyHistoryBest``).

    records: a path, or a list of paths.  Best = the lowest median cost among NO_ERROR records.
    A query with no target (none entered) takes the best over every target.  ``best_by_workload``
    maps ``(name, args JSON text, canonical target)`` to ``(config, RawRecord)``.
    """

    def __init__(self, records: Any):
        self.best_by_workload: dict = {}
        self.best_by_name_args: dict = {}
        paths = [records] if isinstance(records, (str, os.PathLike)) else list(records)
        n = 0
        for path in paths:
            for name, args, target, config, raw in load_from_file(path):
                n += 1
                cost = raw.cost
                if cost is None:
                    continue
                key = (name, _args_text(args))
                for table, k in ((self.best_by_workload, (*key, _canonical_target(target))),
                                 (self.best_by_name_args, key)):
                    if k not in table or cost < table[k][1].median_cost:
                        table[k] = (config, raw)
        self.n_records = n
        logger.info("Finish loading %d records", n)

    def _query_inside(self, target: Target | None, name: str, args: list) -> ConfigEntity | None:
        key = (name, _args_text(args))
        found = (self.best_by_name_args.get(key) if target is None
                 else self.best_by_workload.get((*key, str(Target.parse(target)))))
        return None if found is None else found[0]


def _args_text(args: Any) -> str:
    return json.dumps(args, separators=(",", ":"))


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best(log):`` templates called inside get the best config of ``log``."""
    return ApplyHistoryBest(records)


__all__ = ["template_field", "encode", "append_records", "load_from_file", "ApplyHistoryBest", "apply_history_best"]
