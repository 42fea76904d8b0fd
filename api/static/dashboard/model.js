// /dashboard/models/{id}: one model (GET /models/{id}): the latest job's progress and a row per
// task (TVM's task scheduler table: weight, trials, best latency, GFLOP/s, weighted latency and
// its share of the model's estimate), refreshed while the job runs; the artifact once written.
"use strict";

(() => {
  const { el, clear, getJson, setText, fmtGflops, fmtSeconds, fmtTime, stateBadge, showError, downloadLink } = Dash;
  const REFRESH_MS = 3000;
  const modelId = decodeURIComponent(window.location.pathname.split("/").filter(Boolean).pop() || "");

  function row(t, i, total) {
    const weighted = t.best_cost_s === null || t.best_cost_s === undefined ? null : t.weight * t.best_cost_s;
    const share = weighted !== null && total ? (100 * weighted / total).toFixed(1) + " %" : "-";
    const link = el("a", { href: "/dashboard/tasks/" + encodeURIComponent(t.task_id), class: "task-link" },
                    t.task_id);
    return el("tr", { dataset: { taskId: t.task_id } },
      el("td", { class: "num" }, i),
      el("td", {}, link, el("div", { class: "key" }, t.workload_key)),
      el("td", { class: "mono" }, t.functions.join(", ")),
      el("td", { class: "num" }, t.weight),
      el("td", { class: "num" }, t.job_trials + " / " + t.trials),
      el("td", { class: "num" }, fmtSeconds(t.best_cost_s)),
      el("td", { class: "num" }, fmtGflops(t.best_gflops)),
      el("td", { class: "num" }, fmtSeconds(weighted)),
      el("td", { class: "num" }, share));
  }

  async function load() {
    let m;
    try {
      m = await getJson("/models/" + encodeURIComponent(modelId));
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
    setText("total-latency", fmtSeconds(m.total_latency_s));
    clear(document.getElementById("job-state")).appendChild(stateBadge(m.state));
    setText("job-trials", m.trials_done + " / " + m.trials_total);
    const jobLink = clear(document.getElementById("job-link"));
    if (m.latest_job_id) jobLink.appendChild(el("span", { class: "mono muted" }, " job " + m.latest_job_id));
    const bar = document.getElementById("job-progress");
    bar.max = Math.max(1, m.trials_total);
    bar.value = m.trials_done;
    const body = clear(document.getElementById("task-rows"));
    m.tasks.forEach((t, i) => body.appendChild(row(t, i, m.total_latency_s)));
    document.getElementById("tasks").dataset.loaded = String(m.tasks.length);
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
