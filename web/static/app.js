// The chat page: sign-in, the session sidebar, the message list and the
// composer, wired to ChatClient. Model and user text only ever reaches the
// page as text nodes (textContent, or markdown.js which builds nodes); this
// file never assigns HTML strings.
import { ChatClient, wsURL } from "./client.js";
import { render } from "./markdown.js";

const TOKEN_KEY = "specgate.token";
const SESSION_KEY = "specgate.session";
const SETTINGS_KEY = "specgate.settings";

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
};

const store = {
  get(k) {
    try {
      return localStorage.getItem(k);
    } catch {
      return null;
    }
  },
  set(k, v) {
    try {
      if (v == null) localStorage.removeItem(k);
      else localStorage.setItem(k, v);
    } catch {
      // Private mode or full: the page still works, without memory.
    }
  },
};

const state = {
  client: null,
  sessions: [], // SessionInfo from the server
  current: store.get(SESSION_KEY), // open session id, or null
  bubbles: new Map(), // request id → {article, body, text, raf}
  awaitingCreate: null, // resolve function while session.create is pending
  lastUser: "", // the last user message of the open session (regenerate)
};

// ---- sign-in -------------------------------------------------------------

function tokenFromHash() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (!m) return null;
  // Take the token out of the address bar (and history) once read.
  history.replaceState(null, "", location.pathname + location.search);
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return null;
  }
}

function showSignin(message) {
  $("app").hidden = true;
  $("signin").hidden = false;
  const err = $("signin-error");
  err.textContent = message || "";
  err.hidden = !message;
  $("token-input").focus();
}

function signIn(token) {
  token = token.trim();
  if (!token) return;
  store.set(TOKEN_KEY, token);
  $("signin").hidden = true;
  $("app").hidden = false;
  connect(token);
}

function signOut() {
  state.client?.stop();
  state.client = null;
  store.set(TOKEN_KEY, null);
  store.set(SESSION_KEY, null);
  store.set("specgate.inflight", null);
  state.current = null;
  state.sessions = [];
  renderSessions();
  clearMessages();
  showSignin("");
}

// ---- connection ----------------------------------------------------------

const STATUS_TEXT = {
  connecting: "Connecting…",
  connected: "Connected",
  unauthorized: "Signed out",
  stopped: "Offline",
};

function setStatus(s) {
  const box = $("conn-status");
  box.dataset.state = s.state;
  let text = STATUS_TEXT[s.state] || s.state;
  if (s.state === "reconnecting") {
    text = `Reconnecting in ${Math.max(1, Math.round(s.delay / 1000))} s…`;
  }
  box.querySelector(".conn-text").textContent = text;
  updateComposer();
}

function connect(token) {
  state.client?.stop();
  let storage = null;
  try {
    storage = window.localStorage;
  } catch {
    // Storage disabled: no resume across reloads, the rest works.
  }
  const c = new ChatClient({ url: wsURL(location), token, storage });
  state.client = c;
  c.on("state", (s) => {
    setStatus(s);
    if (s.state === "unauthorized") {
      store.set(TOKEN_KEY, null);
      showSignin(`Sign-in refused: ${s.reason}. Paste a valid token.`);
    }
  });
  c.on("ready", (f) => {
    $("whoami").textContent = [f.user, f.tenant].filter(Boolean).join(" · ");
    $("whoami").title = $("whoami").textContent;
    if (f.notice) showBanner(f.notice, "info");
    c.send({ type: "session.list" });
    if (state.current) c.send({ type: "session.get", session: state.current });
  });
  c.on("frame", onFrame);
  c.on("delta", (d) => {
    const b = state.bubbles.get(d.request) || (d.session === state.current ? addAssistantBubble(d.request, "") : null);
    if (b) {
      b.text = d.full;
      scheduleRender(b);
    }
  });
  c.on("done", (d) => finishBubble(d.request, d));
  c.on("reqerror", (e) => {
    if (e.code === "expired" || e.code === "not_found") {
      // The server no longer has this answer's stream; its stored history
      // is the truth.
      dropBubble(e.request);
      if (e.session === state.current) c.send({ type: "session.get", session: e.session });
      return;
    }
    finishBubble(e.request, { finish_reason: "error", error: e });
  });
  c.start();
}

function onFrame(f) {
  switch (f.type) {
    case "sessions":
      // The list may be a page of the most recent chats, so an open chat
      // missing from it is not gone; session.get's not_found says that.
      state.sessions = f.sessions || [];
      renderSessions();
      break;
    case "session": {
      const s = f.session;
      if (!s) break;
      upsertSession(s);
      if (state.awaitingCreate) {
        const resolve = state.awaitingCreate;
        state.awaitingCreate = null;
        resolve(s);
        break;
      }
      if (s.id === state.current) showHistory(s);
      break;
    }
    case "session.deleted": {
      const id = f.session_id || f.session?.id;
      state.sessions = state.sessions.filter((s) => s.id !== id);
      renderSessions();
      if (id === state.current) openSession(null);
      break;
    }
    case "error":
      if (f.request) break; // handled per request
      if (f.code === "not_found" && state.current) {
        openSession(null);
        state.client.send({ type: "session.list" });
      }
      if (f.code !== "unauthorized") showBanner(f.message || f.code, "error");
      break;
  }
}

// ---- sessions ------------------------------------------------------------

function upsertSession(s) {
  const info = { id: s.id, title: s.title, updated: s.updated, created: s.created };
  const i = state.sessions.findIndex((x) => x.id === s.id);
  if (i >= 0) state.sessions[i] = { ...state.sessions[i], ...info };
  else state.sessions.unshift(info);
  renderSessions();
}

function sessionTitle(s) {
  return (s && s.title) || "New chat";
}

function renderSessions() {
  const list = $("session-list");
  list.replaceChildren(
    ...state.sessions.map((s) => {
      const li = el("li", { class: "session-item", "data-testid": "session-item", "data-session-id": s.id });
      if (s.id === state.current) li.setAttribute("aria-current", "true");
      const open = el("button", { class: "session-open", type: "button", "data-testid": "session-open", text: sessionTitle(s), title: sessionTitle(s) });
      open.addEventListener("click", () => {
        openSession(s.id);
        closeSidebar();
      });
      const rename = el("button", { type: "button", "data-testid": "session-rename", "aria-label": `Rename ${sessionTitle(s)}`, text: "Rename" });
      rename.addEventListener("click", () => startRename(li, s));
      const del = el("button", { type: "button", "data-testid": "session-delete", "aria-label": `Delete ${sessionTitle(s)}`, text: "Delete" });
      del.addEventListener("click", () => confirmDelete(del, s));
      li.append(open, el("span", { class: "session-actions" }, rename, del));
      return li;
    }),
  );
  $("session-empty").hidden = state.sessions.length > 0;
  const cur = state.sessions.find((s) => s.id === state.current);
  $("session-title").textContent = state.current ? sessionTitle(cur) : "New chat";
}

function startRename(li, s) {
  const input = el("input", { class: "session-rename", "data-testid": "session-rename-input", "aria-label": "Chat title", maxlength: "200" });
  input.value = s.title || "";
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (save && title && title !== s.title) {
      s.title = title; // optimistic; the server's session frame confirms
      state.client.send({ type: "session.rename", session: s.id, title });
    }
    renderSessions();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

// confirmDelete asks for a second click instead of a modal dialog, which
// keeps the flow keyboard- and automation-friendly.
function confirmDelete(btn, s) {
  if (btn.dataset.confirm === "true") {
    state.client.send({ type: "session.delete", session: s.id });
    state.sessions = state.sessions.filter((x) => x.id !== s.id);
    if (s.id === state.current) openSession(null);
    renderSessions();
    return;
  }
  btn.dataset.confirm = "true";
  btn.textContent = "Confirm";
  setTimeout(() => {
    btn.dataset.confirm = "false";
    btn.textContent = "Delete";
  }, 3000);
}

function openSession(id) {
  if (id === state.current && id) return;
  state.current = id;
  store.set(SESSION_KEY, id);
  clearMessages();
  renderSessions();
  if (id) state.client?.send({ type: "session.get", session: id });
  updateComposer();
  $("message-input").focus();
}

function createSession(title) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      state.awaitingCreate = null;
      reject(new Error("the server did not create the chat"));
    }, 15000);
    state.awaitingCreate = (s) => {
      clearTimeout(timer);
      resolve(s);
    };
    state.client.send({ type: "session.create", title });
  });
}

// ---- messages ------------------------------------------------------------

function clearMessages() {
  for (const b of state.bubbles.values()) cancelAnimationFrame(b.raf);
  state.bubbles.clear();
  state.lastUser = "";
  const box = $("messages");
  box.replaceChildren($("empty-state") || el("div"));
  $("empty-state").hidden = false;
}

function showHistory(s) {
  clearMessages();
  const stored = new Set();
  for (const m of s.messages || []) {
    if (m.role === "assistant") {
      // A stored answer has ended: it is not tracked as streaming (that
      // would offer Stop instead of Send).
      const b = addAssistantBubble(m.request || "", m.content, false);
      if (m.request) stored.add(m.request);
      b.article.dataset.state = m.partial ? "cancelled" : "done";
      if (m.partial) addNote(b, m.interrupted === "error" ? "Interrupted by an error." : "Stopped.");
      addActions(b);
    } else {
      addMessage(m.role, m.content);
    }
  }
  // Answers still streaming (after a reload or reconnect): show what we
  // have; the client's resume streams the rest into these bubbles.
  // One that ended meanwhile is in the history already; its resume only
  // brings the done frame.
  for (const r of state.client?.inflightFor(s.id) || []) {
    if (!state.bubbles.has(r.request) && !stored.has(r.request)) addAssistantBubble(r.request, r.text);
  }
  updateComposer();
  scrollToEnd(true);
}

function addMessage(role, content) {
  $("empty-state").hidden = true;
  const article = el("article", { class: "msg", "data-role": role, "data-testid": "message" });
  const body = el("div", { class: "msg-body", "data-testid": "message-body" });
  body.textContent = content; // user text is shown exactly as typed
  article.append(body);
  $("messages").append(article);
  if (role === "user") state.lastUser = content;
  scrollToEnd(role === "user");
  return article;
}

// addAssistantBubble shows an answer; a tracked one (streaming) receives
// deltas and its done frame by request id.
function addAssistantBubble(request, text, tracked = true) {
  $("empty-state").hidden = true;
  const article = el("article", { class: "msg", "data-role": "assistant", "data-testid": "message", "data-state": "streaming" });
  if (request) article.dataset.request = request;
  const body = el("div", { class: "msg-body", "data-testid": "message-body" });
  article.append(body);
  $("messages").append(article);
  const b = { article, body, text, raf: 0 };
  if (request && tracked) state.bubbles.set(request, b);
  body.replaceChildren(render(text));
  updateComposer();
  scrollToEnd(false);
  return b;
}

// scheduleRender re-renders a streaming answer at most once per frame.
function scheduleRender(b) {
  if (b.raf) return;
  b.raf = requestAnimationFrame(() => {
    b.raf = 0;
    const stick = nearBottom();
    b.body.replaceChildren(render(b.text));
    if (stick) scrollToEnd(false);
  });
}

function dropBubble(request) {
  const b = state.bubbles.get(request);
  if (!b) return;
  cancelAnimationFrame(b.raf);
  b.article.remove();
  state.bubbles.delete(request);
  updateComposer();
}

function finishBubble(request, d) {
  const b = state.bubbles.get(request);
  if (!b) return;
  state.bubbles.delete(request);
  cancelAnimationFrame(b.raf);
  if (typeof d.text === "string") b.text = d.text;
  b.body.replaceChildren(render(b.text));
  const reason = d.finish_reason || "stop";
  b.article.dataset.state = reason === "error" ? "error" : reason === "cancelled" ? "cancelled" : "done";
  b.article.dataset.finish = reason;
  if (d.error) addNote(b, `Error: ${d.error.message || d.error.code}`);
  else if (reason === "cancelled") addNote(b, "Stopped.");
  else if (reason === "length") addNote(b, "Stopped at the token limit.");
  addActions(b, d);
  updateComposer();
}

function addNote(b, text) {
  b.article.append(el("div", { class: "msg-note", "data-testid": "message-note", text }));
}

function statsText(d) {
  const parts = [];
  const s = d.stats || {};
  const u = d.usage || {};
  if (s.ttft_ms != null) parts.push(`TTFT ${Math.round(s.ttft_ms)} ms`);
  if (s.tokens_per_s) parts.push(`${s.tokens_per_s.toFixed(1)} tok/s`);
  // One token per step is plain decoding: only more says speculation paid.
  if (s.accepted_per_step > 1) parts.push(`${s.accepted_per_step.toFixed(2)} tokens/step (speculative)`);
  if (s.queue_ms) parts.push(`queued ${Math.round(s.queue_ms)} ms`);
  if (u.prompt_tokens != null) parts.push(`${u.prompt_tokens} prompt${u.cached_tokens ? ` (${u.cached_tokens} cached)` : ""}`);
  if (u.completion_tokens != null) parts.push(`${u.completion_tokens} generated`);
  return parts.join(" · ");
}

function addActions(b, d = {}) {
  b.article.querySelector(".msg-meta")?.remove();
  const meta = el("footer", { class: "msg-meta" });
  const copy = el("button", { type: "button", "data-testid": "copy", text: "Copy" });
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(b.text);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = "Copy failed";
    }
    setTimeout(() => (copy.textContent = "Copy"), 1500);
  });
  const regen = el("button", { type: "button", "data-testid": "regenerate", text: "Regenerate" });
  regen.addEventListener("click", () => regenerate(b));
  meta.append(copy, regen);
  const stats = statsText(d);
  if (stats) {
    const s = el("span", { class: "msg-stats", "data-testid": "message-stats", tabindex: "0", text: stats });
    s.title = stats;
    meta.append(s);
  }
  b.article.append(meta);
}

function nearBottom() {
  const m = $("messages");
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

function scrollToEnd(force) {
  const m = $("messages");
  if (force || nearBottom()) m.scrollTop = m.scrollHeight;
}

// ---- sending -------------------------------------------------------------

function streaming() {
  for (const b of state.bubbles.values()) if (b.article.isConnected) return true;
  return false;
}

function updateComposer() {
  const connected = state.client?.ready === true;
  const busy = streaming();
  $("send-button").hidden = busy;
  $("stop-button").hidden = !busy;
  $("send-button").disabled = !connected || !$("message-input").value.trim();
  $("messages").setAttribute("aria-busy", String(busy));
  // The last answer alone offers regenerate, and only when idle.
  const answers = $("messages").querySelectorAll('.msg[data-role="assistant"]');
  answers.forEach((a, i) => {
    const r = a.querySelector('[data-testid="regenerate"]');
    if (r) r.hidden = busy || i !== answers.length - 1 || !state.lastUser;
  });
}

function readSettings() {
  const num = (id, int) => {
    const v = $(id).value.trim();
    if (v === "") return undefined;
    const n = int ? parseInt(v, 10) : parseFloat(v);
    return Number.isFinite(n) && n >= 0 ? n : undefined;
  };
  const p = {
    temperature: num("set-temperature"),
    top_p: num("set-top-p"),
    max_tokens: num("set-max-tokens", true),
    seed: num("set-seed", true),
    priority: $("set-priority").value || undefined,
  };
  const schema = $("set-schema").value.trim();
  const err = $("settings-error");
  err.hidden = true;
  if (schema) {
    try {
      p.schema = JSON.parse(schema);
    } catch (e) {
      err.textContent = `The JSON schema does not parse: ${e.message}`;
      err.hidden = false;
      $("settings").open = true;
      throw e;
    }
  }
  for (const k of Object.keys(p)) if (p[k] === undefined) delete p[k];
  return p;
}

function saveSettings() {
  const ids = ["set-temperature", "set-top-p", "set-max-tokens", "set-seed", "set-priority", "set-schema"];
  store.set(SETTINGS_KEY, JSON.stringify(Object.fromEntries(ids.map((id) => [id, $(id).value]))));
}

function loadSettings() {
  try {
    const saved = JSON.parse(store.get(SETTINGS_KEY) || "{}");
    for (const [id, v] of Object.entries(saved)) if ($(id) && typeof v === "string") $(id).value = v;
  } catch {
    // Ignore a corrupt entry.
  }
}

async function send() {
  const input = $("message-input");
  const content = input.value;
  if (!content.trim() || !state.client?.ready || streaming()) return;
  let params;
  try {
    params = readSettings();
  } catch {
    return;
  }
  input.value = "";
  autosize();
  updateComposer();
  try {
    if (!state.current) {
      const s = await createSession(content.trim().split("\n")[0].slice(0, 60));
      state.current = s.id;
      store.set(SESSION_KEY, s.id);
      renderSessions();
    }
  } catch (e) {
    input.value = content;
    showBanner(`Could not start a chat: ${e.message}`, "error");
    updateComposer();
    return;
  }
  addMessage("user", content);
  const request = state.client.chat(state.current, content, params);
  addAssistantBubble(request, "");
}

// regenerate asks again with the last user message. The frame carries
// "regenerate": true so a gateway that supports it can replace the last
// answer instead of appending the question twice.
function regenerate(b) {
  if (!state.lastUser || !state.client?.ready || streaming()) return;
  let params;
  try {
    params = readSettings();
  } catch {
    return;
  }
  b.article.remove();
  const request = state.client.chat(state.current, state.lastUser, params, { regenerate: true });
  addAssistantBubble(request, "");
}

function stop() {
  for (const [request, b] of state.bubbles) {
    if (b.article.isConnected) state.client?.cancel(request);
  }
}

// ---- chrome --------------------------------------------------------------

function showBanner(text, kind) {
  $("banner-text").textContent = text;
  $("banner").dataset.kind = kind;
  $("banner").hidden = false;
}

function autosize() {
  const t = $("message-input");
  t.style.height = "auto";
  t.style.height = Math.min(t.scrollHeight, window.innerHeight * 0.4) + "px";
}

function openSidebar() {
  $("app").dataset.sidebar = "open";
  $("backdrop").hidden = false;
  $("sidebar-toggle").setAttribute("aria-expanded", "true");
}

function closeSidebar() {
  delete $("app").dataset.sidebar;
  $("backdrop").hidden = true;
  $("sidebar-toggle").setAttribute("aria-expanded", "false");
}

function init() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    signIn($("token-input").value);
  });
  $("signout").addEventListener("click", signOut);
  $("new-session").addEventListener("click", () => {
    openSession(null);
    closeSidebar();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  const input = $("message-input");
  input.addEventListener("keydown", (e) => {
    // Enter sends, Shift+Enter is a newline; an IME composition is not
    // a send.
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
    if (e.key === "Escape" && streaming()) stop();
  });
  input.addEventListener("input", () => {
    autosize();
    updateComposer();
  });
  $("stop-button").addEventListener("click", stop);
  $("banner-close").addEventListener("click", () => ($("banner").hidden = true));
  $("sidebar-toggle").addEventListener("click", () => ($("app").dataset.sidebar === "open" ? closeSidebar() : openSidebar()));
  $("backdrop").addEventListener("click", closeSidebar);
  $("settings").addEventListener("change", saveSettings);
  window.addEventListener("online", () => state.client?.reconnectNow());
  loadSettings();

  const token = tokenFromHash() || store.get(TOKEN_KEY);
  if (token) signIn(token);
  else showSignin("");
}

init();
