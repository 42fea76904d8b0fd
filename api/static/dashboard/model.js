// /dashboard/models/{id}: one model (GET /models/{id}): the latest job's progress and TVM's task
// scheduler table (ID, task, latency (ms), speed (GFLOP/s), trials, weight; the estimated total
// latency, trials and used time under it), refreshed every REFRESH_MS while the job runs, so it
// follows the rounds; the artifact links once the job has ended.
"use strict";

(() => {
  const { el, clear, getJson, setText, fmtTime, stateBadge, showError, downloadLink } = Dash;
  const REFRESH_MS = 1500;
  const modelId = decodeURIComponent(window.location.pathname.split("/").filter(Boolean).pop() || "");

  const ms = (s) => (s === null || s === undefined ? "-" : (s * 1e3).toFixed(3));
  const speed = (g) => (g === null || g === undefined ? "-" : g.toFixed(2));

  function row(t, i, total) {
    const weighted = t.best_cost_s === null || t.best_cost_s === undefined ? null : t.weight * t.best_cost_s;
    const share = weighted !== null && total ? (100 * weighted / total).toFixed(1) + " %" : "-";
    const link = el("a", { href: "/dashboard/tasks/" + encodeURIComponent(t.task_id), class: "task-link" },
                    t.functions.join(", "));
    return el("tr", { dataset: { taskId: t.task_id } },
      el("td", { class: "num" }, i),
      el("td", {}, link, el("div", { class: "key" }, "task " + t.task_id)),
      el("td", { class: "num latency" }, ms(t.best_cost_s)),
      el("td", { class: "num speed" }, speed(t.best_gflops)),
      el("td", { class: "num trials" }, t.job_trials + " / " + t.trials),
      el("td", { class: "num weight" }, t.weight),
      el("td", { class: "num" }, share));
  }

  function usedTime(job) {
    if (!job || !job.started) return "-";
    const end = job.ended ? new Date(job.ended) : new Date();
    return ((end - new Date(job.started)) / 1000).toFixed(0) + " s";
  }

  async function load() {
    let m;
    let job = null;
    try {
      m = await getJson("/models/" + encodeURIComponent(modelId));
      if (m.latest_job_id) job = await getJson("/jobs/" + encodeURIComponent(m.latest_job_id)).catch(() => null);
      showError("error", null);
    } catch (err) {
      showError("error", err);
      return;
    }
    document.title = "autosched: model " + m.model_id;
    setText("model-title", "Model " + m.model_id);
    setText("model-id", m.model_id);
    setText("target", m.target);
    setText("created", fmtTime(m.created));
    setText("total-latency", ms(m.total_latency_s));
    setText("total-trials", m.trials_done);
    setText("used-time", usedTime(job));
    setText("refreshed", fmtTime(new Date().toISOString()));
    clear(document.getElementById("job-state")).appendChild(stateBadge(m.state));
    setText("job-trials", m.trials_done + " / " + m.trials_total);
    const jobLink = clear(document.getElementById("job-link"));
    if (m.latest_job_id) jobLink.appendChild(el("span", { class: "mono muted" }, " job " + m.latest_job_id));
    const bar = document.getElementById("job-progress");
    bar.max = Math.max(1, m.trials_total);
    bar.value = m.trials_done;
    const body = clear(document.getElementById("task-rows"));
    m.tasks.forEach((t, i) => body.appendChild(row(t, i, m.total_latency_s)));
    const table = document.getElementById("tasks");
    table.dataset.loaded = String(m.tasks.length);
    table.dataset.totalLatency = m.total_latency_s === null || m.total_latency_s === undefined ? "" : String(m.total_latency_s);
    const artifact = clear(document.getElementById("artifact"));
    if (m.state === "finished" || m.state === "failed" || m.state === "cancelled") {
      const base = "/models/" + encodeURIComponent(m.model_id) + "/artifact";
      artifact.append("Artifact: ", downloadLink(base, "model.tar.gz", "model_" + m.model_id + ".tar.gz"),
                      " ", downloadLink(base + "?format=h", "model.h", "model.h"));
    }
    if (m.state === "queued" || m.state === "running") setTimeout(load, REFRESH_MS);
  }

  load();
})();
