"""The status page served at `/` on the agent's admin port: read it, and act from it.

Owned here: one self-contained HTML document (its CSS and JavaScript carry
the response's CSP nonce; no framework, no build step, nothing fetched from
outside). The page reads `/status` and `/history` from the same origin,
then follows `/events` (server-sent events, `gitops.admin.events`) and
redraws on each update; where the stream is refused or gone it asks every
few seconds instead. It shows: overall sync status and conditions, watched
vs applied commit, the environment (with `--environment`: its branch, a
sync window holding a commit, the promotion's gates), the plan of the
branch's head that waits unapplied as a diff, with why (held by a sync
window, the agent suspended, quarantined by a rollback; from the stream,
or `/plan`), the
actions the reader may take (`gitops.admin.page_view`: drawn on the server,
only those the role table lets the reader call, a running rollout's promote
and abort on its row, "roll back to" on each history row of an applied
commit other than the current one (it posts `/rollback?commit=SHA`); each a button opening a confirm form with a reason,
whose confirm posts to the route the CLI's verb uses, with the page's CSRF
token in `X-CSRF-Token`), recent history with
filters by actor and by kind (each commit's newest row has the id
`commit-<sha>`, the anchor notifications link to), the actions with who
took them and the replicas proxies ejected as outliers (when, why, for how
long), backends with replicas by state and version, the commit they
run and the replicas ejected now, endpoints with traffic weights drawn as bars, for both the last
minute's request rate, 5xx share and p99 (and a backend's latest handler
exception, also under "Last error" while it answers 5xx), every proxy
worker (state, address, restarts, last error), each rollout's step bar
(steps passed, the one holding, the ones to come) with its checks, the
commits a rollback quarantined, the proxies' recent shadow mismatches (from
`/shadow/mismatches`, for a role that may read them), and every error in
full. With `--commit-url-template` commits link to the forge.

Not here: the JSON it reads (`gitops.status.rollup`, `gitops.loop.history`),
who may do what (`gitops.admin.page_view`, from `gitops.admin.auth.roles`) and
serving it (`gitops.admin.api`, with the Content-Security-Policy). Every
value from the JSON is inserted as text, never as HTML, so a commit message
or error text cannot inject markup.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

from gitops.admin.page_view import APPLIED_RESULTS, HISTORY_KINDS, PageAction, actions_html

__all__ = ["render_page", "PageView", "REFRESH_S"]

REFRESH_S = 3.0
_PLACEHOLDER = re.compile(r"__[A-Z_]+__")

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="gitops-csrf" content="__CSRF__">
<title>ray-gitops status</title>
<style nonce="__NONCE__">
  :root { --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --muted: #57606a; --line: #d0d7de; }
  body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 16px; color: #1f2328; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
  code, pre { font-family: ui-monospace, monospace; font-size: 12.5px; }
  pre { white-space: pre-wrap; word-break: break-word; background: #fff8f8; border: 1px solid #ffcecb; padding: 8px; margin: 4px 0; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { color: var(--muted); font-weight: 600; }
  .badge { display: inline-block; padding: 2px 10px; border-radius: 12px; color: #fff; font-weight: 600; }
  .Synced { background: var(--ok); } .Progressing { background: var(--warn); }
  .Degraded, .Failed { background: var(--bad); } .Suspended { background: var(--muted); }
  .Held { background: var(--warn); }
  .muted { color: var(--muted); }
  .bar { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
  .bar .track { flex: 0 0 260px; height: 12px; background: #eaeef2; border-radius: 3px; overflow: hidden; }
  .bar .fill { height: 100%; background: #0969da; }
  .bar .fill.shadow { background: #8250df; }
  .state { display: inline-block; margin-right: 8px; }
  tr.target { background: #fff8c5; }
  .steps { display: flex; gap: 3px; }
  .steps span { width: 34px; height: 12px; border-radius: 3px; background: #eaeef2; }
  .steps span.passed { background: var(--ok); } .steps span.holding { background: var(--warn); }
  .steps span.failed { background: var(--bad); }
  #stale { display: none; color: var(--bad); font-weight: 600; }
  #action-buttons { display: flex; gap: 8px; flex-wrap: wrap; margin: 4px 0; }
  form.confirm { border: 1px solid var(--warn); background: #fff8c5; padding: 8px; margin: 6px 0; }
  form.confirm p { margin: 0 0 6px; }
  form.confirm input { width: 320px; }
  #action-result { margin: 6px 0; font-weight: 600; }
  #action-result.refused { color: var(--bad); }
  pre.diff { background: #f6f8fa; border: 1px solid var(--line); }
  pre.diff span { display: block; }
  pre.diff .add { color: var(--ok); } pre.diff .del { color: var(--bad); } pre.diff .chg { color: var(--warn); }
  .filters { display: flex; gap: 12px; margin: 4px 0 8px; }
</style>
</head>
<body>
<h1>ray-gitops <span id="status" class="badge">…</span></h1>
<div class="muted"><span id="source"></span> · refreshed <span id="refreshed">never</span>
  <span id="live"></span> · <span id="who">__WHO__</span>
  <span id="stale">· agent unreachable, showing the last data</span></div>

<h2>Actions</h2>
<section id="actions">__ACTIONS__</section>

<h2>Pending plan</h2>
<div id="plan"><span class="muted">none: no commit waits</span></div>

<h2>Commits</h2>
<table><tbody>
  <tr><th>watched (last attempted)</th><td><code id="watched">–</code></td></tr>
  <tr><th>applied</th><td><code id="applied">–</code></td></tr>
</tbody></table>

<h2>Environment</h2>
<div id="environment"><span class="muted">none (the agent runs without --environment)</span></div>

<h2>Conditions</h2>
<table><thead><tr><th>type</th><th>status</th><th>reason</th><th>message</th></tr></thead>
<tbody id="conditions"></tbody></table>

<h2>Last error</h2>
<div id="errors"><span class="muted">none</span></div>

<h2>Backends</h2>
<table><thead><tr><th>backend</th><th>version</th><th>commit</th><th>ready / target</th><th>replicas by state</th>
<th>replicas by version</th><th>restarts</th><th>req/s</th><th>5xx</th><th>p99</th><th>latest exception</th>
<th>ejected now</th></tr></thead>
<tbody id="backends"></tbody></table>

<h2>Endpoints</h2>
<table><thead><tr><th>endpoint</th><th>route</th><th>traffic</th><th>req/s</th><th>5xx</th><th>p99</th></tr></thead>
<tbody id="endpoints"></tbody></table>

<h2>Proxies</h2>
<table><thead><tr><th>proxy</th><th>state</th><th>address</th><th>restarts</th><th>last error</th></tr></thead>
<tbody id="proxies"></tbody></table>

<h2>Rollouts</h2>
<table><thead><tr><th>endpoint</th><th>phase</th><th>steps</th><th>weights</th><th>checks</th><th></th></tr></thead>
<tbody id="rollouts"></tbody></table>

<h2>Quarantined commits</h2>
<div id="quarantine"><span class="muted">none</span></div>

<h2>Shadow mismatches</h2>
<table><thead><tr><th>when</th><th>endpoint</th><th>shadow backend</th><th>path</th><th>statuses</th><th>diff</th></tr></thead>
<tbody id="mismatches"></tbody></table>

<h2>History</h2>
<form class="filters" id="history-filter">
  <label>by <select id="filter-actor"><option value="">anyone</option></select></label>
  <label>kind <select id="filter-kind"><option value="">any</option>__KINDS__</select></label>
</form>
<table><thead><tr><th>commit</th><th>finished</th><th>result</th><th>duration</th><th>plan or error</th><th></th></tr></thead>
<tbody id="history"></tbody></table>
<h3>Actions taken</h3>
<table><thead><tr><th>when</th><th>action</th><th>by</th><th>from</th><th>reason</th><th>result</th></tr></thead>
<tbody id="actions-log"></tbody></table>
<h3>Replicas ejected</h3>
<table><thead><tr><th>when</th><th>backend</th><th>replica</th><th>ejection</th><th>reason</th><th>out for</th></tr></thead>
<tbody id="ejections-log"></tbody></table>

<script nonce="__NONCE__">
"use strict";
const REFRESH_MS = __REFRESH_MS__;
const COMMIT_URL = __COMMIT_URL_TEMPLATE__;
const READS_MISMATCHES = __READS_MISMATCHES__;
const ROLLOUT_SCOPE = __ROLLOUT_SCOPE__;  // an endpoint-scoped reader acts on its endpoint's rollout only
const APPLIED_RESULTS = __APPLIED_RESULTS__;  // a history row of these results may be rolled back to
const CSRF = document.querySelector('meta[name="gitops-csrf"]').content;
let scrolledToTarget = false;
let lastStatus = null;
let historyMark = null;
let polling = null;
const actors = new Set();

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.appendChild(cell); else td.textContent = cell == null ? "–" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}
function fill(id, rows, empty) {
  const body = document.getElementById(id);
  body.replaceChildren(...rows);
  if (!rows.length) body.appendChild(row([el("span", empty, "muted")]));
}
function short(sha) { return sha ? String(sha).slice(0, 12) : "–"; }
function commit(sha, text) {
  if (!sha || !COMMIT_URL) return el("span", text);
  const link = el("a", text);
  link.href = COMMIT_URL.split("{sha}").join(encodeURIComponent(sha));
  return link;
}
function counts(map) {
  const box = el("span");
  for (const [key, n] of Object.entries(map || {}).sort()) box.appendChild(el("span", key + ": " + n, "state"));
  return box;
}
function bars(weights, shadow) {
  const box = el("div");
  for (const [backend, weight] of Object.entries(weights || {}).sort()) {
    const bar = el("div", null, "bar");
    const track = el("div", null, "track");
    const part = el("div", null, shadow ? "fill shadow" : "fill");
    part.style.width = (Math.max(0, Math.min(1, Number(weight))) * 100).toFixed(1) + "%";
    track.appendChild(part);
    bar.append(track, el("span", (shadow ? "shadow " : "") + backend + " " + (Number(weight) * 100).toFixed(1) + "%"));
    box.appendChild(bar);
  }
  return box;
}

function serving(v) {
  // The last minute's request rate, 5xx share and p99, as the proxies counted them.
  if (!v || !v.requests) return ["0", "–", "–"];
  const rate = v.window_s > 0 ? v.requests / v.window_s : 0;
  const p99 = v.p99_s < 1 ? (v.p99_s * 1000).toFixed(0) + " ms" : v.p99_s + " s";
  return [rate.toFixed(1), (100 * v.errors / v.requests).toFixed(0) + "%", p99];
}

function ejectedNow(lines) {
  // The replicas a proxy holds out of routing as outliers now, one line each ("replica r-3 ejected: ...").
  if (!lines || !lines.length) return el("span", "none", "muted");
  const box = el("div");
  for (const line of lines) box.appendChild(el("div", line, "ejected"));
  return box;
}

function drawStatus(s) {
  const badge = document.getElementById("status");
  badge.textContent = s.status; badge.className = "badge " + s.status;
  document.getElementById("source").textContent = (s.repo || "") + " @ " + (s.branch || "") + " : " + (s.path || "");
  const watched = s.watched_revision || s.last_attempted_revision;
  document.getElementById("watched").replaceChildren(commit(watched, watched || "–"));
  document.getElementById("applied").replaceChildren(commit(s.last_applied_revision, s.last_applied_revision || "–"));
  fill("conditions", (s.conditions || []).map(c => row([c.type, c.status, c.reason, c.message])), "no conditions");
  const errors = [...(s.errors || [])];
  for (const [name, b] of Object.entries(s.backends || {})) if (b.last_error) errors.push(name + ": " + b.last_error);
  for (const [name, b] of Object.entries(s.backends || {})) {
    if (b.latest_exception && b.serving && b.serving.errors) errors.push(name + " (latest exception): " + b.latest_exception);
  }
  const box = document.getElementById("errors");
  box.replaceChildren(...errors.map(e => el("pre", e)));
  if (!errors.length) box.appendChild(el("span", "none", "muted"));
  fill("backends", Object.entries(s.backends || {}).sort().map(([name, b]) => row([
    name, short(b.version), b.commit ? commit(b.commit, b.commit.slice(0, 7)) : "–", (b.ready ?? "–") + " / " + (b.target_replicas ?? "–"),
    counts(b.replicas), counts(Object.fromEntries(Object.entries(b.versions || {}).map(([v, n]) => [short(v), n]))),
    counts(b.restarts), ...serving(b.serving), b.latest_exception || "–", ejectedNow(b.ejections),
  ])), "no backends");
  fill("endpoints", Object.entries(s.endpoints || {}).sort().map(([name, e]) => {
    const cell = bars(e.traffic, false);
    if (e.shadow && Object.keys(e.shadow).length) cell.appendChild(bars(e.shadow, true));
    return row([name, e.route, cell, ...serving(e.serving)]);
  }), "no endpoints");
  fill("proxies", Object.entries(s.proxies || {}).sort().map(([id, p]) => row([
    id, p.state, p.address || "–", p.restarts, p.last_error || "–",
  ])), "no proxies");
}

function stepBar(r) {
  // One box per step: passed, holding (or stopped there), to come.
  const box = el("div", null, "steps");
  r.steps.forEach((share, i) => {
    let cls = i < r.passed ? "passed" : "";
    if (i === r.passed && r.phase !== "promoted") cls = r.phase === "stepping" ? "holding" : "failed";
    const part = el("span", null, cls);
    part.title = "step " + (i + 1) + ": " + (share * 100).toFixed(0) + "% of the change";
    box.appendChild(part);
  });
  const cell = el("div");
  cell.append(box, el("span", r.message, "muted"));
  return cell;
}

function rolloutButtons(name, r) {
  // Promote or abort a running rollout: the reader's buttons (if its role has them) on this row.
  const box = el("span");
  if ((r.phase !== "stepping" && r.phase !== "paused") || (ROLLOUT_SCOPE !== null && ROLLOUT_SCOPE !== name)) return box;
  for (const key of ["promote", "abort"]) {
    const form = document.getElementById("confirm-" + key);
    if (!form) continue;
    const button = el("button", key === "promote" ? "Promote…" : "Abort…", "act-rollout");
    button.type = "button";
    button.id = "act-" + key + "-" + name;
    button.addEventListener("click", () => openConfirm(form, name, "endpoint " + name));
    box.append(button, " ");
  }
  return box;
}

function drawRollouts(s) {
  fill("rollouts", Object.entries(s.rollouts || {}).sort().map(([name, r]) => row([
    name, r.phase, stepBar(r), bars(r.weights, false), (r.checks || []).join("; ") || "–", rolloutButtons(name, r),
  ])), "no rollouts");
  const box = document.getElementById("quarantine");
  const q = s.quarantine;
  if (!q) { box.replaceChildren(el("span", "none", "muted")); return; }
  const line = el("div");
  line.append("held: ");
  (q.held || []).forEach((sha, i) => { if (i) line.append(", "); line.append(commit(sha, short(sha))); });
  line.append(" · rolled back to ", commit(q.good, short(q.good)), " · reason: " + q.reason + (q.detail ? " (" + q.detail + ")" : ""),
              " · lifted by a newer commit");
  box.replaceChildren(line);
}

function drawMismatches(m) {
  fill("mismatches", (m.mismatches || []).slice(0, 20).map(x => row([
    new Date(x.at * 1000).toLocaleString(), x.endpoint, x.backend, x.path,
    x.primary_status + " vs " + x.shadow_status, x.diff,
  ])), (m.unreachable || []).length ? "proxies unreachable: " + m.unreachable.map(u => u.proxy).join(", ")
                                     : "no mismatches");
}

async function refreshMismatches() {
  if (!READS_MISMATCHES) { fill("mismatches", [], "the shadow sample holds clients' data: an admin's to read"); return; }
  try {
    const r = await fetch("shadow/mismatches", {cache: "no-store"});
    if (r.ok) drawMismatches(await r.json());
  } catch (error) { /* the rest of the page does not depend on it */ }
}

function rollbackTo(e, offered) {
  // "Roll back to" on a commit's newest applied row, unless it is what runs (if the reader's role has it).
  const box = el("span");
  const form = document.getElementById("confirm-rollback-to");
  const current = lastStatus ? lastStatus.last_applied_revision : null;
  if (!form || !e.commit || e.commit === current || !APPLIED_RESULTS.includes(e.result) || offered.has(e.commit)) return box;
  offered.add(e.commit);
  const button = el("button", "Roll back to this…", "act-history");
  button.type = "button";
  button.id = "act-rollback-to-" + e.commit;
  button.dataset.commit = e.commit;
  button.addEventListener("click", () => openConfirm(form, e.commit, "commit " + short(e.commit)));
  box.appendChild(button);
  return box;
}

function drawHistory(h) {
  const entries = Array.isArray(h) ? h : (h.entries || h.history || []);
  drawActionsLog(Array.isArray(h) ? [] : (h.actions || []));
  drawEjectionsLog(Array.isArray(h) ? [] : (h.ejections || []));
  const anchored = new Set();
  const offered = new Set();
  fill("history", entries.slice(0, 20).map(e => {
    const cell = el("span");
    cell.append(commit(e.commit, short(e.commit)), e.summary ? " " + e.summary : "");
    const tr = row([
      cell,
      e.finished_at ? new Date(e.finished_at * 1000).toLocaleString() : "–",
      e.result, e.duration_s == null ? "–" : Number(e.duration_s).toFixed(2) + " s",
      e.errors && e.errors.length ? e.errors[0] : (e.plan_summary || ""), rollbackTo(e, offered),
    ]);
    if (!anchored.has(e.commit)) { tr.id = "commit-" + e.commit; anchored.add(e.commit); }  // the newest row
    return tr;
  }), "no commits attempted yet");
  showTarget();
}

function showTarget() {
  // Rows are drawn after the page loads, so the browser cannot scroll to #commit-<sha> itself.
  const target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
  if (!target) return;
  target.classList.add("target");
  if (!scrolledToTarget) { target.scrollIntoView(); scrolledToTarget = true; }
}

function drawEnvironment(s) {
  const box = document.getElementById("environment");
  const e = s.environment;
  if (!e) { box.replaceChildren(el("span", "none (the agent runs without --environment)", "muted")); return; }
  const lines = [el("div", e.name + " · branch " + e.branch)];
  if (e.held) {
    const held = el("div");
    held.append("held by a sync window: ", commit(e.held.commit, short(e.held.commit)),
                " · until " + (e.held.until || "–") + " · " + e.held.message);
    lines.push(held);
  }
  const p = e.promotion;
  if (p) {
    const line = el("div");
    line.append("promotion to " + p.to + " (" + p.branch + ", " + p.mode + "): " + p.phase + " ",
                commit(p.commit, short(p.commit)), " · soaked " + p.soaked_s + "s of " + p.soak_s + "s");
    lines.push(line);
    for (const g of p.gates || []) {
      lines.push(el("div", "  " + g.name + ": " + (g.passed === true ? "passed" : g.passed === false ? "failed" : "pending")
                           + " · " + g.detail, "muted"));
    }
    if (p.error) lines.push(el("pre", p.error));
  }
  box.replaceChildren(...lines);
}

function drawActionsLog(actions) {
  for (const a of actions) actors.add(a.actor);
  const select = document.getElementById("filter-actor");
  const have = new Set([...select.options].map(o => o.value));
  for (const name of [...actors].sort()) {
    if (!have.has(name)) { const o = el("option", name); o.value = name; select.appendChild(o); }
  }
  fill("actions-log", actions.slice(0, 20).map(a => row([
    new Date(a.at * 1000).toLocaleString(), a.verb + (a.detail ? " (" + a.detail + ")" : ""),
    a.actor + " (" + a.via + ")", a.peer || "–", a.reason || "–", a.result,
  ])), "no actions taken");
}

function drawEjectionsLog(ejections) {
  fill("ejections-log", ejections.slice(0, 20).map(x => row([
    new Date(x.at * 1000).toLocaleString(), x.backend, x.replica_id, x.count, x.reason,
    Math.max(0, Math.round(x.back_in_s)) + " s",
  ])), "no replica ejected");
}

function drawPlan(p) {
  const box = document.getElementById("plan");
  if (!p) { box.replaceChildren(el("span", "none: no commit waits", "muted")); return; }
  const head = el("div");
  head.append(commit(p.commit, short(p.commit)), " · " + p.why);
  const pre = el("pre", null, "diff");
  for (const [sign, line] of p.lines || []) {
    pre.appendChild(el("span", line, sign === "+" ? "add" : sign === "-" ? "del" : sign === "~" ? "chg" : ""));
  }
  box.replaceChildren(head, pre);
}

function showActions(s) {
  // Which of the buttons this reader was given fit the agent's state now.
  const suspended = s.status === "Suspended";
  const held = !!(s.environment && s.environment.held);
  for (const button of document.querySelectorAll("button.act")) {
    const when = button.dataset.when;
    button.hidden = !(when === "always" || (when === "running" && !suspended) || (when === "suspended" && suspended)
                      || (when === "held" && held));
  }
}

function historyQuery() {
  const q = new URLSearchParams();
  const actor = document.getElementById("filter-actor").value;
  const kind = document.getElementById("filter-kind").value;
  if (actor) q.set("actor", actor);
  if (kind) q.set("kind", kind);
  const text = q.toString();
  return "history" + (text ? "?" + text : "");
}

async function getJson(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

async function loadHistory() {
  drawHistory(await getJson(historyQuery()));
}

function drawAll(status) {
  lastStatus = status;
  drawStatus(status); drawEnvironment(status); drawRollouts(status); showActions(status);
}

function loaded() {
  document.getElementById("refreshed").textContent = new Date().toLocaleTimeString();
  document.getElementById("stale").style.display = "none";
  document.body.dataset.loaded = "true";
}

async function refresh() {
  try {
    const [status, history] = await Promise.all([getJson("status"), getJson(historyQuery())]);
    drawAll(status); drawHistory(history);
    try { drawPlan(await getJson("plan")); } catch (error) { /* an agent without /plan */ }
    await refreshMismatches();
    loaded();
  } catch (error) {
    document.getElementById("stale").style.display = "inline";
  }
}

function poll() {
  // Without a live stream (refused, or a server without one): ask every few seconds.
  if (polling !== null) return;
  document.getElementById("live").textContent = "· every " + (REFRESH_MS / 1000) + " s";
  const again = async () => { await refresh(); polling = setTimeout(again, REFRESH_MS); };
  polling = setTimeout(again, REFRESH_MS);
}

function follow() {
  if (!window.EventSource) { poll(); return; }
  const events = new EventSource("events");
  events.addEventListener("update", async (message) => {
    const data = JSON.parse(message.data);
    if (polling !== null) { clearTimeout(polling); polling = null; }
    document.getElementById("live").textContent = "· live";
    drawAll(data.status); drawPlan(data.plan);
    if (JSON.stringify(data.history) !== historyMark) {
      historyMark = JSON.stringify(data.history);
      try { await loadHistory(); await refreshMismatches(); } catch (error) { /* the next update tries again */ }
    }
    loaded();
  });
  events.addEventListener("error", () => {
    if (events.readyState === EventSource.CLOSED) poll();  // refused: the browser will not connect again
    else document.getElementById("live").textContent = "· reconnecting";
  });
}

function openConfirm(form, target, label) {
  // `target`: the endpoint of a rollout's form, the commit of a history row's; `label` says it in the question.
  for (const other of document.querySelectorAll("form.confirm")) other.hidden = true;
  form.dataset.target = target || "";
  const shown = form.querySelector("span.target");
  if (shown) shown.textContent = label || "";
  form.hidden = false;
  form.querySelector("input[name=reason]").focus();
}
for (const button of document.querySelectorAll("button.act")) {
  button.addEventListener("click", () => openConfirm(document.getElementById("confirm-" + button.dataset.key)));
}
for (const form of document.querySelectorAll("form.confirm")) {
  form.querySelector("button.cancel").addEventListener("click", () => { form.hidden = true; });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const go = form.querySelector("button.go");
    const result = document.getElementById("action-result");
    const reason = form.querySelector("input[name=reason]").value;
    const target = encodeURIComponent(form.dataset.target || "");
    const base = form.dataset.path.replace("{endpoint}", target).replace("{commit}", target);
    const path = base + (reason ? (base.includes("?") ? "&" : "?") + "reason=" + encodeURIComponent(reason) : "");
    go.disabled = true;
    try {
      const r = await fetch(path, {method: "POST", cache: "no-store", headers: {"X-CSRF-Token": CSRF}});
      const body = await r.json().catch(() => ({}));
      const what = form.id.replace("confirm-", "");
      result.className = r.ok ? "" : "refused";
      result.textContent = r.ok ? what + ": done" + (body.good ? " (back to " + short(body.good) + ")" : "")
                                 + (body.message ? " (" + body.message + ")" : "")
        : what + " refused (HTTP " + r.status + "): " + (body.error || "") + (r.status === 403 && /CSRF/.test(body.error || "")
          ? " (reload the page)" : "");
      form.hidden = r.ok ? true : form.hidden;
      form.querySelector("input[name=reason]").value = "";
      await loadHistory();
    } catch (error) {
      result.className = "refused";
      result.textContent = "the agent did not answer: " + error;
    } finally {
      go.disabled = false;
    }
  });
}
document.getElementById("filter-actor").addEventListener("change", () => loadHistory().catch(() => {}));
document.getElementById("filter-kind").addEventListener("change", () => loadHistory().catch(() => {}));

refresh().then(follow);
</script>
</body>
</html>
"""  # noqa: E501 — the page's CSS and JavaScript, a line per rule


@dataclass(frozen=True)
class PageView:
    """What one reader's page holds besides the data: its nonce, its CSRF token, who it is,
    the actions it may take (`gitops.admin.page_view.offered`) and whether it reads mismatches."""

    nonce: str = ""
    csrf: str = ""
    who: str = ""
    actions: tuple[PageAction, ...] = ()
    reads_mismatches: bool = True
    rollout_scope: str | None = None  # an endpoint-scoped reader's endpoint


READ_ONLY = PageView()


def render_page(refresh_s: float = REFRESH_S, commit_url_template: str | None = None,
                view: PageView = READ_ONLY) -> str:
    """The status page; without the live stream it refreshes itself every `refresh_s` seconds.

    `commit_url_template` (already checked: http(s), with `{sha}`) makes
    commits links to the forge; `view` is the reader's (no actions: read-only).
    """
    # JSON is a JavaScript literal; "</" is escaped so the value cannot end the <script>.
    template = json.dumps(commit_url_template).replace("</", "<\\/")
    actions = actions_html(view.actions) or '<span class="muted">read-only: your role may take no action here</span>'
    kinds = "".join(f'<option value="{html.escape(kind)}">{html.escape(kind)}</option>' for kind in HISTORY_KINDS)
    values = {
        "__REFRESH_MS__": str(int(refresh_s * 1000)),
        "__COMMIT_URL_TEMPLATE__": template,
        "__READS_MISMATCHES__": "true" if view.reads_mismatches else "false",
        "__ROLLOUT_SCOPE__": json.dumps(view.rollout_scope).replace("</", "<\\/"),
        "__APPLIED_RESULTS__": json.dumps(list(APPLIED_RESULTS)),
        "__NONCE__": html.escape(view.nonce),
        "__CSRF__": html.escape(view.csrf),
        "__WHO__": html.escape(view.who) if view.who else "",
        "__ACTIONS__": actions,
        "__KINDS__": kinds,
    }
    # One pass: a value holding a placeholder's name (a commit URL template can) stays as it is.
    return _PLACEHOLDER.sub(lambda found: values[found.group(0)], _PAGE)
