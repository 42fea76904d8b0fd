"""``autosched``: the whole command line (worker-side commands from ``workers.cli`` plus
the server and its client).

    autosched tune examples/workloads/matmul_add.json --trials 64   # queue path, embedded Redis
    autosched serve --port 8000 --workers 2                          # API + RQ workers
    autosched submit examples/workloads/softmax.json --trials 64     # against a running server
    autosched status JOB_ID | best TASK_ID | artifact TASK_ID --format so | resume TASK_ID --trials 32
    autosched records export TASK_ID out.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from workers.cli import (
    app,
    records_app,  # noqa: E402  (``records import`` lives with the workers)
    start_worker_process,
)

from .client import ApiError, Client

_SERVER = typer.Option("http://127.0.0.1:8000", "--server", envvar="AUTOSCHED_SERVER", help="API base URL")
_TOKEN = typer.Option(None, "--token", envvar="AUTOSCHED_API_TOKEN", help="bearer token")


def _client(server: str, token: Optional[str]) -> Client:
    return Client(server, token=token)


def _print(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


@app.command()
def serve(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
          workers: int = typer.Option(1, min=0, help="RQ worker processes to start beside the API")) -> None:
    """Run the HTTP API and ``workers`` RQ workers on one Redis (embedded when no REDIS_URL)."""
    import os

    import uvicorn

    from workers.redis_conn import connection_url, get_connection

    from .main import create_app
    from .settings import Settings
    conn = get_connection(os.environ.get("REDIS_URL"))
    url = connection_url(conn)
    procs = [start_worker_process(conn, burst=False) for _ in range(workers)]
    try:
        uvicorn.run(create_app(Settings(redis_url=url)), host=host, port=port)
    finally:
        for p in procs:
            p.terminate()


@app.command()
def submit(workload: Path, target: str = typer.Option("llvm"), trials: int = typer.Option(64, min=1),
           wait: bool = typer.Option(True, help="follow the job until it ends"),
           server: str = _SERVER, token: Optional[str] = _TOKEN) -> None:
    """POST a ComputeDAG JSON file as a search task."""
    with _client(server, token) as c:
        created = c.create_task(workload.read_text(), target=target, num_measure_trials=trials)
        _print(created)
        if wait:
            _print(c.wait(created["job_id"]))


@app.command()
def status(job_id: str, server: str = _SERVER, token: Optional[str] = _TOKEN) -> None:
    """A job's state, trials done/total, best latency and error counts."""
    with _client(server, token) as c:
        _print(c.job(job_id))


@app.command()
def best(task_id: str, server: str = _SERVER, token: Optional[str] = _TOKEN) -> None:
    """The best schedule of a task: latency, steps, Python schedule code."""
    with _client(server, token) as c:
        b = c.best(task_id)
    typer.echo(b.get("python_schedule") or b.get("script") or "")
    _print({k: v for k, v in b.items() if k not in ("python_schedule", "script", "lowered")})


@app.command()
def artifact(task_id: str, format: str = typer.Option("so", "--format"), out: Optional[Path] = None,
             server: str = _SERVER, token: Optional[str] = _TOKEN) -> None:
    """Download the compiled best program (so | o | ll | asm)."""
    with _client(server, token) as c:
        data = c.artifact(task_id, format)
    path = out or Path(f"{task_id}.{format}")
    path.write_bytes(data)
    typer.echo(f"wrote {path} ({len(data)} bytes)")


@app.command()
def resume(task_id: str, trials: int = typer.Option(32, min=1), server: str = _SERVER,
           token: Optional[str] = _TOKEN) -> None:
    """Continue a task's search with more trials (measured states are never re-measured)."""
    with _client(server, token) as c:
        _print(c.resume(task_id, trials))


@records_app.command("export")
def records_export(task_id: str, out: Path, server: str = _SERVER, token: Optional[str] = _TOKEN) -> None:
    """Write a task's records as JSON lines (the same format as RecordToFile)."""
    parts, offset, page = [], 0, 1000
    with _client(server, token) as c:
        while True:
            text = c.records_jsonl(task_id, offset, page)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            parts.extend(lines)
            if len(lines) < page:
                break
            offset += page
    out.write_text("".join(ln + "\n" for ln in parts))
    typer.echo(f"wrote {out}")


def main() -> None:
    try:
        app()
    except ApiError as err:
        typer.echo(f"error {err.status}: {err.detail}", err=True)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
