// /dashboard: the task list (GET /tasks), newest first, a page at a time, filtered by the
// latest job's state and a workload substring.  The filters and the page live in the address
// (?state=&workload=&offset=), so a page can be linked; it refreshes itself while a job runs.
"use strict";

(() => {
  const { el, clear, getJson, fmtGflops, fmtSeconds, fmtTime, stateBadge, showError } = Dash;
  const LIMIT = 50;
  const REFRESH_MS = 5000;
  let timer = null;

  function query() {
    const p = new URLSearchParams(window.location.search);
    return {
      state: p.get("state") || "",
      workload: p.get("workload") || "",
      offset: Math.max(0, parseInt(p.get("offset") || "0", 10) || 0),
    };
  }

  function go(q) {
    const p = new URLSearchParams();
    if (q.state) p.set("state", q.state);
    if (q.workload) p.set("workload", q.workload);
    if (q.offset) p.set("offset", String(q.offset));
    const search = p.toString();
    window.history.pushState(null, "", window.location.pathname + (search ? "?" + search : ""));
    load();
  }

  function row(t) {
    const link = el("a", { href: "/dashboard/tasks/" + encodeURIComponent(t.task_id), class: "task-link" },
                    t.name || t.workload_key);
    const key = el("div", { class: "key" }, t.workload_key);
    return el("tr", { dataset: { taskId: t.task_id } },
      el("td", {}, link, key),
      el("td", { class: "target" }, t.target),
      el("td", { class: "num" }, t.trials),
      el("td", { class: "num" }, fmtGflops(t.best_gflops)),
      el("td", { class: "num" }, fmtSeconds(t.best_cost_s)),
      el("td", {}, stateBadge(t.state)),
      el("td", {}, fmtTime(t.created)));
  }

  async function load() {
    if (timer) { clearTimeout(timer); timer = null; }
    const q = query();
    document.getElementById("filter-state").value = q.state;
    document.getElementById("filter-workload").value = q.workload;
    const p = new URLSearchParams({ limit: String(LIMIT), offset: String(q.offset) });
    if (q.state) p.set("state", q.state);
    if (q.workload) p.set("workload", q.workload);
    let page;
    try {
      page = await getJson("/tasks?" + p.toString());
      showError("error", null);
    } catch (err) {
      showError("error", err);
      return;
    }
    const body = clear(document.getElementById("task-rows"));
    for (const t of page.items) body.appendChild(row(t));
    document.getElementById("empty").hidden = page.total > 0;
    const first = page.items.length ? page.offset + 1 : 0;
    document.getElementById("page-info").textContent =
      first + "-" + (page.offset + page.items.length) + " of " + page.total;
    document.getElementById("prev").disabled = page.offset === 0;
    document.getElementById("next").disabled = page.offset + page.items.length >= page.total;
    document.getElementById("tasks").dataset.loaded = String(page.items.length);
    if (page.items.some((t) => t.state === "queued" || t.state === "running")) {
      timer = setTimeout(load, REFRESH_MS);
    }
  }

  document.getElementById("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go({ state: document.getElementById("filter-state").value,
         workload: document.getElementById("filter-workload").value.trim(), offset: 0 });
  });
  document.getElementById("prev").addEventListener("click", () => {
    const q = query();
    go({ ...q, offset: Math.max(0, q.offset - LIMIT) });
  });
  document.getElementById("next").addEventListener("click", () => {
    const q = query();
    go({ ...q, offset: q.offset + LIMIT });
  });
  window.addEventListener("popstate", load);
  load();
})();
