// /dashboard/tasks/{id}: one task.  GET /tasks/{id} (facts), /tasks/{id}/curve (the chart: every
// measurement a point, the best latency and GFLOP/s so far), /tasks/{id}/best (the schedule as
// Python, the lowered program), artifact and record links, POST /tasks/{id}/resume, and the
// latest job polled (GET /jobs/{id}) every POLL_MS while it is queued or running.
"use strict";

(() => {
  const { el, clear, setText, getJson, getText, postJson, deleteJson, downloadLink, fmtGflops, fmtSeconds, fmtTime,
          stateBadge, showError } = Dash;
  const POLL_MS = 1500;
  const ACTIVE = new Set(["queued", "running"]);
  const CPU_FORMATS = [["so", "shared library (.so)"], ["h", "C header (.h)"], ["o", "object (.o)"],
                       ["ll", "LLVM IR (.ll)"], ["asm", "assembly (.s)"]];
  const CUDA_FORMATS = [["cu", "CUDA C (.cu)"], ["ptx", "PTX (.ptx)"], ["cubin", "cubin"],
                        ["json", "launch description (.json)"]];
  const SUFFIX = { asm: "s" };
  const RECORDS_PAGE = 1000;
  const LOG_TAIL = 40;
  const TRIAL_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

  const match = window.location.pathname.match(/\/dashboard\/tasks\/([^/]+)\/?$/);
  const taskId = match ? decodeURIComponent(match[1]) : "";
  const base = "/tasks/" + encodeURIComponent(taskId);
  let task = null;
  let plot = null;
  let pollTimer = null;
  let lastTrialsDone = -1;

  // -- the curve --------------------------------------------------------------------------
  function unitFor(points) {
    const costs = points.map((p) => p.cost_s).filter((c) => c !== null).sort((a, b) => a - b);
    const mid = costs.length ? costs[Math.floor(costs.length / 2)] : 1e-3;
    if (mid < 1e-3) return { scale: 1e6, label: "us" };
    if (mid < 1) return { scale: 1e3, label: "ms" };
    return { scale: 1, label: "s" };
  }

  function curveData(points, unit) {
    const x = [], lat = [], bestLat = [], bestGf = [];
    let best = null, bestG = null;
    for (const p of points) {
      x.push(p.trial);
      const v = p.cost_s === null ? null : p.cost_s * unit.scale;
      lat.push(v);
      if (p.cost_s !== null && (best === null || p.cost_s < best)) {
        best = p.cost_s;
        bestG = p.gflops;
      }
      bestLat.push(best === null ? null : best * unit.scale);
      bestGf.push(bestG);
    }
    return [x, lat, bestLat, bestGf];
  }

  function drawCurve(curve) {
    const box = document.getElementById("curve");
    const points = curve.points;
    setText("points-count", points.length);
    setText("best-count", curve.best.length);
    const rows = clear(document.getElementById("error-rows"));
    const kinds = Object.entries(curve.errors).sort((a, b) => b[1] - a[1]);
    for (const [name, n] of kinds) rows.appendChild(el("tr", {}, el("td", { class: "mono" }, name), el("td", { class: "num" }, n)));
    document.getElementById("errors").hidden = kinds.length === 0;
    document.getElementById("no-errors").hidden = kinds.length > 0;
    if (plot) { plot.destroy(); plot = null; }
    clear(box);
    if (!points.length) {
      box.appendChild(el("p", { class: "muted" }, "Nothing measured yet."));
      box.dataset.points = "0";
      return;
    }
    const unit = unitFor(points);
    const stepped = uPlot.paths.stepped({ align: 1 });
    const opts = {
      width: Math.max(320, box.clientWidth || 800),
      height: 320,
      scales: { x: { time: false }, lat: { distr: 3, log: 10 }, gf: { auto: true } },
      series: [
        { label: "trial" },
        { label: "latency (" + unit.label + ")", scale: "lat", stroke: "#4a7bd0", width: 0,
          points: { show: true, size: 7, stroke: "#2f5fb3", fill: "#4a7bd0" },
          value: (u, v) => (v === null ? "-" : v.toPrecision(4)) },
        { label: "best latency (" + unit.label + ")", scale: "lat", stroke: "#d0473a", width: 2, paths: stepped,
          points: { show: false }, value: (u, v) => (v === null ? "-" : v.toPrecision(4)) },
        { label: "best GFLOP/s", scale: "gf", stroke: "#2f9e44", width: 2, paths: stepped,
          points: { show: false }, value: (u, v) => (v === null ? "-" : fmtGflops(v)) },
      ],
      axes: [
        { label: "trial", incrs: TRIAL_TICKS },
        { scale: "lat", label: "latency (" + unit.label + ")", size: 70 },
        { scale: "gf", side: 1, label: "GFLOP/s", grid: { show: false }, size: 60 },
      ],
    };
    plot = new uPlot(opts, curveData(points, unit), box);
    box.dataset.points = String(points.length);
  }

  async function refreshCurve() {
    try {
      drawCurve(await getJson(base + "/curve"));
    } catch (err) {
      showError("error", err);
    }
  }

  // -- best schedule, artifacts, records ---------------------------------------------------
  async function refreshBest() {
    try {
      const best = await getJson(base + "/best");
      setText("best-script", best.script);
      setText("lowered", best.lowered);
      setText("best-latency", fmtSeconds(best.cost_s));
      setText("best-gflops", fmtGflops(best.gflops));
    } catch (err) {
      if (err.status !== 409) { showError("error", err); return; }
      setText("best-script", "No successful measurement yet.");
      setText("lowered", "No successful measurement yet.");
    }
  }

  async function refreshArtifacts(nRecords) {
    const list = clear(document.getElementById("artifacts"));
    const cuda = task.target.trim().startsWith("cuda");
    const formats = cuda ? CUDA_FORMATS : CPU_FORMATS;
    const probe = cuda ? "json" : "h";
    let have = false;
    try {
      const headers = Dash.token() ? { Authorization: "Bearer " + Dash.token() } : {};
      have = (await fetch(base + "/artifact?format=" + probe, { headers })).ok;
    } catch (err) {
      have = false;
    }
    document.getElementById("artifacts-none").hidden = have;
    if (have) {
      for (const [fmt, label] of formats) {
        const name = taskId + "." + (SUFFIX[fmt] || fmt);
        list.appendChild(el("li", {}, downloadLink(base + "/artifact?format=" + fmt, label, name)));
      }
    }
    const holder = clear(document.getElementById("records"));
    const pages = Math.max(1, Math.ceil(nRecords / RECORDS_PAGE));
    holder.appendChild(document.createTextNode("Records (JSON lines): "));
    for (let k = 0; k < pages; k++) {
      const lo = k * RECORDS_PAGE;
      const label = pages === 1 ? "all " + nRecords : (lo + 1) + "-" + Math.min(nRecords, lo + RECORDS_PAGE);
      const a = downloadLink(base + "/records?format=jsonl&offset=" + lo + "&limit=" + RECORDS_PAGE, label,
                             taskId + "-records-" + (lo + 1) + ".jsonl");
      if (k === 0) a.id = "records-link";
      holder.appendChild(a);
      holder.appendChild(document.createTextNode(" "));
    }
  }

  // -- the latest job ----------------------------------------------------------------------
  function showJob(job) {
    document.getElementById("job-none").hidden = true;
    document.getElementById("job-info").hidden = false;
    clear(document.getElementById("job-state")).appendChild(stateBadge(job.state));
    setText("job-trials", job.trials_done + " / " + job.trials_total);
    const phase = job.phase || "";
    document.getElementById("job-phase-wrap").hidden = !(phase && ACTIVE.has(job.state));
    setText("job-phase", phase);
    setText("job-best", job.best_cost_s === null || job.best_cost_s === undefined ? "-"
      : fmtSeconds(job.best_cost_s) + " (" + fmtGflops(job.best_gflops) + " GFLOP/s)");
    setText("job-error", job.error ? " " + job.error : "");
    const bar = document.getElementById("job-progress");
    bar.max = Math.max(1, job.trials_total);
    bar.value = job.trials_done;
    document.getElementById("cancel").hidden = !ACTIVE.has(job.state);
    document.getElementById("resume-button").disabled = ACTIVE.has(job.state);
    document.getElementById("job").dataset.state = job.state;
    document.getElementById("job").dataset.jobId = job.job_id;
  }

  // The job's log (GET /jobs/{id}/logs?tail=), when the server keeps one.
  async function refreshLog(jobId) {
    try {
      const text = await getText("/jobs/" + encodeURIComponent(jobId) + "/logs?tail=" + LOG_TAIL);
      setText("job-log", typeof text === "string" && text ? text : "(no log line yet)");
    } catch (err) {
      setText("job-log", "(no log: " + (err.detail || err.message) + ")");
    }
  }

  async function poll(jobId) {
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    let job;
    try {
      job = await getJson("/jobs/" + encodeURIComponent(jobId));
    } catch (err) {
      showError("error", err);
      return;
    }
    showJob(job);
    if (ACTIVE.has(job.state)) await refreshLog(jobId);
    if (job.trials_done !== lastTrialsDone) {
      lastTrialsDone = job.trials_done;
      await refreshCurve();
    }
    if (ACTIVE.has(job.state)) {
      pollTimer = setTimeout(() => poll(jobId), POLL_MS);
    } else {
      await refreshLog(jobId);  // the lines written as it ended
      await refreshAll(false);
    }
  }

  // -- the page ----------------------------------------------------------------------------
  async function refreshAll(startPolling) {
    try {
      task = await getJson(base);
    } catch (err) {
      showError("error", err);
      setText("task-name", err.status === 404 ? "Unknown task" : "Task");
      document.getElementById("resume").hidden = true;
      return;
    }
    document.title = "autosched: " + task.task_id;
    setText("task-id", task.task_id);
    setText("workload-key", task.workload_key);
    setText("target", task.target);
    setText("created", fmtTime(task.created));
    const page = await getJson("/tasks?limit=500&workload=" + encodeURIComponent(task.workload_key)).catch(() => null);
    const summary = page && page.items.find((t) => t.task_id === task.task_id);
    setText("task-name", summary && summary.name ? summary.name : "Task " + task.task_id);
    await refreshCurve();
    await refreshBest();
    await refreshArtifacts(summary ? summary.trials : Number(document.getElementById("points-count").textContent));
    if (startPolling && task.latest_job_id) await poll(task.latest_job_id);
    document.body.dataset.ready = "1";
  }

  document.getElementById("resume").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const trials = parseInt(document.getElementById("resume-trials").value, 10);
    setText("resume-error", "");
    try {
      const created = await postJson(base + "/resume", { num_measure_trials: trials });
      lastTrialsDone = -1;
      await poll(created.job_id);
    } catch (err) {
      setText("resume-error", (err.status ? "HTTP " + err.status + ": " : "") + (err.detail || err.message));
    }
  });

  document.getElementById("cancel").addEventListener("click", async () => {
    const jobId = document.getElementById("job").dataset.jobId;
    try {
      showJob(await deleteJson("/jobs/" + encodeURIComponent(jobId)));
    } catch (err) {
      showError("error", err);
    }
  });

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      const box = document.getElementById("curve");
      if (plot) plot.setSize({ width: Math.max(320, box.clientWidth || 800), height: 320 });
    }, 150);
  });

  if (!taskId) {
    showError("error", new Error("no task id in the address (/dashboard/tasks/<task id>)"));
  } else {
    refreshAll(true);
  }
})();
