// Shared by the dashboard pages: the bearer token, JSON calls to the API, DOM building and
// number formatting.  Every text taken from the API goes into the page as textContent (el()),
// never as HTML.
"use strict";

const Dash = (() => {
  const TOKEN_KEY = "autosched.token";

  // A token given as ?token=... is kept in localStorage and removed from the address bar.
  function takeTokenFromUrl() {
    const url = new URL(window.location.href);
    const token = url.searchParams.get("token");
    if (token !== null) {
      if (token) localStorage.setItem(TOKEN_KEY, token); else localStorage.removeItem(TOKEN_KEY);
      url.searchParams.delete("token");
      window.history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
  }

  function token() {
    return localStorage.getItem(TOKEN_KEY) || "";
  }

  function authHeaders() {
    const t = token();
    return t ? { Authorization: "Bearer " + t } : {};
  }

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
      this.detail = detail;
    }
  }

  // The text of an error body (ErrorBody's detail, or the list of a 422's problems).
  function detailOf(body, status) {
    if (!body || body.detail === undefined) return "HTTP " + status;
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) {
      return body.detail.map((d) => (d.loc ? d.loc.join(".") + ": " : "") + d.msg).join("; ");
    }
    return JSON.stringify(body.detail);
  }

  // fetch() a path of this server with the token; on a 401 ask for the token once and retry.
  async function request(method, path, body, asked) {
    const init = { method, headers: authHeaders() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401 && !asked) {
      const t = window.prompt("This server needs its API token (Authorization: Bearer).", "");
      if (t) {
        localStorage.setItem(TOKEN_KEY, t);
        return request(method, path, body, true);
      }
    }
    let data = null;
    const type = resp.headers.get("content-type") || "";
    if (type.includes("application/json")) data = await resp.json();
    else if (type.startsWith("text/")) data = await resp.text();
    if (!resp.ok) throw new ApiError(resp.status, detailOf(data, resp.status));
    return data;
  }

  const getJson = (path) => request("GET", path);
  const getText = (path) => request("GET", path);  // a text/plain answer comes back as a string
  const postJson = (path, body) => request("POST", path, body);
  const deleteJson = (path) => request("DELETE", path);

  // A download link: a plain href without a token; with one, the file is fetched with the
  // Authorization header and saved from a blob (a link cannot carry a header).
  function downloadLink(href, label, filename) {
    const a = el("a", { href, class: "download" }, label);
    a.addEventListener("click", async (ev) => {
      if (!token()) return;
      ev.preventDefault();
      const resp = await fetch(href, { headers: authHeaders() });
      if (!resp.ok) { window.alert(label + ": HTTP " + resp.status); return; }
      const url = URL.createObjectURL(await resp.blob());
      const tmp = el("a", { href: url, download: filename });
      document.body.appendChild(tmp);
      tmp.click();
      tmp.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    });
    return a;
  }

  // el("td", {class: "num"}, "text", childNode, ...): an element whose texts are text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function setText(id, text) {
    const node = document.getElementById(id);
    if (node) node.textContent = text === null || text === undefined ? "" : String(text);
    return node;
  }

  // Seconds -> "12.3 us" / "4.56 ms" / "1.23 s"; "-" for none.
  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return "-";
    if (s < 1e-3) return (s * 1e6).toPrecision(3) + " us";
    if (s < 1) return (s * 1e3).toPrecision(3) + " ms";
    return s.toPrecision(3) + " s";
  }

  function fmtGflops(g) {
    if (g === null || g === undefined || !isFinite(g)) return "-";
    return g >= 100 ? g.toFixed(0) : g >= 1 ? g.toFixed(2) : g.toPrecision(3);
  }

  // An ISO 8601 time -> "2026-11-28 23:41:07 UTC" (always UTC, with the zone); "-" for none.
  function fmtTime(iso) {
    if (!iso) return "-";
    const d = new Date(iso);
    if (isNaN(d.getTime())) return String(iso);
    return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function stateBadge(state) {
    return el("span", { class: "state state-" + (state || "none") }, state || "no job");
  }

  function showError(id, err) {
    const node = document.getElementById(id);
    if (!node) return;
    node.textContent = err ? (err.status ? "HTTP " + err.status + ": " : "") + (err.detail || err.message) : "";
    node.hidden = !err;
  }

  takeTokenFromUrl();
  return {
    getJson, getText, postJson, deleteJson, downloadLink, el, clear, setText, fmtSeconds, fmtGflops, fmtTime,
    stateBadge, showError, token, ApiError,
  };
})();
