"""GET /jobs/{id}/events: a job's progress and log streamed as server-sent events to its end, and the
command line's follow on it.

The real app is served by uvicorn in a thread (tests/api/live_server.py) on a real embedded Redis,
and a real RQ worker process (burst mode) runs the real job while a client (api.client, httpx-sse)
reads the stream.  Expected: `progress` first, `log` lines exactly as GET /jobs/{id}/logs keeps
them, trials that never go back, `end` last with the finished job; an ended job's stream ends at
once; a stream closes when its client goes (the server logs it) and after events_max_s; an unknown
job is a 404 before any stream; `autosched logs --follow` prints the job's lines from the stream, and
the progress bar follows the stream (no poll) and polls when the stream fails.
"""

from __future__ import annotations

import io
import logging
import threading
import time

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from api.cli import app as cli_app
from api.cli.progress import follow
from api.client import STREAM_ERRORS, Client
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.api.live_server import live_server, run_burst_worker
from tests.workloads import matmul_add

TUNING = {"num_measure_trials": 4, "num_measures_per_round": 2, "population": 48, "num_iters": 1}


@pytest.fixture(scope="module")
def server(redis_url):
    with live_server(redis_url, events_poll_s=0.1, max_active_jobs_per_token=10) as url:
        yield url


@pytest.fixture(scope="module")
def streamed(server, conn):
    """One job created and run to its end by a real worker while a client streams its events."""
    with Client(server) as c:
        created = c.create_task(ComputeDAG(matmul_add(16, 16, 16)).to_json(), **TUNING)
        events: list[tuple[str, object]] = []
        reader = threading.Thread(target=lambda: events.extend(c.events(created["job_id"])), daemon=True)
        reader.start()
        time.sleep(0.3)                      # the stream is open before the worker starts
        run_burst_worker(conn)
        reader.join(timeout=60)
        assert not reader.is_alive(), "the stream did not end with the job"
        return {"job_id": created["job_id"], "events": events, "logs": c.job_logs(created["job_id"]).splitlines(),
                "job": c.job(created["job_id"])}


@pytest.mark.integration
def test_a_real_job_streams_progress_and_logs_in_order_then_end(streamed):
    events, job = streamed["events"], streamed["job"]
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "progress" and events[0][1]["state"] == "queued", events[:2]
    assert kinds[-1] == "end" and kinds.count("end") == 1, kinds
    assert events[-1][1] == job and job["state"] == "finished" and job["trials_done"] == 4
    assert [data for kind, data in events if kind == "log"] == streamed["logs"]   # every line, once, in order
    assert any(" ended finished" in line for line in streamed["logs"]), streamed["logs"]
    progress = [data for kind, data in events if kind == "progress"]
    done = [p["trials_done"] for p in progress]
    assert done == sorted(done) and done[-1] == 4, done
    states = [p["state"] for p in progress]
    assert states.index("running") < states.index("finished") and states[-1] == "finished", states
    assert all(a != b for a, b in zip(progress, progress[1:]))                   # only changes are sent


@pytest.mark.integration
def test_an_ended_jobs_stream_gives_its_tail_and_ends_at_once(server, streamed):
    with Client(server) as c:
        start = time.monotonic()
        events = list(c.events(streamed["job_id"], tail=2))
        assert time.monotonic() - start < 2
        assert [kind for kind, _ in events] == ["log", "log", "progress", "end"]
        assert [data for _, data in events[:2]] == streamed["logs"][-2:]
        assert [kind for kind, _ in c.events(streamed["job_id"], logs=False)] == ["progress", "end"]


@pytest.mark.integration
def test_the_wire_format_and_an_unknown_job(server, streamed):
    with httpx.stream("GET", f"{server}/jobs/{streamed['job_id']}/events", params={"logs": "false"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    assert text.startswith("event: progress\r\ndata: {") and "\r\n\r\nevent: end\r\ndata: {" in text, text[:300]
    r = httpx.get(f"{server}/jobs/nope/events")
    assert r.status_code == 404 and r.json() == {"error": "NotFoundError", "detail": "unknown job id 'nope'"}


@pytest.mark.integration
def test_a_stream_ends_when_its_client_goes(server, caplog):
    with Client(server) as c:
        job_id = c.create_task(ComputeDAG(matmul_add(17, 17, 17)).to_json(), **TUNING)["job_id"]  # stays queued
        caplog.set_level(logging.DEBUG, logger="api.routes.jobs")
        stream = c.events(job_id)
        assert next(stream)[0] == "progress"
        stream.close()                                            # the client goes
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(job_id in m and "client went" in m for m in caplog.messages):
            time.sleep(0.05)
        assert any(job_id in m and "event stream closed: the client went" in m for m in caplog.messages), \
            caplog.messages
        c.cancel(job_id)


@pytest.mark.integration
def test_a_stream_closes_after_events_max_s(redis_url):
    with live_server(redis_url, events_poll_s=0.1, events_max_s=0.5, max_active_jobs_per_token=10) as url, \
            Client(url) as c:
        job_id = c.create_task(ComputeDAG(matmul_add(18, 18, 18)).to_json(), **TUNING)["job_id"]
        start = time.monotonic()
        assert [kind for kind, _ in c.events(job_id)] == ["progress"]            # queued: no end
        assert time.monotonic() - start < 3
        c.cancel(job_id)


@pytest.mark.integration
def test_logs_follow_prints_the_lines_from_the_stream(server, streamed):
    res = CliRunner().invoke(cli_app, ["logs", streamed["job_id"], "--follow", "--tail", "3", "--server", server])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == streamed["logs"][-3:]



@pytest.mark.integration
def test_the_progress_bar_follows_the_stream_and_polls_when_it_fails(server, streamed):
    polls: list[dict] = []
    console = Console(file=io.StringIO(), width=160)
    with Client(server) as c:
        def poll() -> dict:
            polls.append(c.job(streamed["job_id"]))
            return polls[-1]
        job = follow(poll, console, 0.01, stream=lambda: c.job_updates(streamed["job_id"]),
                     stream_errors=STREAM_ERRORS)
        assert job == streamed["job"] and polls == []                      # the stream only
        job = follow(poll, console, 0.01, stream=lambda: c.job_updates("nope"), stream_errors=STREAM_ERRORS)
        assert job == streamed["job"] and len(polls) == 1                  # a 404 stream: polled instead
    assert "4/4" in console.file.getvalue()
