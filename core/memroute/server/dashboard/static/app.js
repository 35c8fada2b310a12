// memroute dashboard: vanilla JS over the REST API. Every piece of user text goes through textContent
// (never innerHTML), state-changing requests carry the session's CSRF token.
"use strict";

const state = { csrf: null, tenant: null, page: 1, limit: 20, totalPages: 1, editing: null, reindexTimer: null };
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.details = (body && body.error && body.error.details) || [];
  }
}

async function api(method, path, body, { raw = false, query = {} } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  const headers = {};
  if (method !== "GET" && state.csrf) headers["x-csrf-token"] = state.csrf;
  let payload;
  if (body instanceof Blob || typeof body === "string") { payload = body; headers["content-type"] = "application/x-ndjson"; }
  else if (body !== undefined) { payload = JSON.stringify(body); headers["content-type"] = "application/json"; }
  const response = await fetch(url, { method, headers, body: payload, credentials: "same-origin" });
  if (raw && response.ok) return response;
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function when(value) { return value ? new Date(value).toLocaleString() : "–"; }
function flash(message, isError = false) {
  const node = $("flash");
  node.textContent = message;
  node.className = isError ? "flash error" : "flash";
}
function fail(error) { flash(error.message || String(error), true); }

// --- session ------------------------------------------------------------------------------------------
async function boot() {
  try {
    const session = await api("GET", "/dashboard/session");
    await enter(session);
  } catch (error) {
    showSignIn();
  }
}

function showSignIn() {
  $("app").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  $("admin-key").focus();
}

async function enter(session) {
  state.csrf = session.csrfToken;
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("who").hidden = false;
  await loadTenants(session.tenant);
  selectTab("memories");
  pollHealth();
}

$("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("sign-in-error").textContent = "";
  try {
    const session = await api("POST", "/dashboard/session", { key: $("admin-key").value });
    $("admin-key").value = "";
    await enter(session);
  } catch (error) {
    $("sign-in-error").textContent = error.message;
  }
});

$("sign-out").addEventListener("click", async () => {
  try { await api("DELETE", "/dashboard/session"); } catch (error) { /* signed out either way */ }
  state.csrf = null;
  showSignIn();
});

async function loadTenants(preferred) {
  const { tenants } = await api("GET", "/api/tenants");
  const select = $("tenant");
  select.replaceChildren();
  const names = tenants.includes(preferred) ? tenants : [preferred, ...tenants];
  for (const name of names) select.append(new Option(name, name));
  state.tenant = state.tenant && names.includes(state.tenant) ? state.tenant : names[0];
  select.value = state.tenant;
}

$("tenant").addEventListener("change", () => { state.tenant = $("tenant").value; state.page = 1; refreshTab(); });

async function pollHealth() {
  const dot = $("health-dot");
  try {
    const health = await api("GET", "/api/memory/health");
    dot.className = health.working ? "dot ok" : "dot bad";
    dot.setAttribute("aria-label", health.working ? "backend health: ok" : `backend health: ${health.error}`);
    dot.title = health.working ? "healthy" : health.error;
  } catch (error) {
    dot.className = "dot bad";
    dot.setAttribute("aria-label", "backend health: unreachable");
  }
  if (state.csrf) setTimeout(pollHealth, 10000);
}

// --- tabs ---------------------------------------------------------------------------------------------
let currentTab = "memories";
function selectTab(name) {
  currentTab = name;
  for (const button of document.querySelectorAll("[role=tab]")) {
    button.setAttribute("aria-selected", String(button.dataset.tab === name));
  }
  for (const panel of document.querySelectorAll("[role=tabpanel]")) panel.hidden = panel.id !== `tab-${name}`;
  refreshTab();
}
function refreshTab() {
  const load = { memories: loadMemories, playground: () => {}, engine: loadEngine, keys: loadKeys }[currentTab];
  Promise.resolve(load()).catch(fail);
}
for (const button of document.querySelectorAll("[role=tab]")) {
  button.addEventListener("click", () => selectTab(button.dataset.tab));
}

// --- memories -----------------------------------------------------------------------------------------
async function loadMemories() {
  const page = await api("GET", "/api/memory", undefined, { query: {
    apiKeyId: state.tenant, page: state.page, limit: state.limit, q: $("f-q").value,
    type: $("f-type").value, sessionId: $("f-session").value,
  } });
  state.totalPages = Math.max(1, page.totalPages);
  $("stat-total").textContent = page.stats.total;
  $("stat-tokens").textContent = page.stats.tokensUsed;
  $("stat-hits").textContent = `${Math.round(page.stats.hitRate * 100)}%`;
  $("page-info").textContent = `Page ${page.page} of ${state.totalPages} · ${page.total} matching`;
  $("prev").disabled = state.page <= 1;
  $("next").disabled = state.page >= state.totalPages;
  const body = $("memories").tBodies[0];
  body.replaceChildren();
  if (!page.data.length) {
    const row = body.insertRow();
    const cell = row.insertCell();
    cell.colSpan = 8;
    cell.textContent = "No memories match.";
  }
  for (const memory of page.data) {
    const row = body.insertRow();
    row.dataset.id = memory.id;
    row.insertCell().append(el("span", memory.type, `badge ${memory.type}`));
    row.insertCell().append(el("code", memory.key));
    row.insertCell().textContent = memory.content;
    row.insertCell().textContent = memory.sessionId || "–";
    row.insertCell().textContent = when(memory.createdAt);
    row.insertCell().textContent = when(memory.updatedAt);
    const accessed = row.insertCell();
    accessed.textContent = when(memory.lastAccessedAt);
    accessed.title = `${memory.accessCount ?? 0} access${memory.accessCount === 1 ? "" : "es"}`;
    const open = el("button", "Open");
    open.type = "button";
    open.setAttribute("aria-label", `Open memory ${memory.key}`);
    open.addEventListener("click", () => openEditor(memory.id).catch(fail));
    row.insertCell().append(open);
  }
}

$("filters").addEventListener("submit", (event) => { event.preventDefault(); state.page = 1; loadMemories().catch(fail); });
$("prev").addEventListener("click", () => { state.page = Math.max(1, state.page - 1); loadMemories().catch(fail); });
$("next").addEventListener("click", () => { state.page = Math.min(state.totalPages, state.page + 1); loadMemories().catch(fail); });
$("new-memory").addEventListener("click", () => openEditor(null).catch(fail));

function clearFieldErrors() {
  for (const node of document.querySelectorAll("#editor [data-field]")) node.textContent = "";
  $("editor-error").textContent = "";
}

async function openEditor(id) {
  clearFieldErrors();
  state.editing = id;
  $("e-delete").hidden = id === null;
  $("e-consolidate-row").hidden = id !== null;
  $("e-consolidate").checked = false;
  $("e-history-box").hidden = true;
  $("e-history").replaceChildren();
  if (id === null) {
    $("editor-title").textContent = "Add memory";
    $("editor-id").textContent = "";
    for (const field of ["e-content", "e-key", "e-session"]) $(field).value = "";
    $("e-type").value = "factual";
    $("e-metadata").value = "{}";
  } else {
    const { memory } = await api("GET", `/api/memory/${encodeURIComponent(id)}`, undefined, { query: { apiKeyId: state.tenant } });
    $("editor-title").textContent = "Memory";
    $("editor-id").textContent = `${memory.id} · created ${when(memory.createdAt)} · updated ${when(memory.updatedAt)}`;
    $("e-content").value = memory.content;
    $("e-key").value = memory.key;
    $("e-type").value = memory.type;
    $("e-session").value = memory.sessionId || "";
    $("e-metadata").value = JSON.stringify(memory.metadata || {}, null, 2);
    const history = await api("GET", `/api/memory/${encodeURIComponent(id)}/history`, undefined, { query: { apiKeyId: state.tenant } });
    renderHistory(history);
  }
  $("editor").showModal();
  $("e-content").focus();
}

function renderHistory(history) {
  const list = $("e-history");
  list.replaceChildren();
  if (!history.recorded) list.append(el("li", "This deployment keeps no history."));
  for (const change of history.entries) {
    const item = el("li", null, "history-entry");
    item.append(el("span", `${when(change.at)} · ${change.event} · by ${change.actor}`, "history-head"));
    if (change.oldKey !== null && change.newKey !== null) item.append(el("span", `key: ${change.oldKey} → ${change.newKey}`, "history-line"));
    if (change.oldType !== null && change.newType !== null) item.append(el("span", `type: ${change.oldType} → ${change.newType}`, "history-line"));
    if (change.oldContent !== null) item.append(el("span", `was: ${change.oldContent}`, "history-line history-old"));
    if (change.newContent !== null) item.append(el("span", `now: ${change.newContent}`, "history-line"));
    list.append(item);
  }
  $("e-history-box").hidden = false;
}

$("e-save").addEventListener("click", async () => {
  clearFieldErrors();
  let metadata;
  try { metadata = JSON.parse($("e-metadata").value || "{}"); } catch (error) {
    document.querySelector('#editor [data-field="metadata"]').textContent = "not valid JSON";
    return;
  }
  const body = { content: $("e-content").value, type: $("e-type").value, metadata,
                 sessionId: $("e-session").value || null };
  if ($("e-key").value) body.key = $("e-key").value;
  try {
    if (state.editing === null) {
      await api("POST", "/api/memory", { ...body, apiKeyId: state.tenant, consolidate: $("e-consolidate").checked });
      flash("Memory added.");
    } else {
      await api("PUT", `/api/memory/${encodeURIComponent(state.editing)}`, body, { query: { apiKeyId: state.tenant } });
      flash("Memory saved.");
    }
    $("editor").close();
    await loadMemories();
  } catch (error) {
    showErrors(error);
  }
});

function showErrors(error) {
  let placed = false;
  for (const detail of error.details || []) {
    const name = String(detail.field || "").split(".").pop();
    const node = document.querySelector(`#editor [data-field="${CSS.escape(name)}"]`);
    if (node) { node.textContent = detail.message; placed = true; }
  }
  if (!placed) $("editor-error").textContent = error.message;
}

function confirmAction(text) {
  return new Promise((resolve) => {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.showModal();
  });
}

$("e-delete").addEventListener("click", async () => {
  const id = state.editing;
  $("editor").close();
  if (!(await confirmAction("Delete this memory? This cannot be undone."))) return;
  try {
    await api("DELETE", `/api/memory/${encodeURIComponent(id)}`, undefined, { query: { apiKeyId: state.tenant } });
    flash("Memory deleted.");
    await loadMemories();
  } catch (error) { fail(error); }
});
$("e-cancel").addEventListener("click", () => $("editor").close());

$("export").addEventListener("click", async () => {
  try {
    const response = await api("GET", "/api/memory/export", undefined, { raw: true, query: { apiKeyId: state.tenant } });
    const blob = await response.blob();
    const link = el("a");
    link.href = URL.createObjectURL(blob);
    link.download = `memroute-${state.tenant}.jsonl`;
    document.body.append(link);
    link.click();
    link.remove();
    flash("Export downloaded.");
  } catch (error) { fail(error); }
});

$("import-file").addEventListener("change", async () => {
  const file = $("import-file").files[0];
  if (!file) return;
  try {
    const result = await api("POST", "/api/memory/import", await file.text(), { query: { apiKeyId: state.tenant } });
    flash(`Imported ${result.imported} memories.`);
    await loadMemories();
  } catch (error) {
    flash(`Import refused, nothing was written: ${error.message}`, true);
  } finally {
    $("import-file").value = "";
  }
});

$("compact").addEventListener("click", async () => {
  const days = Number($("compact-days").value);
  try {
    const dry = await api("POST", "/api/memory/summarize", { olderThanDays: days, apiKeyId: state.tenant, dryRun: true });
    if (!dry.candidates.length) { flash(`Nothing older than ${days} days to compact.`); return; }
    const ok = await confirmAction(`Replace ${dry.candidates.length} memories (${dry.totalTokens} tokens) with a summary?`);
    if (!ok) return;
    const done = await api("POST", "/api/memory/summarize", { olderThanDays: days, apiKeyId: state.tenant, dryRun: false });
    flash(`Compacted: ${done.deletedCount} memories replaced by ${done.summaryIds.length} summaries.`);
    await loadMemories();
  } catch (error) { fail(error); }
});

// --- playground ---------------------------------------------------------------------------------------
$("playground").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("p-error").textContent = "";
  const budget = Number($("p-budget").value);
  if (!(budget >= 100 && budget <= 16000)) { $("p-error").textContent = "token budget: 100 to 16,000"; return; }
  try {
    const query = $("p-query").value;
    const [preview, injection] = await Promise.all([
      api("POST", "/api/memory/retrieve-preview", { query, strategy: $("p-strategy").value, maxTokens: budget,
                                                    apiKeyId: state.tenant }),
      api("POST", "/api/memory/injection-preview", { query, apiKeyId: state.tenant }),
    ]);
    renderPreview(preview, injection);
  } catch (error) { $("p-error").textContent = error.message; }
});

function renderPreview(preview, injection) {
  const used = preview.totalTokensUsed, budget = preview.budgetMaxTokens;
  $("p-bar").style.width = `${Math.min(100, (100 * used) / Math.max(1, budget))}%`;
  $("p-tokens").textContent = `${used} of ${budget} tokens`;
  const resolution = $("p-resolution");
  resolution.replaceChildren();
  const r = preview.resolution;
  const served = r.fallback ? `${r.backend} (a fallback: the primary did not answer)` : r.backend;
  for (const [label, value] of [["Embedding", `${r.embeddingSource || "none"} ${r.embeddingModel || ""}`],
                                ["Vector store", r.vectorStore || "none"],
                                ["Strategy used", r.strategyUsed === r.strategyRequested ? r.strategyUsed
                                  : `${r.strategyUsed} (asked for ${r.strategyRequested})`],
                                ["Legs", (r.legs || []).join(" + ") || "–"], ["Backend", served || "–"],
                                ["Rerank", r.rerankApplied ? `applied (${r.reranker})` : "not applied"],
                                ["Fallback reason", r.fallbackReason || "–"]]) {
    resolution.append(el("dt", label), el("dd", value));
  }
  const body = $("p-results").tBodies[0];
  body.replaceChildren();
  for (const item of preview.memories) {
    const row = body.insertRow();
    const ranks = item.ranks || {}, scores = item.legScores || {};
    row.insertCell().append(el("span", item.tier, "badge tier"));
    row.insertCell().append(el("code", item.key));
    const content = row.insertCell();
    content.textContent = item.content;
    // When the memory was said (a remembered message): what a "when did I …" question asks for.
    if (item.saidAt) content.append(" ", el("small", `said ${item.saidAt.slice(0, 10)}`, "said"));
    row.insertCell().textContent = Number(item.score).toFixed(2);
    row.insertCell().textContent = leg(ranks.keyword, scores.keyword);
    row.insertCell().textContent = leg(ranks.vector, scores.vector);
    row.insertCell().textContent = item.tokens;
  }
  if (!preview.memories.length) body.insertRow().insertCell().textContent = "No memories retrieved.";
  $("p-block").textContent = injection.injected ? injection.block : `(nothing would be injected: ${injection.skipped})`;
}
// One leg's place in the ranking: "#rank / score", or "–" when that leg did not find the memory.
function leg(rank, score) {
  const parts = [];
  if (rank !== undefined && rank !== null) parts.push(`#${rank}`);
  if (score !== undefined && score !== null) parts.push(Number(score).toFixed(3));
  return parts.join(" / ") || "–";
}

// --- engine -------------------------------------------------------------------------------------------
async function loadEngine() {
  const [status, settings, reindex] = await Promise.all([
    api("GET", "/api/memory/engine-status"), api("GET", "/api/settings/memory"), api("GET", "/api/memory/reindex"),
  ]);
  const list = $("engine-status");
  list.replaceChildren();
  const describe = (part) => part ? `${part.available === false ? "unavailable" : "available"} · ${
    part.backend || part.source || part.reranker || ""} ${part.model || ""} ${part.reason ? `(${part.reason})` : ""}` : "–";
  for (const [label, value] of [["Keyword", describe(status.keyword)], ["Embedding", describe(status.embedding)],
                                ["Vector store", describe(status.vector_store)],
                                ["Index signature", (status.vector_store || {}).signature || "–"],
                                ["Rerank", describe(status.rerank)],
                                ["Extraction", describeExtraction(status.extraction)]]) {
    list.append(el("dt", label), el("dd", value));
  }
  const body = $("backends").tBodies[0];
  body.replaceChildren();
  for (const backend of ((status.health || {}).backends || [])) {
    const row = body.insertRow();
    row.insertCell().textContent = `${backend.name} (${backend.type || ""})`;
    row.insertCell().textContent = backend.role;
    row.insertCell().append(el("span", backend.ok ? "ok" : "failing", backend.ok ? "badge ok" : "badge bad"));
    row.insertCell().textContent = backend.breaker || "–";
    row.insertCell().textContent = backend.pending ?? 0;
    row.insertCell().textContent = backend.error || "–";
  }
  $("s-enabled").checked = settings.enabled;
  $("s-max-tokens").value = settings.maxTokens;
  $("s-retention").value = settings.retentionDays;
  $("s-delete-after").value = settings.deleteAfterDays;
  $("s-strategy").value = settings.strategy === "exact" ? "recent" : settings.strategy;
  showReindex(reindex);
}

// The extractor chain, and a background extractor's spend: "regex → llm · gpt-4o-mini · 42 requests, 18900 tokens".
function describeExtraction(extraction) {
  if (!extraction) return "–";
  const chain = (extraction.extractors || []).join(" → ");
  if (extraction.error) return `${chain} (${extraction.error})`;
  const llm = extraction.llm;
  if (!llm) return chain;
  const failures = Object.entries(llm.failures || {}).map(([reason, count]) => `${reason} ${count}`).join(", ");
  return `${chain} · ${llm.model} · ${llm.requests} requests, ${llm.prompt_tokens + llm.completion_tokens} tokens${
    failures ? ` · failures: ${failures}` : ""}`;
}

function showReindex(progress) {
  const total = progress.done + progress.pending;
  $("reindex-progress").max = Math.max(1, total);
  $("reindex-progress").value = progress.done;
  $("reindex-state").textContent = `${progress.state}: ${progress.done} indexed, ${progress.pending} pending, ${
    progress.errors} errors${progress.error ? ` (${progress.error})` : ""}`;
  clearTimeout(state.reindexTimer);
  if (progress.state === "running") {
    state.reindexTimer = setTimeout(async () => {
      try { showReindex(await api("GET", "/api/memory/reindex")); } catch (error) { fail(error); }
    }, 500);
  }
}

$("reindex").addEventListener("click", async () => {
  try { showReindex(await api("POST", "/api/memory/reindex", { force: $("reindex-force").checked })); }
  catch (error) { fail(error); }
});

$("settings").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("s-error").textContent = "";
  try {
    await api("PUT", "/api/settings/memory", { enabled: $("s-enabled").checked, maxTokens: Number($("s-max-tokens").value),
                                                retentionDays: Number($("s-retention").value),
                                                deleteAfterDays: Number($("s-delete-after").value),
                                                strategy: $("s-strategy").value });
    flash("Settings saved.");
  } catch (error) {
    $("s-error").textContent = [error.message, ...error.details.map((d) => `${d.field}: ${d.message}`)].join(" · ");
  }
});

// --- keys ---------------------------------------------------------------------------------------------
async function loadKeys() {
  const { data } = await api("GET", "/api/keys");
  const body = $("keys").tBodies[0];
  body.replaceChildren();
  for (const key of data) {
    const row = body.insertRow();
    row.dataset.id = key.id;
    row.insertCell().textContent = key.name;
    row.insertCell().append(el("code", key.id));
    row.insertCell().textContent = key.tenant;
    row.insertCell().textContent = key.scopes.join(", ");
    row.insertCell().textContent = when(key.createdAt);
    row.insertCell().textContent = when(key.lastUsedAt);
    row.insertCell().textContent = when(key.revokedAt);
    const actions = row.insertCell();
    if (!key.revokedAt) {
      for (const [label, action] of [["Rotate", "rotate"], ["Revoke", "revoke"]]) {
        const button = el("button", label, action === "revoke" ? "danger" : "");
        button.type = "button";
        button.setAttribute("aria-label", `${label} key ${key.name}`);
        button.addEventListener("click", () => keyAction(key, action).catch(fail));
        actions.append(button);
      }
    }
  }
}

async function keyAction(key, action) {
  if (!(await confirmAction(`${action === "revoke" ? "Revoke" : "Rotate"} the key "${key.name}"? Its current secret stops working at once.`))) return;
  const result = await api("POST", `/api/keys/${encodeURIComponent(key.id)}/${action}`);
  if (action === "rotate") showSecret(result.secret);
  flash(action === "revoke" ? "Key revoked." : "Key rotated: copy the new secret.");
  await loadKeys();
}

function showSecret(secret) {
  $("k-secret").hidden = false;
  $("k-secret-value").textContent = secret;
}

$("key-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("k-error").textContent = "";
  try {
    const result = await api("POST", "/api/keys", { name: $("k-name").value, tenant: $("k-tenant").value || null,
                                                    scopes: $("k-scopes").value.split(",") });
    showSecret(result.secret);
    $("k-name").value = "";
    await loadKeys();
    await loadTenants(state.tenant);
  } catch (error) { $("k-error").textContent = error.message; }
});

boot();
