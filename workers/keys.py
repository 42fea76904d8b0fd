"""Every Redis key of the service, one function per key (RQ's habit: keys built in one place).

All keys start with :data:`PREFIX`.  Targets are whitespace-normalized so that
``"llvm  -mcpu=x"`` and ``"llvm -mcpu=x"`` share records.

==========================================  ==========  =====================================
key                                         type        holds
==========================================  ==========  =====================================
``task(task_id)``                           hash        task_id, workload_key, target, created,
                                                        tuning (JSON), latest_job_id
``dag(workload_key)``                       string      the ComputeDAG JSON
``records(workload_key, target)``           list        record JSON lines (RPUSH, atomic append)
``record_states(workload_key, target)``     set         the identity of every recorded state (a
                                                        digest of its compact step JSON): a state
                                                        is recorded once per workload+target
``best(workload_key, target)``              hash        cost_s, record (the fastest NO_ERROR line)
``job(job_id)``                             hash        state, trials_done/total, best_cost_s,
                                                        best_gflops, errors (JSON), timestamps
``task_jobs(task_id)``                      list        the ids of every job that measured the task
                                                        (its own and its models'), oldest first
``artifact(task_id, fmt)``                  string      bytes of the compiled best program
``model(workload_key, target)``             string      bytes of a cost-model snapshot
``task_for_workload(workload_key, target)`` string      the task_id of this workload+target
``token_jobs(token_id)``                    set         job ids created by one API token (a
                                                        digest of the bearer token, never the
                                                        token itself); ended ones are pruned
``rate_prefix()`` ``:post/<token_id>/...``  list        the moving window of one API token's POSTs
                                                        (their times): the ``limits`` library's key
                                                        (api.limits.rate_limiter)
``queued_jobs()``                           set         ids of jobs created queued; those no longer
                                                        queued are pruned when the set is counted
``model_meta(model_id)``                    hash        a whole model (POST /models): model_id, target,
                                                        created, tuning (JSON), tasks (JSON: task_id,
                                                        workload_key, functions, weight per task),
                                                        latest_job_id, trials_total
``model_graph(model_id)``                   string      the model's graph JSON (scheduler_core.graph)
``model_for_graph(digest, target)``         string      the model_id of this graph (sha256 of its
                                                        canonical JSON) on this target
``model_artifact(model_id)``                string      the whole-model .tar.gz (one .so, header,
                                                        graph.json), written when a model job ends
``model_params(model_id)``                  string      the model's weights as .npz bytes (one array per
                                                        graph param), the latest sent with its graph
``record_errors()``                        hash        error_no (as text) -> how many stored records have
                                                        it, over every workload and target (counted
                                                        when RedisStore.append_new_records stores a
                                                        record; workers.metrics reads it)
``job_log(job_id)``                         list        the job's log lines (RPUSH + LTRIM: the
                                                        last workers.job_logs.JOB_LOG_CAP lines)
``tasks_by_created()``                      zset        every task_id, scored by its ``created``
                                                        (GET /tasks, newest first; workers.task_index)
``tasks_by_created_backfilled()``           string      set once the tasks stored before that index
                                                        existed have been added to it
==========================================  ==========  =====================================

A model's tasks are ordinary tasks (``task(task_id)``): their records, best index and
artifacts are those of any task.  A model job's hash is a ``job(job_id)`` with ``task_id``
empty, ``model_id`` set and ``trials_done:<task_id>`` per task.

The task hash also holds ``trials_total``: the sum of its jobs' ``trials_total`` (HINCRBY in the
transaction that creates each job).
"""

from __future__ import annotations

PREFIX = "autosched:"


def normalize_target(target: str) -> str:
    """``target`` with runs of whitespace collapsed (the form used inside keys)."""
    return " ".join(str(target).split())


def _workload_target_key(kind: str, workload_key: str, target: str) -> str:
    """The key of kind ``kind`` for one workload on one (whitespace-normalized) target."""
    return f"{PREFIX}{kind}:{workload_key}:{normalize_target(target)}"


def task(task_id: str) -> str:
    return f"{PREFIX}task:{task_id}"


def dag(workload_key: str) -> str:
    return f"{PREFIX}dag:{workload_key}"


def records(workload_key: str, target: str) -> str:
    return _workload_target_key("records", workload_key, target)


def record_states(workload_key: str, target: str) -> str:
    return _workload_target_key("record_states", workload_key, target)


def best(workload_key: str, target: str) -> str:
    return _workload_target_key("best", workload_key, target)


def job(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def task_jobs(task_id: str) -> str:
    return f"{PREFIX}task_jobs:{task_id}"


def artifact(task_id: str, fmt: str) -> str:
    return f"{PREFIX}artifact:{task_id}:{fmt}"


def model(workload_key: str, target: str) -> str:
    return _workload_target_key("model", workload_key, target)


def task_for_workload(workload_key: str, target: str) -> str:
    return _workload_target_key("task_for_workload", workload_key, target)


def token_jobs(token_id: str) -> str:
    return f"{PREFIX}token_jobs:{token_id}"


def rate_prefix() -> str:
    """The prefix of the ``limits`` library's rate-limit keys (it adds ``:<item key>``)."""
    return f"{PREFIX}rate"


def queued_jobs() -> str:
    return f"{PREFIX}queued_jobs"


def model_meta(model_id: str) -> str:
    return f"{PREFIX}model_meta:{model_id}"


def model_graph(model_id: str) -> str:
    return f"{PREFIX}model_graph:{model_id}"


def model_for_graph(digest: str, target: str) -> str:
    return _workload_target_key("model_for_graph", digest, target)


def model_artifact(model_id: str) -> str:
    return f"{PREFIX}model_artifact:{model_id}"


def model_params(model_id: str) -> str:
    return f"{PREFIX}model_params:{model_id}"


def job_log(job_id: str) -> str:
    return f"{PREFIX}job_log:{job_id}"


def tasks_by_created() -> str:
    return f"{PREFIX}tasks_by_created"


def tasks_by_created_backfilled() -> str:
    return f"{PREFIX}tasks_by_created:backfilled"


def record_errors() -> str:
    return f"{PREFIX}record_errors"
