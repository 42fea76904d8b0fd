"""Templates, tasks and the dispatch of configs (TVM's ``autotvm/task/task.py`` and ``dispatcher.py``).

    @autotvm.template("multimedia/rgb_yuv_trans")
    def rgb_yuv_trans(w, h, c=3):
        s, (rgb, yuv) = ...                  # te.create_schedule(...)
        cfg = autotvm.get_config()
        cfg.define_split("tile_y", y, num_outputs=2)
        yo, yi = cfg["tile_y"].apply(s, yuv, y)
        return s, [rgb, yuv]

    task = autotvm.task.create("multimedia/rgb_yuv_trans", args=(1920, 1080), target="llvm")
    len(task.config_space)                   # 32: the factors of 1080

Which config ``get_config()`` returns depends on who runs the template:

- :func:`create` runs it once under a :class:`~.config.ConfigSpace` (knobs are collected);
- a tuner runs it under each :class:`~.config.ConfigEntity` it measures (:meth:`Task.instantiate`);
- calling the decorated function asks the innermost dispatch context (``with
  autotvm.apply_history_best(log):``) for the config of (template, args, target); with none,
  or none recorded, it gets a :class:`~.config.FallbackConfigEntity` (each knob's default).

The target of a direct call is ``scheduler_core.target.current()`` (``with sc.target.create(t):``).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.base.context_stack import ContextStack
from scheduler_core.base.errors import InvalidWorkloadError, ScheduleError
from scheduler_core.base.target import Target
from scheduler_core.dag.task import Task as CoreTask
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.target import create as create_target
from scheduler_core.target import current as current_target

from .config import ConfigEntity, ConfigSpace, FallbackConfigEntity

logger = logging.getLogger("autotvm")

TEMPLATES: dict = {}          # template name -> TemplateFunction
_CONFIGS: ContextStack[ConfigSpace] = ContextStack("autotvm_config")  # ApplyConfig scopes
_DISPATCH: ContextStack[DispatchContext] = ContextStack("autotvm_dispatch")  # DispatchContext scopes
_WARNED: set = set()  # (target, template, args) already warned about, once per process (as TVM)


# ---------------------------------------------------------------------------
# the current config
# ---------------------------------------------------------------------------

def get_config() -> ConfigSpace:
    """The config of the template now running (TVM's ``autotvm.get_config``).

    A ConfigSpace while a task is created, a ConfigEntity while a config is measured or applied
    from history, else a FallbackConfigEntity.  Raises ScheduleError outside a template.
    """
    config = _CONFIGS.current()
    if config is None:
        raise ScheduleError("autotvm.get_config() was called outside a template: call it inside a function "
                            "decorated with @autotvm.template(name)")
    return config


class ApplyConfig:
    """``with ApplyConfig(cfg):`` makes ``get_config()`` return ``cfg`` inside the block."""

    def __init__(self, config: ConfigSpace):
        self.config = config

    def __enter__(self) -> ConfigSpace:
        _CONFIGS.push(self.config)
        return self.config

    def __exit__(self, *exc) -> None:
        _CONFIGS.pop(self.config)


def args_to_json(args: Any) -> list:
    """Template arguments as a JSON list (tuples become lists); the key of their records.

    Raises InvalidWorkloadError naming the argument that is not an int, float, str, bool, None
    or a list/tuple of those.
    """
    def conv(x, path):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int) or type(x).__name__.startswith("int"):
            return int(x)
        if isinstance(x, float) or type(x).__name__.startswith("float"):
            return float(x)
        if isinstance(x, (list, tuple)):
            return [conv(v, f"{path}[{k}]") for k, v in enumerate(x)]
        raise InvalidWorkloadError(f"template argument {path} is a {type(x).__name__}; template arguments must be "
                                   f"ints, floats, strings, bools, None or lists of those (they key the records)",
                                   path)
    return [conv(a, f"args[{k}]") for k, a in enumerate(args)]


def workload_key_of(name: str, args: Any) -> str:
    """The text key of (template name, args): ``json.dumps([name, *args])``."""
    return json.dumps([name, *args_to_json(args)], separators=(",", ":"))


# ---------------------------------------------------------------------------
# dispatch contexts
# ---------------------------------------------------------------------------

class DispatchContext:
    """Answers "which config for (target, workload)?" for direct template calls (TVM's DispatchContext).

    Contexts nest with ``with``; the innermost one answers, falling back to the enclosing one
    and finally to a FallbackConfigEntity.
    """

    def _query_inside(self, target: Target | None, name: str, args: list) -> ConfigEntity | None:
        return None

    def query(self, target: Target | None, name: str, args: list) -> ConfigSpace | None:
        return self._query_inside(target, name, args)

    def __enter__(self) -> DispatchContext:
        _DISPATCH.push(self)
        return self

    def __exit__(self, *exc) -> None:
        _DISPATCH.pop(self)


def dispatch_config(target: Target | None, name: str, args: list) -> ConfigSpace:
    """The config a direct call of template ``name`` gets (innermost context first)."""
    for ctx in _DISPATCH.innermost_first():
        cfg = ctx.query(target, name, args)
        if cfg is not None:
            return cfg
    key = (str(target), name, json.dumps(args))
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("Cannot find config for target=%s, workload=%s. A fallback configuration is used, "
                       "which may bring great performance regression.", target, [name, *args])
    return FallbackConfigEntity()


# ---------------------------------------------------------------------------
# templates and tasks
# ---------------------------------------------------------------------------

@dataclass
class TemplateFunction:
    """A registered template: its name and the undecorated function."""

    name: str
    func: Any

    def run(self, config: ConfigSpace, args: tuple, target: Target | None) -> tuple:
        """Run the template under ``config`` (and ``target`` entered); returns ``(Schedule, tensors)``.

        Raises InvalidWorkloadError when the template does not return ``(schedule, [tensors])``.
        """
        with ApplyConfig(config):
            if target is not None:
                with create_target(target):
                    out = self.func(*args)
            else:
                out = self.func(*args)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], Schedule)
                and isinstance(out[1], (list, tuple))):
            raise InvalidWorkloadError(f"template {self.name!r} must return (schedule, [tensors]) as "
                                       f"te.create_schedule makes it, got {type(out).__name__}")
        return out[0], list(out[1])


def template(task_name: str, func: Any = None):
    """Decorator registering a tunable template under ``task_name`` (TVM's ``@autotvm.template``).

    The decorated function, called directly, runs under the config the innermost dispatch
    context gives for (``task_name``, args, ``scheduler_core.target.current()``), e.g. the best
    of a log inside ``with autotvm.apply_history_best(log)``; else the fallback config.
    Registering a name again replaces the template (re-running a script).
    """
    if not isinstance(task_name, str) or not task_name:
        raise InvalidWorkloadError(f"a template name must be a non-empty string, got {task_name!r}")

    def decorate(f):
        tmpl = TemplateFunction(task_name, f)
        TEMPLATES[task_name] = tmpl

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            if kwargs:
                raise InvalidWorkloadError(f"template {task_name!r}: pass arguments by position (they key the "
                                           f"records), got keywords {sorted(kwargs)}")
            target = current_target()
            cfg = dispatch_config(target, task_name, args_to_json(args))
            with ApplyConfig(cfg):
                return f(*args)

        wrapper.template_name = task_name  # type: ignore[attr-defined]
        return wrapper

    return decorate(func) if func is not None else decorate


@dataclass
class Task:
    """A template with its arguments and target (TVM's ``autotvm.task.Task``).

    name, args (tuple), target (Target), config_space (ConfigSpace), flop (FLOPs of one run:
    ``cfg.add_flop`` if the template called it, else the DAG's FLOP count), dag (the
    ComputeDAG the template builds), core_task (the scheduler_core Task of that DAG: records,
    measurement and the cost model use it).
    """

    name: str
    args: tuple
    target: Target
    config_space: ConfigSpace
    flop: float
    template: TemplateFunction
    dag: Any = None
    core_task: Any = None
    _core_tasks: dict = field(default_factory=dict, repr=False)

    def instantiate(self, config: ConfigSpace) -> tuple:
        """``(Schedule, tensors)`` of the template under ``config`` (a ConfigEntity)."""
        return self.template.run(config, self.args, self.target)

    def core_task_of(self, dag: Any) -> CoreTask:
        """The scheduler_core Task of a DAG this template built (the task's own when it is the same)."""
        key = dag.workload_key
        if key == self.core_task.workload_key:
            return self.core_task
        if key not in self._core_tasks:
            self._core_tasks[key] = CoreTask.create(dag, self.target)
        return self._core_tasks[key]

    @property
    def workload(self) -> list:
        """TVM's workload tuple as a list: ``[name, *args]``."""
        return [self.name, *args_to_json(self.args)]

    def __repr__(self) -> str:
        return f"Task(func_name={self.name}, args={self.args}, target={self.target})"


def create(task_name: str, args: tuple = (), target: Any = "llvm", target_host: Any = None) -> Task:
    """A Task of a registered template (TVM's ``autotvm.task.create``): runs the template once
    under a ConfigSpace to collect its knobs.

    Raises InvalidWorkloadError for an unknown template name (naming the registered ones),
    arguments that cannot key records, a template that returns something else than
    ``(schedule, [tensors])``, a knob defined twice, or a computation with no floating-point
    operation and no ``cfg.add_flop``; InvalidTargetError for a bad target.
    """
    if task_name not in TEMPLATES:
        known = ", ".join(sorted(TEMPLATES)) or "none"
        raise InvalidWorkloadError(f"no template is registered under {task_name!r} (registered: {known}); "
                                   f"decorate a function with @autotvm.template({task_name!r})")
    args = tuple(args)
    args_to_json(args)
    parsed = Target.parse(target)
    tmpl = TEMPLATES[task_name]
    space = ConfigSpace()
    s, _tensors = tmpl.run(space, args, parsed)
    dag = s.state.dag
    flop = space.flop or dag.flop_count()
    if not flop:
        raise InvalidWorkloadError(f"template {task_name!r} computes no floating-point operation; "
                                   f"call cfg.add_flop(n) so that GFLOP/s can be reported")
    return Task(task_name, args, parsed, space, float(flop), tmpl, dag, CoreTask.create(dag, parsed))


__all__ = ["template", "get_config", "create", "Task", "TemplateFunction", "ApplyConfig", "DispatchContext",
           "dispatch_config", "args_to_json", "workload_key_of", "TEMPLATES"]
