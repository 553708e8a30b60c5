/**
 * The MCP App of `computer_dashboard` (MCP Apps specification 2026-01-26).
 *
 * One self-contained HTML page: inline style and script, no external scripts, styles, fonts or
 * images (its own CSP forbids them). It talks to its host only through the MCP Apps postMessage
 * protocol — JSON-RPC 2.0 with `window.parent`: `ui/initialize` → answer →
 * `ui/notifications/initialized`; it takes the `computer_dashboard` result from
 * `ui/notifications/tool-result`, the theme from the host context, answers `ping` and
 * `ui/resource-teardown`, and calls the server's tools with `tools/call`. Only messages whose source
 * is `window.parent` (and, once the host has answered, whose origin is the host's) are read;
 * everything shown is untrusted text, rendered with DOM APIs (`textContent`), never as HTML.
 */
export const resourceUri = "ui://kilntainers/computers"
export const mimeType = "text/html;profile=mcp-app"

/** The app's metadata on its resource: no external origins, drawn with a border. */
export const resourceMeta = { ui: { csp: {}, prefersBorder: true } } as const

/** The protocol version of the MCP Apps specification the app speaks. */
export const protocolVersion = "2026-01-26"

/** The dark theme's colours: used for an explicit dark host theme and for prefers-color-scheme. */
const darkPalette = `  color-scheme: dark;
  --bg: var(--color-background-primary, #15181d);
  --bg2: var(--color-background-secondary, #1c2027);
  --bg3: var(--color-background-tertiary, #252a33);
  --fg: var(--color-text-primary, #e6e9ef);
  --fg2: var(--color-text-secondary, #9aa4b2);
  --line: var(--color-border-primary, #2f3541);
  --accent: var(--color-ring-primary, #5b8def);
  --ok: var(--color-text-success, #3fb950);
  --warn: var(--color-text-warning, #d29922);
  --danger: var(--color-text-danger, #f85149);
  --danger-bg: var(--color-background-danger, #3a1d1f);
  --term-bg: #0b0e12;
`

const style = String.raw`
:root {
  color-scheme: light;
  --bg: var(--color-background-primary, #ffffff);
  --bg2: var(--color-background-secondary, #f5f6f8);
  --bg3: var(--color-background-tertiary, #eceef2);
  --fg: var(--color-text-primary, #1b1f24);
  --fg2: var(--color-text-secondary, #5b6472);
  --line: var(--color-border-primary, #dde1e7);
  --accent: var(--color-ring-primary, #2f6feb);
  --ok: var(--color-text-success, #1a7f37);
  --warn: var(--color-text-warning, #9a6700);
  --danger: var(--color-text-danger, #cf222e);
  --danger-bg: var(--color-background-danger, #ffebe9);
  --term-bg: #0f1419;
  --term-fg: #d8dee9;
  --radius: var(--border-radius-md, 8px);
  --sans: var(--font-sans, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif);
  --mono: var(--font-mono, ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace);
}
:root[data-theme="dark"] {
${darkPalette}}
@media (prefers-color-scheme: dark) {
  :root:not([data-theme]) {
${darkPalette}  }
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--fg); font: 13px/1.45 var(--sans); }
body { padding: 14px; }
[hidden] { display: none !important; }
header { display: flex; align-items: baseline; gap: 10px; margin-bottom: 10px; }
h1 { font-size: 15px; margin: 0; font-weight: 600; }
h2 { font-size: 12px; margin: 0; font-weight: 600; text-transform: uppercase; letter-spacing: .04em; color: var(--fg2); }
.count { font-size: 12px; color: var(--fg2); background: var(--bg3); border-radius: 999px; padding: 0 8px; }
.status { margin-left: auto; font-size: 12px; color: var(--fg2); }
button, input, select, textarea { font: inherit; color: inherit; }
button {
  background: var(--bg2); border: 1px solid var(--line); border-radius: 6px; padding: 4px 10px;
  cursor: pointer; white-space: nowrap;
}
button:hover:not(:disabled) { border-color: var(--fg2); }
button:disabled { opacity: .55; cursor: default; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { color: var(--danger); }
button.danger.solid { background: var(--danger); border-color: var(--danger); color: #fff; }
input[type="text"], select, textarea {
  background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px;
}
input:focus, select:focus, textarea:focus, button:focus-visible { outline: 2px solid var(--accent); outline-offset: -1px; }
.error {
  display: flex; gap: 8px; align-items: flex-start; margin-bottom: 10px; padding: 6px 10px;
  border: 1px solid var(--danger); border-radius: var(--radius); background: var(--danger-bg); color: var(--danger);
  white-space: pre-wrap; word-break: break-word;
}
.error span { flex: 1; }
.error button { padding: 0 6px; border: 0; background: transparent; color: inherit; }
.create { display: flex; gap: 8px; align-items: center; margin-bottom: 10px; flex-wrap: wrap; }
.create input[type="text"] { flex: 1; min-width: 160px; }
.create label { display: flex; gap: 4px; align-items: center; color: var(--fg2); }
.card { border: 1px solid var(--line); border-radius: var(--radius); background: var(--bg); overflow: hidden; }
.inventory { list-style: none; margin: 0 0 12px; padding: 0; }
.computer {
  display: flex; gap: 10px; align-items: center; padding: 8px 10px; border-top: 1px solid var(--line); cursor: pointer;
}
.computer:first-child { border-top: 0; }
.computer:hover { background: var(--bg2); }
.computer.selected { background: var(--bg3); box-shadow: inset 3px 0 0 var(--accent); }
.dot { width: 9px; height: 9px; border-radius: 50%; flex: none; background: var(--fg2); }
.dot.running { background: var(--ok); box-shadow: 0 0 0 3px color-mix(in srgb, var(--ok) 20%, transparent); }
.dot.starting, .dot.restarting { background: var(--warn); }
.dot.stopped, .dot.exited, .dot.failed, .dot.error { background: var(--danger); }
.info { flex: 1; min-width: 0; }
.name { display: flex; gap: 8px; align-items: center; font-weight: 600; font-family: var(--mono); }
.name .id { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.pill { font: 500 11px/1.6 var(--sans); padding: 0 7px; border-radius: 999px; border: 1px solid var(--line); color: var(--fg2); }
.pill.temporary { color: var(--warn); border-color: color-mix(in srgb, var(--warn) 45%, transparent); }
.pill.permanent { color: var(--accent); border-color: color-mix(in srgb, var(--accent) 45%, transparent); }
.meta { color: var(--fg2); font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.actions { display: flex; gap: 6px; flex: none; }
.empty { margin: 0; padding: 14px; color: var(--fg2); text-align: center; }
.panes { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 12px; }
@media (max-width: 720px) { .panes { grid-template-columns: minmax(0, 1fr); } }
.pane { display: flex; flex-direction: column; }
.pane-head { display: flex; gap: 8px; align-items: center; min-height: 42px; padding: 6px 10px; border-bottom: 1px solid var(--line); background: var(--bg2); }
.pane-head select { margin-left: auto; max-width: 60%; }
.pane-head .sub { margin-left: auto; color: var(--fg2); font-family: var(--mono); font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.terminal {
  margin: 0; min-height: 150px; max-height: 320px; overflow: auto; padding: 8px 10px; background: var(--term-bg); color: var(--term-fg);
  font: 12px/1.5 var(--mono); white-space: pre-wrap; word-break: break-word;
}
.terminal .prompt { color: #7ee787; }
.terminal .stderr { color: #ffa198; }
.terminal .footer { color: #8b949e; }
.terminal .footer.failed { color: #ffa198; }
.terminal .hint { color: #8b949e; }
.command { display: flex; gap: 8px; padding: 8px 10px; border-top: 1px solid var(--line); align-items: stretch; }
.command textarea { flex: 1; resize: vertical; min-height: 34px; font-family: var(--mono); font-size: 12px; }
table { width: 100%; border-collapse: collapse; font-size: 12px; }
th, td { text-align: left; padding: 5px 10px; border-top: 1px solid var(--line); vertical-align: top; }
th { border-top: 0; color: var(--fg2); font-weight: 500; }
td.mono { font-family: var(--mono); }
td.cmd { font-family: var(--mono); max-width: 0; width: 55%; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.st { font-weight: 600; }
.st.running { color: var(--ok); }
.st.exited { color: var(--fg2); }
.st.killed { color: var(--danger); }
.overlay {
  position: fixed; inset: 0; display: flex; align-items: center; justify-content: center;
  background: color-mix(in srgb, #000 45%, transparent); padding: 16px;
}
.dialog {
  background: var(--bg); color: var(--fg); border: 1px solid var(--line); border-radius: 10px; padding: 16px;
  max-width: 380px; width: 100%; box-shadow: 0 10px 30px rgba(0, 0, 0, .25);
}
.dialog p { margin: 0 0 14px; white-space: pre-wrap; word-break: break-word; }
.dialog .actions { justify-content: flex-end; }
`

const body = String.raw`
<header>
  <h1>Sandbox computers</h1>
  <span class="count" data-testid="count">0</span>
  <span class="status" data-testid="status">connecting…</span>
</header>
<div class="error" role="alert" data-testid="error" hidden><span data-testid="error-text"></span><button type="button" data-testid="error-dismiss" aria-label="Dismiss">×</button></div>
<div class="create" data-testid="create-bar">
  <input type="text" data-testid="create-id" autocomplete="off" placeholder="computer id (optional: a-z, 0-9, -)" maxlength="63" spellcheck="false" aria-label="Computer id">
  <label><input type="checkbox" data-testid="create-temporary" checked> temporary</label>
  <button type="button" class="primary" data-testid="create">Create</button>
  <button type="button" data-testid="refresh">Refresh</button>
</div>
<div class="card" style="margin-bottom:12px">
  <ul class="inventory" data-testid="inventory" style="margin:0"></ul>
  <p class="empty" data-testid="inventory-empty">No computers yet — create one above.</p>
</div>
<div class="panes">
  <section class="card pane" aria-label="Terminal">
    <div class="pane-head"><h2>Terminal</h2><select data-testid="terminal-target" aria-label="Target computer"></select></div>
    <pre class="terminal" data-testid="terminal-output"><span class="hint">Pick a computer, type a command, Ctrl+Enter to run.</span></pre>
    <div class="command">
      <textarea data-testid="terminal-command" rows="2" spellcheck="false" placeholder="command (Ctrl+Enter to run)" aria-label="Command"></textarea>
      <button type="button" class="primary" data-testid="terminal-run">Run</button>
    </div>
  </section>
  <section class="card pane" aria-label="Processes">
    <div class="pane-head"><h2>Processes</h2><span class="sub" data-testid="processes-target"></span></div>
    <table data-testid="processes" hidden>
      <thead><tr><th>id</th><th>command</th><th>status</th><th>exit</th></tr></thead>
      <tbody data-testid="processes-body"></tbody>
    </table>
    <p class="empty" data-testid="processes-empty">No processes.</p>
  </section>
</div>
<div class="overlay" data-testid="confirm-dialog" role="dialog" aria-modal="true" hidden>
  <div class="dialog">
    <p data-testid="confirm-text"></p>
    <div class="actions">
      <button type="button" data-testid="confirm-cancel">Cancel</button>
      <button type="button" class="danger solid" data-testid="confirm-ok">Confirm</button>
    </div>
  </div>
</div>
`

// Plain ES2017 in a String.raw template: no backquotes and no dollar-brace sequences inside.
const script = String.raw`
(function () {
  "use strict";
  var PROTOCOL_VERSION = "__PROTOCOL_VERSION__";
  var REFRESH_MS = 4000;
  var host = window.parent;
  var hostOrigin = null;
  var nextId = 1;
  var pending = new Map();
  var initialized = false;
  var tornDown = false;
  var timer = null;
  var computers = [];
  var rows = new Map();
  var selected = null;
  var ignored = 0;

  function $(id) { return document.querySelector('[data-testid="' + id + '"]'); }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function str(value, fallback) { return typeof value === "string" ? value : fallback; }
  function cssToken(value) { return String(value).toLowerCase().replace(/[^a-z0-9-]/g, ""); }

  // ---- MCP Apps transport: JSON-RPC 2.0 over postMessage with window.parent only ----
  function post(message) {
    if (tornDown && message.method) return;
    host.postMessage(message, hostOrigin || "*");
  }
  function request(method, params, timeoutMs) {
    if (tornDown) return Promise.reject(new Error("the dashboard was closed"));
    var id = nextId++;
    return new Promise(function (resolve, reject) {
      var timeout = setTimeout(function () {
        pending.delete(id);
        reject(new Error(method + " timed out"));
      }, timeoutMs || 120000);
      pending.set(id, { resolve: resolve, reject: reject, timeout: timeout });
      post({ jsonrpc: "2.0", id: id, method: method, params: params });
    });
  }
  function notify(method, params) {
    var message = { jsonrpc: "2.0", method: method };
    if (params !== undefined) message.params = params;
    post(message);
  }
  function respond(id, result) { host.postMessage({ jsonrpc: "2.0", id: id, result: result }, hostOrigin || "*"); }
  function respondError(id, code, message) {
    host.postMessage({ jsonrpc: "2.0", id: id, error: { code: code, message: message } }, hostOrigin || "*");
  }

  window.addEventListener("message", function (event) {
    // Only the host (our parent window) speaks to us; once it has answered ui/initialize, only
    // from its origin. Other frames, this window itself and other origins are ignored.
    if (event.source !== host || (hostOrigin !== null && event.origin !== hostOrigin)) return drop();
    var message = event.data;
    if (!message || typeof message !== "object" || message.jsonrpc !== "2.0") return drop();
    var hasId = typeof message.id === "number" || typeof message.id === "string";
    if (typeof message.method !== "string") {
      var waiter = hasId ? pending.get(message.id) : undefined;
      if (!waiter) return drop();
      if (hostOrigin === null && event.origin && event.origin !== "null") hostOrigin = event.origin;
      pending.delete(message.id);
      clearTimeout(waiter.timeout);
      if (message.error) waiter.reject(new Error(str(message.error.message, "request failed")));
      else waiter.resolve(message.result);
      return;
    }
    if (!initialized && message.method !== "ping") return drop();
    if (hasId) onRequest(message);
    else onNotification(message);
  });
  function drop() {
    ignored++;
    document.documentElement.setAttribute("data-ignored-messages", String(ignored));
  }

  function onRequest(message) {
    switch (message.method) {
      case "ping":
        return respond(message.id, {});
      case "ui/resource-teardown":
        teardown();
        return respond(message.id, {});
      default:
        return respondError(message.id, -32601, "method not found: " + message.method);
    }
  }
  function onNotification(message) {
    var params = message.params && typeof message.params === "object" ? message.params : {};
    switch (message.method) {
      case "ui/notifications/tool-result":
        if (params.isError) showError(resultText(params));
        else if (params.structuredContent) renderInventory(params.structuredContent);
        return;
      case "ui/notifications/host-context-changed":
        return applyHostContext(params);
      default:
        return; // tool-input, tool-input-partial, tool-cancelled …: nothing to do
    }
  }

  function applyHostContext(context) {
    if (!context || typeof context !== "object") return;
    var root = document.documentElement;
    if (context.theme === "light" || context.theme === "dark") root.setAttribute("data-theme", context.theme);
    var variables = context.styles && context.styles.variables;
    if (variables && typeof variables === "object") {
      Object.keys(variables).forEach(function (name) {
        var value = variables[name];
        if (/^--[a-z0-9-]+$/.test(name) && typeof value === "string" && value.indexOf("url(") < 0) root.style.setProperty(name, value);
      });
    }
  }

  function teardown() {
    tornDown = true;
    if (timer !== null) clearInterval(timer);
    timer = null;
    pending.forEach(function (waiter) { clearTimeout(waiter.timeout); waiter.reject(new Error("the dashboard was closed")); });
    pending.clear();
    setStatus("closed");
    Array.prototype.forEach.call(document.querySelectorAll("button, input, select, textarea"), function (c) { c.disabled = true; });
  }

  // ---- tools ----
  function resultText(result) {
    var content = result && Array.isArray(result.content) ? result.content : [];
    var text = content.filter(function (c) { return c && c.type === "text"; }).map(function (c) { return str(c.text, ""); }).join("\n");
    return text || "the tool call failed";
  }
  function callTool(name, args, timeoutMs) {
    return request("tools/call", { name: name, arguments: args }, timeoutMs).then(function (result) {
      if (!result || typeof result !== "object") throw new Error(name + ": empty result");
      if (result.isError) throw new Error(resultText(result));
      return result.structuredContent && typeof result.structuredContent === "object" ? result.structuredContent : {};
    });
  }

  // ---- status and errors ----
  function setStatus(text) { $("status").textContent = text; }
  function showError(error) {
    var message = error instanceof Error ? error.message : String(error);
    $("error-text").textContent = message;
    $("error").hidden = false;
  }
  function clearError() { $("error").hidden = true; $("error-text").textContent = ""; }
  $("error-dismiss").addEventListener("click", clearError);

  // ---- inventory ----
  var refreshing = false;
  var refreshAgain = false;
  function refresh() {
    if (tornDown) return;
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    callTool("computer_list", {}, 60000)
      .then(function (inventory) {
        renderInventory(inventory);
        return refreshProcesses();
      })
      .then(function () { setStatus("updated " + new Date().toLocaleTimeString()); })
      .catch(function (error) { if (!tornDown) showError(error); })
      .then(function () {
        refreshing = false;
        if (refreshAgain) { refreshAgain = false; refresh(); }
      });
  }

  function renderInventory(inventory) {
    var list = inventory && Array.isArray(inventory.computers) ? inventory.computers : [];
    computers = list.filter(function (c) { return c && typeof c.computer_id === "string"; });
    $("count").textContent = String(computers.length);
    var ul = $("inventory");
    var seen = new Set();
    computers.forEach(function (computer, index) {
      var id = computer.computer_id;
      seen.add(id);
      var row = rows.get(id) || makeRow(id);
      updateRow(row, computer);
      if (ul.children[index] !== row.li) ul.insertBefore(row.li, ul.children[index] || null);
    });
    rows.forEach(function (row, id) {
      if (!seen.has(id)) { row.li.remove(); rows.delete(id); }
    });
    $("inventory-empty").hidden = computers.length > 0;
    if (selected !== null && !seen.has(selected)) selected = null;
    if (selected === null && computers.length > 0) selected = computers[0].computer_id;
    renderTargets();
  }

  function makeRow(id) {
    var li = el("li", "computer");
    li.setAttribute("data-testid", "computer-row");
    li.setAttribute("data-computer-id", id);
    var dot = el("span", "dot");
    var info = el("div", "info");
    var name = el("div", "name");
    var idNode = el("span", "id", id);
    idNode.setAttribute("data-testid", "computer-id");
    idNode.title = id;
    var pill = el("span", "pill");
    pill.setAttribute("data-testid", "computer-kind");
    name.append(idNode, pill);
    var meta = el("div", "meta");
    meta.setAttribute("data-testid", "computer-meta");
    info.append(name, meta);
    var actions = el("div", "actions");
    var restart = button("Restart", "computer-restart", "");
    var reset = button("Reset", "computer-reset", "");
    var del = button("Delete", "computer-delete", "danger");
    actions.append(restart, reset, del);
    li.append(dot, info, actions);
    var row = { li: li, dot: dot, pill: pill, meta: meta, state: "", computer: null };
    li.addEventListener("click", function (event) {
      if (event.target instanceof Element && event.target.closest("button")) return;
      select(id);
    });
    restart.addEventListener("click", function () {
      action(row, "Restarting", "computer_restart", { computer_id: id });
    });
    reset.addEventListener("click", function () {
      confirmDialog("Factory-reset '" + id + "'?\nIts processes end and every file in it is erased.", "Reset").then(function (ok) {
        if (ok) action(row, "Resetting", "computer_factory_reset", { computer_id: id });
      });
    });
    del.addEventListener("click", function () {
      confirmDialog("Delete '" + id + "' and everything in it?\nThis cannot be undone.", "Delete").then(function (ok) {
        if (ok) action(row, "Deleting", "computer_delete", { computer_id: id });
      });
    });
    rows.set(id, row);
    return row;
  }

  function button(label, testid, cls) {
    var b = el("button", cls, label);
    b.type = "button";
    b.setAttribute("data-testid", testid);
    return b;
  }

  function updateRow(row, computer) {
    row.computer = computer;
    var state = str(computer.state, "unknown");
    row.li.setAttribute("data-state", state);
    row.li.classList.toggle("selected", computer.computer_id === selected);
    row.dot.className = "dot " + cssToken(state);
    row.dot.title = state;
    var temporary = computer.temporary === true;
    row.pill.textContent = temporary ? "temporary" : "permanent";
    row.pill.className = "pill " + (temporary ? "temporary" : "permanent");
    var processes = typeof computer.processes === "number" ? computer.processes : 0;
    var parts = [str(computer.backend, "?"), state, str(computer.image, "?"), str(computer.sandbox_id, "?"),
      processes + (processes === 1 ? " process" : " processes")];
    row.meta.textContent = "";
    parts.forEach(function (part, i) {
      if (i > 0) row.meta.append(" · ");
      var span = el("span", null, part);
      if (i === 1) span.setAttribute("data-testid", "computer-state");
      row.meta.append(span);
    });
    row.meta.title = parts.join(" · ") + (computer.created_at ? " · created " + computer.created_at : "");
  }

  function action(row, verb, tool, args) {
    var buttons = row.li.querySelectorAll("button");
    Array.prototype.forEach.call(buttons, function (b) { b.disabled = true; });
    clearError();
    setStatus(verb + " " + args.computer_id + "…");
    callTool(tool, args, 300000)
      .catch(showError)
      .then(function () {
        Array.prototype.forEach.call(buttons, function (b) { b.disabled = false; });
        refresh();
      });
  }

  // ---- confirmation (in page: hosts may block window.confirm) ----
  var confirming = null;
  function confirmDialog(text, label) {
    if (confirming) confirming(false);
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = label;
    $("confirm-dialog").hidden = false;
    $("confirm-cancel").focus();
    return new Promise(function (resolve) {
      confirming = function (ok) {
        confirming = null;
        $("confirm-dialog").hidden = true;
        resolve(ok);
      };
    });
  }
  $("confirm-ok").addEventListener("click", function () { if (confirming) confirming(true); });
  $("confirm-cancel").addEventListener("click", function () { if (confirming) confirming(false); });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && confirming) confirming(false);
  });

  // ---- create bar (no form: a sandbox without allow-forms never submits one) ----
  function create() {
    var input = $("create-id");
    var id = input.value.trim();
    var args = { temporary: $("create-temporary").checked };
    if (id) args.computer_id = id;
    var createButton = $("create");
    if (createButton.disabled || tornDown) return;
    createButton.disabled = true;
    clearError();
    setStatus("creating " + (id || "a computer") + "…");
    callTool("computer_create", args, 300000)
      .then(function (created) {
        input.value = "";
        if (typeof created.computer_id === "string") selected = created.computer_id;
      })
      .catch(showError)
      .then(function () { createButton.disabled = tornDown; refresh(); });
  }
  $("create").addEventListener("click", create);
  $("create-id").addEventListener("keydown", function (event) {
    if (event.key === "Enter") { event.preventDefault(); create(); }
  });
  $("refresh").addEventListener("click", function () { clearError(); refresh(); });

  // ---- selection, terminal ----
  function select(id) {
    if (selected === id) return;
    selected = id;
    rows.forEach(function (row, rowId) { row.li.classList.toggle("selected", rowId === id); });
    renderTargets();
    refresh();
  }
  function renderTargets() {
    var target = $("terminal-target");
    target.textContent = "";
    if (computers.length === 0) target.append(el("option", null, "no computers"));
    computers.forEach(function (computer) {
      var option = el("option", null, computer.computer_id);
      option.value = computer.computer_id;
      target.append(option);
    });
    target.disabled = tornDown || computers.length === 0;
    if (selected !== null) target.value = selected;
    rows.forEach(function (row, rowId) { row.li.classList.toggle("selected", rowId === selected); });
    $("terminal-run").disabled = tornDown || running || selected === null;
    $("processes-target").textContent = selected || "";
  }
  $("terminal-target").addEventListener("change", function (event) { select(event.target.value); });

  var running = false;
  var hinted = true;
  function appendOutput(parts) {
    var out = $("terminal-output");
    if (hinted) { out.textContent = ""; hinted = false; }
    var entry = el("div", "entry");
    parts.forEach(function (part) { if (part[1]) entry.append(el("span", part[0], part[1])); });
    out.append(entry);
    while (out.children.length > 100) out.firstChild.remove();
    out.scrollTop = out.scrollHeight;
  }
  function run() {
    var commandBox = $("terminal-command");
    var command = commandBox.value;
    if (running || tornDown || !command.trim() || selected === null) return;
    var computer = computers.find(function (c) { return c.computer_id === selected; });
    var args = { computer_id: selected, command: command };
    if (computer) args.temporary = computer.temporary === true;
    running = true;
    var runButton = $("terminal-run");
    runButton.disabled = true;
    runButton.textContent = "Running…";
    clearError();
    var prompt = selected + " $ " + command + (command.slice(-1) === "\n" ? "" : "\n");
    callTool("sandbox_exec", args, 900000)
      .then(function (result) {
        var stdout = str(result.stdout, "");
        var stderr = str(result.stderr, "");
        var code = typeof result.exit_code === "number" ? result.exit_code : "?";
        var footer = "[exit " + code + (result.timed_out ? " · timed out" : "") + (result.truncated ? " · truncated" : "") +
          " · " + (typeof result.exec_duration_ms === "number" ? Math.round(result.exec_duration_ms) : "?") + " ms]\n";
        if (stdout && stdout.slice(-1) !== "\n") stdout += "\n";
        if (stderr && stderr.slice(-1) !== "\n") stderr += "\n";
        appendOutput([["prompt", prompt], ["stdout", stdout], ["stderr", stderr], [code === 0 ? "footer" : "footer failed", footer]]);
        commandBox.value = "";
      })
      .catch(function (error) {
        appendOutput([["prompt", prompt], ["stderr", (error instanceof Error ? error.message : String(error)) + "\n"]]);
        showError(error);
      })
      .then(function () {
        running = false;
        runButton.textContent = "Run";
        runButton.disabled = tornDown || selected === null;
        refresh();
      });
  }
  $("terminal-run").addEventListener("click", run);
  $("terminal-command").addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); run(); }
  });

  // ---- processes ----
  function refreshProcesses() {
    var target = selected;
    if (target === null) { renderProcesses([]); return Promise.resolve(); }
    return callTool("ps", { computer_id: target }, 60000).then(function (result) {
      if (target === selected) renderProcesses(Array.isArray(result.processes) ? result.processes : []);
    });
  }
  function renderProcesses(list) {
    var order = { running: 0 };
    var sorted = list.filter(function (p) { return p && typeof p.id === "string"; }).sort(function (a, b) {
      var byStatus = (order[a.status] === undefined ? 1 : 0) - (order[b.status] === undefined ? 1 : 0);
      return byStatus !== 0 ? byStatus : str(b.startedAt, "").localeCompare(str(a.startedAt, ""));
    }).slice(0, 50);
    var tbody = $("processes-body");
    tbody.textContent = "";
    sorted.forEach(function (p) {
      var tr = el("tr");
      tr.setAttribute("data-testid", "process-row");
      tr.setAttribute("data-process-id", p.id);
      var status = str(p.status, "?");
      tr.setAttribute("data-status", status);
      var statusCell = el("td", "st " + cssToken(status), status);
      statusCell.setAttribute("data-testid", "process-status");
      var command = el("td", "cmd", str(p.command, ""));
      command.title = str(p.command, "") + (p.reason ? "\n" + p.reason : "");
      var exit = p.exitCode !== null && p.exitCode !== undefined ? String(p.exitCode) : (p.signal ? str(p.signal, "") : "");
      var exitCell = el("td", "mono", exit);
      exitCell.setAttribute("data-testid", "process-exit");
      tr.append(el("td", "mono", p.id), command, statusCell, exitCell);
      tbody.append(tr);
    });
    $("processes").hidden = sorted.length === 0;
    $("processes-empty").hidden = sorted.length > 0;
    $("processes-empty").textContent = selected === null ? "No computer selected." : "No processes.";
  }

  // ---- size reporting, so the host can fit the frame to the content ----
  var lastHeight = -1;
  function reportSize() {
    if (!initialized || tornDown) return;
    // The body's own height: the document's scrollHeight never drops below the frame's height.
    var height = Math.ceil(document.body.getBoundingClientRect().height);
    if (height === lastHeight) return;
    lastHeight = height;
    notify("ui/notifications/size-changed", { height: height });
  }
  if (typeof ResizeObserver === "function") new ResizeObserver(reportSize).observe(document.body);

  // ---- start: ui/initialize → answer → ui/notifications/initialized ----
  renderTargets();
  renderProcesses([]);
  request("ui/initialize", {
    protocolVersion: PROTOCOL_VERSION,
    appInfo: { name: "kilntainers-dashboard", version: "0.1.0" },
    appCapabilities: { availableDisplayModes: ["inline", "fullscreen"] }
  }, 30000).then(function (result) {
    applyHostContext(result && result.hostContext);
    initialized = true;
    notify("ui/notifications/initialized", {});
    setStatus("connected");
    reportSize();
    refresh();
    timer = setInterval(function () { if (!document.hidden) refresh(); }, REFRESH_MS);
  }).catch(function (error) {
    setStatus("not connected");
    showError("could not connect to the host: " + (error instanceof Error ? error.message : String(error)));
  });
})();
`.replace("__PROTOCOL_VERSION__", protocolVersion)

const contentSecurityPolicy =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

/** The self-contained page (no external scripts, styles, fonts or images). */
export const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${contentSecurityPolicy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>kilntainers computers</title>
<style>${style}</style>
</head>
<body>${body}<script>${script}</script>
</body>
</html>
`
