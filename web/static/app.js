// The chat page: sign-in, the session sidebar, the message list and the
// composer, wired to ChatClient. Model and user text only ever reaches the
// page as text nodes (textContent, or markdown.js which builds nodes); this
// file never assigns HTML strings.
import { ChatClient, wsURL } from "./client.js";
import { render } from "./markdown.js";

const TOKEN_KEY = "specgate.token";
const SESSION_KEY = "specgate.session";
const SETTINGS_KEY = "specgate.settings";
// Answers the page gave up on (stalled, or stopped when the server no
// longer had them) whose text the stored history lacks: request id →
// {session, text, note}. Kept so the text survives a reload.
const ORPHANS_KEY = "specgate.orphans";
// How long a started answer may get nothing while connected before the
// page marks it interrupted (ms; client.js's default 90 s); a tuning knob,
// stored so tests can shorten it.
const STALL_KEY = "specgate.stallMs";
// The composer's unsent text, so a reload (or an outage) loses nothing.
const DRAFT_KEY = "specgate.draft";

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
  awaitingCreate: null, // {resolve, reject} while session.create is pending
  lastUser: "", // the last user message of the open session (regenerate)
  session: null, // the open session as the server last sent it
  model: null, // ready.model
  follow: true, // the message list follows new text until the user scrolls up
  replacing: new Set(), // requests that replace a turn: reload the session when they end
};

function loadOrphans() {
  try {
    const o = JSON.parse(store.get(ORPHANS_KEY) || "{}");
    return o && typeof o === "object" ? o : {};
  } catch {
    return {};
  }
}

function saveOrphan(request, session, text, note) {
  const o = loadOrphans();
  o[request] = { session, text, note };
  // Bounded: only the latest few matter.
  const keys = Object.keys(o);
  for (const k of keys.slice(0, Math.max(0, keys.length - 50))) delete o[k];
  store.set(ORPHANS_KEY, JSON.stringify(o));
}

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
  if (token !== store.get(TOKEN_KEY) && state.client) {
    // Another sign-in (perhaps another user): start from a clean page.
    state.current = null;
    store.set(SESSION_KEY, null);
    state.sessions = [];
    renderSessions();
    clearMessages();
  }
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
  store.set(ORPHANS_KEY, null);
  store.set(DRAFT_KEY, null);
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
    const secs = Math.max(1, Math.round(s.delay / 1000));
    text = s.unavailable ? `Server unavailable, retrying in ${secs} s…` : `Reconnecting in ${secs} s…`;
    box.title = s.reason || "";
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
  const stallMs = parseInt(store.get(STALL_KEY) || "", 10);
  const c = new ChatClient({ url: wsURL(location), token, storage, ...(stallMs > 0 ? { stallMs } : {}) });
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
    showModel(f.model);
    if (f.notice) showBanner(f.notice, "info");
    else if ($("banner").dataset.kind === "offline") $("banner").hidden = true;
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
  c.on("done", (d) => {
    finishBubble(d.request, d);
    if (state.replacing.delete(d.request) && d.session === state.current) {
      // The branch pager needs the server's view of the new version.
      c.send({ type: "session.get", session: d.session });
    }
  });
  c.on("stalled", (r) => {
    // The generation died with its server: keep the text, say so.
    const note = r.stopped ? "Stopped." : "Interrupted: the server stopped sending this answer.";
    saveOrphan(r.request, r.session, r.text, note);
    finishBubble(r.request, { finish_reason: r.stopped ? "cancelled" : "interrupted", text: r.text, note });
  });
  c.on("reqerror", (e) => {
    if (e.code === "not_found" && state.bubbles.has(e.request)) {
      // The server no longer runs this answer (a Stop, or a resume, of a
      // generation that died with its server): keep the text, marked.
      const note = state.bubbles.get(e.request).stopAt ? "Stopped." : "Interrupted: the server lost this answer.";
      saveOrphan(e.request, e.session, e.text, note);
      finishBubble(e.request, { finish_reason: "interrupted", text: e.text, note });
      return;
    }
    if (e.code === "expired" || e.code === "not_found") {
      // The stream log is gone but the stored reply is complete: the
      // history is the truth. (A not_found with text we have and the
      // history lacks is shown from the orphans, marked.)
      if (e.code === "not_found" && e.text) saveOrphan(e.request, e.session, e.text, "Interrupted: the server lost this answer.");
      dropBubble(e.request);
      if (e.session === state.current) c.send({ type: "session.get", session: e.session });
      return;
    }
    const b = state.bubbles.get(e.request);
    if (b && !e.text && e.code !== "internal") {
      // Refused before it started: the server did not keep the question,
      // so neither does the page; it goes back to the input to retry.
      refuseBubble(b, e);
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
        const { resolve } = state.awaitingCreate;
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
      // A refusal before ready is the connection status's to show (a
      // temporary one retries by itself).
      if (!state.client?.ready) break;
      if (state.awaitingCreate) {
        // The chat could not be created: send() reports it, once.
        const { reject } = state.awaitingCreate;
        state.awaitingCreate = null;
        reject(new Error(f.message || f.code));
        break;
      }
      if (f.reason === "busy") {
        showBanner(f.message, "error");
        break;
      }
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

function createSession(title, settings) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      state.awaitingCreate = null;
      reject(new Error("the server did not create the chat"));
    }, 15000);
    state.awaitingCreate = {
      resolve: (s) => {
        clearTimeout(timer);
        resolve(s);
      },
      reject: (e) => {
        clearTimeout(timer);
        reject(e);
      },
    };
    state.client.send({ type: "session.create", title, ...settings });
  });
}

// ---- messages ------------------------------------------------------------

function clearMessages() {
  for (const b of state.bubbles.values()) cancelAnimationFrame(b.raf);
  state.bubbles.clear();
  state.lastUser = "";
  state.session = null;
  const box = $("messages");
  box.replaceChildren($("empty-state") || el("div"));
  $("empty-state").hidden = false;
}

// noteFor says why a stored answer ended early, or "".
function noteFor(m) {
  if (m.error) return `Error: ${m.error}`;
  if (m.partial) {
    if (m.interrupted === "cancel") return "Stopped.";
    if (m.interrupted === "shutdown") return "Interrupted: the server shut down.";
    if (m.interrupted === "crash") return "Interrupted: the server running this answer stopped.";
    return "Interrupted by an error.";
  }
  if (m.finish_reason === "length") return "Stopped at the token limit.";
  return "";
}

function showHistory(s) {
  const keepScroll = state.session?.id === s.id ? $("messages").scrollTop : null;
  clearMessages();
  state.session = s;
  fillSessionSettings(s);
  const branches = new Map((s.branches || []).map((b) => [b.at, b]));
  const stored = new Set();
  const orphans = loadOrphans();
  const msgs = s.messages || [];
  msgs.forEach((m, i) => {
    if (m.role === "assistant") {
      // A stored answer has ended: it is not tracked as streaming (that
      // would offer Stop instead of Send).
      const b = addAssistantBubble(m.request || "", m.content, false);
      if (m.request) stored.add(m.request);
      b.article.dataset.state = m.error || (m.partial && m.interrupted !== "cancel") ? "error" : m.partial ? "cancelled" : "done";
      const note = noteFor(m);
      if (note) addNote(b, note);
      addActions(b, { stats: m.stats, usage: m.usage });
      return;
    }
    addMessage(m.role, m.content, { request: m.request, index: i, branch: branches.get(i) });
    // A question whose answer the server never stored: show what this
    // page had of it, marked, unless it is still streaming.
    const next = msgs[i + 1];
    const o = m.request && orphans[m.request];
    if (m.role === "user" && (!next || next.role !== "assistant") && o && !state.client?.inflight.has(m.request)) {
      const b = addAssistantBubble(m.request, o.text, false);
      b.article.dataset.state = "interrupted";
      addNote(b, o.note);
      addActions(b);
    }
  });
  // Answers still streaming (after a reload or reconnect): show what we
  // have; the client's resume streams the rest into these bubbles.
  // One that ended meanwhile is in the history already; its resume only
  // brings the done frame.
  for (const r of state.client?.inflightFor(s.id) || []) {
    if (!state.bubbles.has(r.request) && !stored.has(r.request)) addAssistantBubble(r.request, r.text);
  }
  updateComposer();
  if (keepScroll != null && !streaming()) $("messages").scrollTop = keepScroll;
  else scrollToEnd(true);
}

function addMessage(role, content, info = {}) {
  $("empty-state").hidden = true;
  const article = el("article", { class: "msg", "data-role": role, "data-testid": "message" });
  if (info.request) article.dataset.request = info.request;
  const body = el("div", { class: "msg-body", "data-testid": "message-body" });
  body.textContent = content; // user text is shown exactly as typed
  article.append(body);
  if (role === "user") {
    const meta = el("footer", { class: "msg-meta user-meta" });
    if (info.branch && info.branch.count > 1) meta.append(branchPager(info.branch));
    const edit = el("button", { type: "button", "data-testid": "edit", text: "Edit" });
    edit.addEventListener("click", () => startEdit(article, content));
    meta.append(edit);
    article.append(meta);
  }
  $("messages").append(article);
  if (role === "user") state.lastUser = content;
  scrollToEnd(role === "user");
  return article;
}

// branchPager pages through the versions of a regenerated or edited turn.
function branchPager(br) {
  const pager = el("span", { class: "branch-pager", "data-testid": "branch-pager" });
  const go = (k) => {
    if (streaming() || !state.client?.ready) return;
    state.client.send({ type: "session.branch", session: state.current, request: br.request, branch: k });
  };
  const prev = el("button", { type: "button", "data-testid": "branch-prev", "aria-label": "Previous version", text: "‹" });
  const next = el("button", { type: "button", "data-testid": "branch-next", "aria-label": "Next version", text: "›" });
  // data-edge marks a button with no version on its side; the others are
  // only disabled while an answer streams (updateComposer).
  prev.dataset.edge = String(br.current <= 0);
  next.dataset.edge = String(br.current >= br.count - 1);
  prev.disabled = br.current <= 0 || streaming();
  next.disabled = br.current >= br.count - 1 || streaming();
  prev.addEventListener("click", () => go(br.current - 1));
  next.addEventListener("click", () => go(br.current + 1));
  pager.append(prev, el("span", { "data-testid": "branch-label", text: `${br.current + 1}/${br.count}` }), next);
  return pager;
}

// startEdit turns a question into an editor; sending it replaces that
// turn and what follows, which stay reachable through the pager.
function startEdit(article, content) {
  const request = article.dataset.request;
  if (!request || streaming() || article.querySelector("textarea")) return;
  const box = el("textarea", { class: "edit-input", "data-testid": "edit-input", "aria-label": "Edit message", rows: "3" });
  box.value = content;
  const save = el("button", { type: "button", class: "primary small", "data-testid": "edit-send", text: "Send" });
  const cancel = el("button", { type: "button", class: "ghost small", "data-testid": "edit-cancel", text: "Cancel" });
  const form = el("div", { class: "edit-form" }, box, el("div", { class: "edit-actions" }, cancel, save));
  const body = article.querySelector(".msg-body");
  const meta = article.querySelector(".msg-meta");
  body.hidden = true;
  if (meta) meta.hidden = true;
  article.append(form);
  box.focus();
  cancel.addEventListener("click", () => {
    form.remove();
    body.hidden = false;
    if (meta) meta.hidden = false;
  });
  const submit = () => {
    const text = box.value;
    if (!text.trim() || !state.client?.ready || streaming()) return;
    let params;
    try {
      params = readSettings();
    } catch {
      return;
    }
    // The edited turn and everything after it leave the page; the server
    // keeps them as the previous version.
    let n = article;
    while (n) {
      const next = n.nextElementSibling;
      n.remove();
      n = next;
    }
    for (const [r, b] of state.bubbles) if (!b.article.isConnected) state.bubbles.delete(r);
    const user = addMessage("user", text);
    const req = state.client.chat(state.current, text, params, { replace: request });
    state.replacing.add(req);
    const b = addAssistantBubble(req, "");
    b.user = user;
    b.content = text;
  };
  save.addEventListener("click", submit);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
    if (e.key === "Escape") cancel.click();
  });
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
  const b = { article, body, text, raf: 0, request };
  if (request && tracked) state.bubbles.set(request, b);
  renderBody(b);
  updateComposer();
  scrollToEnd(false);
  return b;
}

// renderBody renders an answer's Markdown and gives each code block a
// copy button.
function renderBody(b) {
  b.body.replaceChildren(render(b.text));
  for (const pre of b.body.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    const btn = el("button", { type: "button", class: "code-copy", "data-testid": "code-copy", "aria-label": "Copy code", text: "Copy" });
    btn.addEventListener("click", () => copyText(code ? code.textContent : "", btn));
    pre.append(btn);
  }
}

// copyText copies text, with a fallback for pages where the async
// clipboard is refused (no permission, not focused).
async function copyText(text, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const ta = el("textarea", { class: "visually-hidden", "aria-hidden": "true" });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    ta.remove();
  }
  btn.textContent = ok ? "Copied" : "Copy failed";
  btn.dataset.copied = String(ok);
  setTimeout(() => (btn.textContent = "Copy"), 1500);
}

// scheduleRender re-renders a streaming answer at most once per frame.
function scheduleRender(b) {
  if (b.raf) return;
  b.raf = requestAnimationFrame(() => {
    b.raf = 0;
    renderBody(b);
    scrollToEnd(false);
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

// refuseBubble undoes a refused request on the page: its question goes
// back to the input and the error is said once, in the banner.
function refuseBubble(b, e) {
  cancelAnimationFrame(b.raf);
  state.bubbles.delete(b.request);
  state.replacing.delete(b.request);
  b.article.remove();
  b.user?.remove();
  const input = $("message-input");
  if (!input.value.trim() && b.content) {
    input.value = b.content;
    store.set(DRAFT_KEY, b.content);
    autosize();
  }
  showBanner(`Not sent: ${e.message || e.code}${e.temporary ? " Try again in a moment." : ""}`, "error");
  // A refused regenerate or edit left the old version live on the server.
  if (state.current) state.client?.send({ type: "session.get", session: state.current });
  updateComposer();
}

function finishBubble(request, d) {
  const b = state.bubbles.get(request);
  if (!b) return;
  state.bubbles.delete(request);
  cancelAnimationFrame(b.raf);
  if (typeof d.text === "string") b.text = d.text;
  renderBody(b);
  const reason = d.finish_reason || "stop";
  b.article.dataset.state =
    reason === "error" ? "error" : reason === "cancelled" ? "cancelled" : reason === "interrupted" ? "interrupted" : "done";
  b.article.dataset.finish = reason;
  if (d.note) addNote(b, d.note);
  else if (d.error) addNote(b, `Error: ${d.error.message || d.error.code}`);
  else if (reason === "cancelled") addNote(b, "Stopped.");
  else if (reason === "error") addNote(b, "Interrupted by an error.");
  else if (reason === "length") addNote(b, "Stopped at the token limit.");
  addActions(b, d);
  updateComposer();
  scrollToEnd(false);
}

function addNote(b, text) {
  b.article.querySelector(".msg-note")?.remove();
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
  // Draft tokens the model verified, and how many of them it kept.
  if (s.drafted_tokens > 0) parts.push(`${s.accepted_tokens || 0} of ${s.drafted_tokens} drafts accepted`);
  if (s.queue_ms) parts.push(`queued ${Math.round(s.queue_ms)} ms`);
  if (u.prompt_tokens != null) parts.push(`${u.prompt_tokens} prompt${u.cached_tokens ? ` (${u.cached_tokens} cached)` : ""}`);
  if (u.completion_tokens != null) parts.push(`${u.completion_tokens} generated`);
  return parts.join(" · ");
}

function addActions(b, d = {}) {
  b.article.querySelector(".msg-meta")?.remove();
  const meta = el("footer", { class: "msg-meta" });
  const copy = el("button", { type: "button", "data-testid": "copy", text: "Copy" });
  copy.addEventListener("click", () => copyText(b.text, copy));
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

// scrollToEnd follows new text while the user has not scrolled up. The
// jump is instant: a smooth scroll lags behind a fast answer, and a check
// of "near the bottom" taken mid-animation would stop following it.
function scrollToEnd(force) {
  const m = $("messages");
  if (force) state.follow = true;
  if (state.follow) m.scrollTo({ top: m.scrollHeight, behavior: "instant" });
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
    if (r) r.hidden = busy || i !== answers.length - 1 || !a.dataset.request;
  });
  for (const e of $("messages").querySelectorAll('[data-testid="edit"], .branch-pager button')) {
    e.disabled = busy || e.dataset.edge === "true";
  }
}

const PARAM_FIELDS = ["set-temperature", "set-top-p", "set-max-tokens", "set-seed", "set-priority", "set-schema"];

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

// Settings are the page's defaults (localStorage) and, once a chat
// exists, that chat's own (stored with the session on the server).
function saveSettings() {
  store.set(SETTINGS_KEY, JSON.stringify(Object.fromEntries(PARAM_FIELDS.map((id) => [id, $(id).value]))));
  if (!state.current || !state.client?.ready) return;
  let params;
  try {
    params = readSettings();
  } catch {
    return;
  }
  state.client.send({ type: "session.update", session: state.current, system: $("set-system").value, params });
}

function loadSettings() {
  try {
    const saved = JSON.parse(store.get(SETTINGS_KEY) || "{}");
    for (const [id, v] of Object.entries(saved)) if ($(id) && typeof v === "string") $(id).value = v;
  } catch {
    // Ignore a corrupt entry.
  }
}

// fillSessionSettings shows an opened chat's own system prompt and
// parameters.
function fillSessionSettings(s) {
  if (document.activeElement?.closest?.("#settings")) return; // being edited
  $("set-system").value = s.system || "";
  $("settings-summary-system").hidden = !s.system;
  const p = s.params;
  if (!p) return;
  const set = (id, v) => ($(id).value = v == null ? "" : String(v));
  set("set-temperature", p.temperature);
  set("set-top-p", p.top_p);
  set("set-max-tokens", p.max_tokens);
  set("set-seed", p.seed);
  $("set-priority").value = p.priority || "";
  $("set-schema").value = p.schema ? JSON.stringify(p.schema) : "";

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
  // The input keeps the text until the chat exists: a failure to create
  // one loses nothing.
  if (!state.current) {
    try {
      const settings = { params };
      const system = $("set-system").value;
      if (system.trim()) settings.system = system;
      const s = await createSession(content.trim().split("\n")[0].slice(0, 60), settings);
      state.current = s.id;
      state.session = s;
      store.set(SESSION_KEY, s.id);
      renderSessions();
    } catch (e) {
      showBanner(`Could not start a chat: ${e.message}`, "error");
      updateComposer();
      return;
    }
  }
  if (input.value === content) input.value = "";
  store.set(DRAFT_KEY, input.value || null);
  if ($("banner").dataset.kind === "error") $("banner").hidden = true; // this one went out
  autosize();
  const user = addMessage("user", content);
  const request = state.client.chat(state.current, content, params);
  user.dataset.request = request;
  const b = addAssistantBubble(request, "");
  b.user = user;
  b.content = content;
}

// regenerate asks the server to answer the last question again: the old
// answer stays as the previous version of that turn.
function regenerate(b) {
  if (!b.request || !state.client?.ready || streaming()) return;
  let params;
  try {
    params = readSettings();
  } catch {
    return;
  }
  b.article.remove();
  const request = state.client.chat(state.current, "", params, { replace: b.request });
  state.replacing.add(request);
  addAssistantBubble(request, "");
}

// stop cancels the streaming answers. One the server no longer runs (its
// generation died) ends here, keeping its text.
function stop() {
  for (const [request, b] of state.bubbles) {
    if (!b.article.isConnected) continue;
    state.client?.cancel(request);
    b.stopAt = Date.now();
  }
}

// ---- chrome --------------------------------------------------------------

// showModel names the served model in the top bar.
function showModel(m) {
  state.model = m || null;
  const box = $("model-info");
  if (!m || !m.name) {
    box.hidden = true;
    return;
  }
  const detail = [m.arch, m.quantization, m.context ? `${m.context} ctx` : "", m.demo ? "demo" : ""].filter(Boolean).join(" · ");
  box.querySelector(".model-name").textContent = m.name;
  box.querySelector(".model-detail").textContent = detail;
  box.title = [m.name, detail].filter(Boolean).join(" · ");
  box.hidden = false;
}

function showBanner(text, kind) {
  $("banner-text").textContent = text;
  $("banner").dataset.kind = kind;
  $("banner").hidden = false;
}

function autosize() {
  const t = $("message-input");
  t.style.height = "auto";
  // While the chat view is hidden (sign-in screen) scrollHeight is 0, and
  // a height of 0px would leave the box too small to show its own text
  // once the view appears; rows="1" sizes it until the next input.
  if (t.scrollHeight === 0) return;
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
    store.set(DRAFT_KEY, input.value || null);
  });
  input.value = store.get(DRAFT_KEY) || "";
  autosize();
  $("stop-button").addEventListener("click", stop);
  $("banner-close").addEventListener("click", () => ($("banner").hidden = true));
  $("sidebar-toggle").addEventListener("click", () => ($("app").dataset.sidebar === "open" ? closeSidebar() : openSidebar()));
  $("backdrop").addEventListener("click", closeSidebar);
  $("settings").addEventListener("change", saveSettings);
  $("set-system").addEventListener("input", () => ($("settings-summary-system").hidden = !$("set-system").value.trim()));
  window.addEventListener("online", () => state.client?.reconnectNow());
  // A sign-in link pasted into a tab that already shows the app.
  window.addEventListener("hashchange", () => {
    const t = tokenFromHash();
    if (t) signIn(t);
  });
  // Following stops when the user scrolls up, and resumes at the bottom.
  const msgs = $("messages");
  const userScrolledUp = () => {
    if (!nearBottom()) state.follow = false;
  };
  msgs.addEventListener("wheel", (e) => {
    if (e.deltaY < 0) state.follow = false;
  }, { passive: true });
  msgs.addEventListener("touchmove", () => requestAnimationFrame(userScrolledUp), { passive: true });
  msgs.addEventListener("keydown", (e) => {
    if (["PageUp", "ArrowUp", "Home"].includes(e.key)) state.follow = false;
  });
  msgs.addEventListener("scroll", () => {
    if (nearBottom()) state.follow = true;
  }, { passive: true });
  loadSettings();

  const token = tokenFromHash() || store.get(TOKEN_KEY);
  if (token) signIn(token);
  else showSignin("");
}

init();
