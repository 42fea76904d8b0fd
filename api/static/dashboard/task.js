// /dashboard/tasks/{id}: one task.  GET /tasks/{id} (facts), /tasks/{id}/curve (the chart: every
// measurement a point and the best so far, in latency or GFLOP/s; job boundaries, the baselines,
// the peak estimate; the FLOPs, the DAG's text and the job history), /tasks/{id}/best (the schedule as
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
  // One metric at a time on a linear axis (METRIC: "latency" or "gflops").  Latency: the axis
  // stops at the useful range (CLIP_QUANTILE of the measurements x CLIP_MARGIN, widened to show the
  // baselines and the best); a slower measurement is drawn at the top edge in orange, its true
  // value in the legend.  Vertical lines: where each job's measurements begin.  Horizontal lines:
  // the numpy / torch baselines of the latest job that timed them and, in GFLOP/s, the estimated peak.
  const CLIP_QUANTILE = 0.9;
  const CLIP_MARGIN = 1.25;
  const PEAK_SPAN = 3;  // the peak line joins the axis when it is at most this many times the highest value
  const COLORS = { point: "#4a7bd0", outlier: "#e8590c", best: "#d0473a", numpy: "#2f9e44", torch: "#ae3ec9",
                   peak: "#495057", job: "#868e96" };
  let metric = "latency";
  let lastCurve = null;

  function unitFor(points) {
    const costs = points.map((p) => p.cost_s).filter((c) => c !== null).sort((a, b) => a - b);
    const mid = costs.length ? costs[Math.floor(costs.length / 2)] : 1e-3;
    if (mid < 1e-3) return { scale: 1e6, label: "us" };
    if (mid < 1) return { scale: 1e3, label: "ms" };
    return { scale: 1, label: "s" };
  }

  function quantile(sorted, q) {
    return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * (sorted.length - 1) + 0.5))] : null;
  }

  // The latest job with baselines, and the latest with a peak estimate.
  function lineSources(jobs) {
    const withBase = jobs.filter((j) => j.baselines.length);
    const withPeak = jobs.filter((j) => j.peak_gflops !== null && j.peak_gflops !== undefined);
    return { baseJob: withBase.length ? withBase[withBase.length - 1] : null,
             peakJob: withPeak.length ? withPeak[withPeak.length - 1] : null };
  }

  // {x, series: [{label, values (drawn), real (shown), style}], hi, outliers}
  function curveModel(curve, unit) {
    const points = curve.points;
    const x = points.map((p) => p.trial);
    const { baseJob, peakJob } = lineSources(curve.jobs);
    const lat = metric === "latency";
    const val = (p) => (lat ? (p.cost_s === null ? null : p.cost_s * unit.scale) : p.gflops);
    const real = points.map(val);
    const best = [];
    let b = null;
    for (const p of points) {
      if (p.cost_s !== null && (b === null || p.cost_s < b.cost_s)) b = p;
      best.push(b === null ? null : val(b));
    }
    const lines = [];
    for (const bl of baseJob ? baseJob.baselines : []) {
      const v = lat ? bl.seconds * unit.scale : bl.gflops;
      if (v !== null && v !== undefined) lines.push({ kind: "baseline", library: bl.library, value: v, raw: bl,
        label: bl.library + " baseline: " + bl.formula, color: COLORS[bl.library] || COLORS.numpy });
    }
    if (!lat && peakJob) lines.push({ kind: "peak", value: peakJob.peak_gflops, raw: peakJob,
      label: "peak (estimate) " + fmtGflops(peakJob.peak_gflops) + " GFLOP/s", color: COLORS.peak });
    const ok = real.filter((v) => v !== null).sort((a, c) => a - c);
    let hi = ok.length ? ok[ok.length - 1] : 1;
    if (lat && ok.length) {
      const useful = Math.max(quantile(ok, CLIP_QUANTILE) * CLIP_MARGIN, ...lines.map((l) => l.value * 1.1),
                              (best[best.length - 1] || 0) * 1.5);
      hi = Math.min(hi, useful);
    }
    // A peak far above every measurement would flatten the curve: it stays off the axis, said at its top.
    const dataHi = Math.max(hi, ...lines.filter((l) => l.kind !== "peak").map((l) => l.value));
    for (const l of lines) if (l.kind === "peak" && l.value > PEAK_SPAN * dataHi) l.above = true;
    hi = Math.max(hi, ...lines.filter((l) => !l.above).map((l) => l.value)) * 1.05 || 1;
    const inside = real.map((v) => (v !== null && v <= hi ? v : null));
    const edge = real.map((v) => (v !== null && v > hi ? hi : null));
    const outliers = edge.filter((v) => v !== null).length;
    return { x, real, inside, edge, outliers, best: best.map((v) => (v === null ? null : Math.min(v, hi))),
             bestReal: best, lines, hi };
  }

  function fmtVal(v, unit) {
    if (v === null || v === undefined) return "-";
    return metric === "latency" ? v.toPrecision(4) + " " + unit.label : fmtGflops(v) + " GFLOP/s";
  }

  // Job boundaries and line labels, drawn on the chart's canvas after uPlot draws the series.
  function drawMarks(u, model, jobs) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const dpr = window.devicePixelRatio || 1;
    ctx.save();
    ctx.font = (11 * dpr) + "px system-ui, sans-serif";
    ctx.setLineDash([4 * dpr, 4 * dpr]);
    ctx.lineWidth = dpr;
    jobs.forEach((j, k) => {
      if (j.first_trial === null || j.first_trial === undefined) return;
      const px = u.valToPos(j.first_trial - 0.5, "x", true);
      if (px < left - 1 || px > left + width + 1) return;
      ctx.strokeStyle = COLORS.job;
      ctx.beginPath();
      ctx.moveTo(px, top);
      ctx.lineTo(px, top + height);
      ctx.stroke();
      ctx.fillStyle = COLORS.job;
      ctx.fillText((k === 0 ? "job 1" : "job " + (k + 1) + " (resumed)") + (j.model_id ? " model" : ""),
                   px + 3 * dpr, top + 12 * dpr);
    });
    for (const line of model.lines) {
      const py = line.above ? top + 12 * dpr : u.valToPos(line.value, "y", true);
      ctx.fillStyle = line.color;
      ctx.textAlign = "right";
      ctx.fillText(line.label + (line.above ? " \u2191 above this axis" : ""), left + width - 4 * dpr,
                   line.above ? py : py - 4 * dpr);
    }
    ctx.restore();
  }

  function showMarks(curve, model) {
    const list = clear(document.getElementById("curve-marks"));
    for (const line of model.lines) {
      const detail = line.kind === "peak" ? (line.above ? " (above the axis)" : "") + " \u2014 " + line.raw.peak_how
        : " \u2014 " + fmtSeconds(line.raw.seconds) + " (" + fmtGflops(line.raw.gflops) + " GFLOP/s) at "
          + line.raw.threads + " thread" + (line.raw.threads === 1 ? "" : "s") + ", timed by the worker at the end of job "
          + lineSources(curve.jobs).baseJob.job_id.slice(0, 8);
      list.appendChild(el("li", { dataset: { kind: line.kind, library: line.library || "", value: String(line.value) } },
        el("span", { class: "swatch", style: null }, ""), line.label, detail));
      list.lastChild.firstChild.style.borderColor = line.color;
    }
    curve.jobs.forEach((j, k) => {
      if (j.first_trial === null || j.first_trial === undefined) return;
      list.appendChild(el("li", { dataset: { kind: "job", trial: String(j.first_trial) } },
        el("span", { class: "swatch" }, ""), "job " + (k + 1) + " from trial " + j.first_trial +
        (j.model_id ? " (model " + j.model_id.slice(0, 8) + ")" : "")));
      list.lastChild.firstChild.style.borderColor = COLORS.job;
    });
  }

  function showNotes(curve, model, unit) {
    const clip = document.getElementById("clip-note");
    clip.hidden = !model.outliers;
    clip.textContent = model.outliers ? model.outliers + " slower measurement" + (model.outliers === 1 ? " is" : "s are")
      + " drawn at the top edge (orange; axis clipped at " + model.hi.toPrecision(3) + " " + unit.label
      + " to keep the useful range; the legend shows the true value)." : "";
    const { baseJob, peakJob } = lineSources(curve.jobs);
    const note = document.getElementById("baseline-note");
    const ended = curve.jobs.filter((j) => !j.model_id && !ACTIVE.has(j.state));
    let text = "";
    if (!baseJob) {
      if (task && task.target.trim().startsWith("cuda")) text = "No baseline: no CPU baseline for a cuda target.";
      else if (ended.length) text = "No baseline line: no numpy formulation of this DAG (a gather, a scan or a "
        + "symbolic shape), so nothing a user would otherwise call was timed.";
      else text = "The numpy baseline is timed by the worker when the job ends.";
    }
    note.hidden = !text;
    note.textContent = text;
    const peak = document.getElementById("peak-note");
    const showPeak = metric === "gflops";
    peak.hidden = !showPeak;
    peak.textContent = !showPeak ? "" : peakJob ? "The peak line is an estimate, not a measurement: "
      + peakJob.peak_how + "." : "No peak estimate (no CPU frequency readable on the worker, or a cuda target).";
  }

  function drawCurve(curve) {
    lastCurve = curve;
    const box = document.getElementById("curve");
    const points = curve.points;
    setText("points-count", points.length);
    setText("best-count", curve.best.length);
    setText("flops", curve.flop_ct ? curve.flop_ct.toExponential(3) + " FLOP per run (" +
            Math.round(curve.flop_ct).toLocaleString("en-US") + ")" : "not countable");
    setText("dag-text", curve.dag_text || "-");
    showJobs(curve);
    const rows = clear(document.getElementById("error-rows"));
    const kinds = Object.entries(curve.errors).sort((a, b) => b[1] - a[1]);
    for (const [name, n] of kinds) rows.appendChild(el("tr", {}, el("td", { class: "mono" }, name), el("td", { class: "num" }, n)));
    document.getElementById("errors").hidden = kinds.length === 0;
    document.getElementById("no-errors").hidden = kinds.length > 0;
    if (plot) { plot.destroy(); plot = null; }
    clear(box);
    const unit = unitFor(points);
    const model = curveModel(curve, unit);
    showMarks(curve, model);
    showNotes(curve, model, unit);
    const { baseJob, peakJob } = lineSources(curve.jobs);
    box.dataset.metric = metric;
    box.dataset.baselineNumpy = "";
    box.dataset.baselineTorch = "";
    if (baseJob) for (const bl of baseJob.baselines) box.dataset["baseline" + bl.library[0].toUpperCase() + bl.library.slice(1)] = String(bl.seconds);
    box.dataset.peak = metric === "gflops" && peakJob ? String(peakJob.peak_gflops) : "";
    box.dataset.clip = String(model.hi);
    box.dataset.outliers = String(model.outliers);
    box.dataset.jobMarks = curve.jobs.map((j) => j.first_trial).filter((t) => t !== null && t !== undefined).join(",");
    if (!points.length) {
      box.appendChild(el("p", { class: "muted" }, "Nothing measured yet."));
      box.dataset.points = "0";
      return;
    }
    const yLabel = metric === "latency" ? "latency (" + unit.label + ")" : "GFLOP/s";
    const stepped = uPlot.paths.stepped({ align: 1 });
    const shown = (arr) => (u, v, si, i) => (i === null || i === undefined ? "-" : fmtVal(arr[i], unit));
    const series = [
      { label: "trial" },
      { label: metric === "latency" ? "latency" : "GFLOP/s", stroke: COLORS.point, width: 0,
        points: { show: true, size: 7, stroke: "#2f5fb3", fill: COLORS.point }, value: shown(model.real) },
      { label: "slower than the axis (at the edge)", stroke: COLORS.outlier, width: 0,
        points: { show: true, size: 9, stroke: COLORS.outlier, fill: "#fff" }, value: shown(model.real) },
      { label: metric === "latency" ? "best so far" : "best GFLOP/s so far", stroke: COLORS.best, width: 2,
        paths: stepped, points: { show: false }, value: shown(model.bestReal) },
    ];
    const data = [model.x, model.inside, model.edge, model.best];
    for (const line of model.lines) {
      series.push({ label: line.label, stroke: line.color, width: 1.5, dash: [8, 5], points: { show: false },
                    value: () => fmtVal(line.value, unit) });
      data.push(model.x.map(() => line.value));
    }
    const opts = {
      width: Math.max(320, box.clientWidth || 800),
      height: 340,
      scales: { x: { time: false }, y: { auto: false, range: [0, model.hi] } },
      series,
      axes: [{ label: "trial", incrs: TRIAL_TICKS }, { label: yLabel, size: 70 }],
      hooks: { draw: [(u) => drawMarks(u, model, curve.jobs)] },
    };
    plot = new uPlot(opts, data, box);
    box.dataset.points = String(points.length);
  }

  for (const btn of document.querySelectorAll("#metric button")) {
    btn.addEventListener("click", () => {
      metric = btn.dataset.metric;
      for (const b of document.querySelectorAll("#metric button")) b.setAttribute("aria-pressed", String(b === btn));
      if (lastCurve) drawCurve(lastCurve);
    });
  }

  // -- the job history ---------------------------------------------------------------------
  function showJobs(curve) {
    const body = clear(document.getElementById("job-rows"));
    curve.jobs.forEach((j, k) => {
      const base = j.baselines.length ? j.baselines.map((b) => b.library + " " + b.formula + " " + fmtSeconds(b.seconds)
        + " (" + b.threads + " thr)").join("; ") : (j.model_id ? "- (model job)" : ACTIVE.has(j.state) ? "after the job"
        : "none (no numpy formulation)");
      body.appendChild(el("tr", { dataset: { jobId: j.job_id } },
        el("td", { class: "num" }, k + 1),
        el("td", { class: "mono" }, j.job_id.slice(0, 12), j.model_id ? " (model " + j.model_id.slice(0, 8) + ")" : ""),
        el("td", {}, stateBadge(j.state)),
        el("td", { class: "num" }, j.trials_done + " / " + j.trials_total),
        el("td", { class: "num" }, j.first_trial === null || j.first_trial === undefined ? "-" : j.first_trial),
        el("td", {}, fmtTime(j.started)),
        el("td", {}, fmtTime(j.ended)),
        el("td", { class: "num" }, fmtSeconds(j.best_cost_s)),
        el("td", { class: "mono" }, base)));
    });
    document.getElementById("jobs").dataset.loaded = String(curve.jobs.length);
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
      if (plot) plot.setSize({ width: Math.max(320, box.clientWidth || 800), height: 340 });
    }, 150);
  });

  if (!taskId) {
    showError("error", new Error("no task id in the address (/dashboard/tasks/<task id>)"));
  } else {
    refreshAll(true);
  }
})();
