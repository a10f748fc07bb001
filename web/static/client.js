// Protocol client for the specgate gateway (protocol v1, see DESIGN.md).
//
// It owns the WebSocket: authenticates with the first frame, reconnects with
// exponential backoff, and resumes in-flight answers with session.resume and
// the last seen seq, so a dropped network or a page reload continues an
// answer where it was. It knows nothing about the DOM, so it runs under
// `node --test` with a fake WebSocket.

const INFLIGHT_KEY = "specgate.inflight";

// Backoff: 0.5 s doubling to 30 s, with jitter so that many tabs do not
// reconnect in lockstep after a gateway restart.
export function backoffDelay(attempt, random = Math.random) {
  const base = Math.min(30000, 500 * 2 ** Math.min(attempt, 16));
  return Math.round(base * (0.5 + random() / 2));
}

// newRequestID returns an id matching the protocol's [A-Za-z0-9._:-]+.
// getRandomValues works outside secure contexts, unlike randomUUID.
export function newRequestID(cryptoImpl = globalThis.crypto) {
  const b = new Uint8Array(12);
  cryptoImpl.getRandomValues(b);
  return "r_" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// wsURL builds the gateway's WebSocket URL from the page location.
export function wsURL(loc) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/v1/ws`;
}

// ChatClient events (subscribe with on(type, fn)):
//   state    {state, delay?, reason?}  state: connecting | connected |
//            reconnecting | unauthorized | stopped
//   ready    the ready frame (after every (re)connect)
//   frame    every server frame, after the client's own bookkeeping
//   delta    {request, session, seq, text, full}   new text only (replays
//            of already seen seqs are dropped)
//   done     the done frame, with .session and .text (the whole answer)
//   reqerror the error frame of an in-flight request, with .session, .text
//   stalled  {request, session, text, stopped}: an in-flight answer got
//            nothing for stallMs while connected (its generation died with a
//            server), or nothing ended it within 5 s of a cancel; the client
//            stops tracking it (it does not cancel it)
//
// Refusals split in two: a bad token (unauthorized, forbidden) signs out;
// anything temporary (the error frame says temporary, code unavailable or
// over_quota, close 1013/1011/1001) reconnects with backoff and keeps the
// token.
const TEMPORARY_CODES = new Set(["unavailable", "over_quota", "queue_full", "internal"]);
const TEMPORARY_REASONS = new Set(["unavailable", "shutdown", "too_many_connections", "slow_consumer", "try_again_later"]);

export function isTemporaryRefusal(frame, close) {
  if (frame && (frame.temporary || TEMPORARY_CODES.has(frame.code))) return true;
  if (frame && (frame.code === "unauthorized" || frame.code === "forbidden")) return false;
  if (close && (close.code === 1013 || close.code === 1011 || close.code === 1001 || close.code === 1012)) return true;
  return !!close && TEMPORARY_REASONS.has(close.reason);
}

export class ChatClient {
  constructor({
    url,
    token,
    WebSocketImpl = globalThis.WebSocket,
    storage = null, // localStorage-like; persists in-flight requests
    timers = globalThis,
    random = Math.random,
    pingMs = 25000,
    // stallMs: how long a started answer may be silent while connected
    // before the client gives up on it (five times that before its first
    // text: a queued request may wait long). 0: never.
    stallMs = 90000,
    now = () => Date.now(),
  }) {
    this.url = url;
    this.token = token;
    this.WebSocketImpl = WebSocketImpl;
    this.storage = storage;
    this.timers = timers;
    this.random = random;
    this.pingMs = pingMs;
    this.stallMs = stallMs;
    this.now = now;
    this.stallTimer = null;
    this.handlers = new Map();
    this.ws = null;
    this.attempt = 0;
    this.ready = false;
    this.stopped = true;
    this.queue = []; // frames waiting for ready
    this.reconnectTimer = null;
    this.pingTimer = null;
    // request id → {session, seq, text}; persisted so a reload resumes.
    this.inflight = new Map();
    this.loadInflight();
  }

  on(type, fn) {
    if (!this.handlers.has(type)) this.handlers.set(type, []);
    this.handlers.get(type).push(fn);
    return this;
  }

  emit(type, value) {
    for (const fn of this.handlers.get(type) || []) {
      try {
        fn(value);
      } catch (err) {
        // One broken handler must not stop the stream for the others.
        console.error(err);
      }
    }
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    this.timers.clearInterval(this.stallTimer);
    this.stallTimer = null;
    this.timers.clearTimeout(this.reconnectTimer);
    this.timers.clearInterval(this.pingTimer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close(1000, "bye");
    }
    this.ready = false;
    this.emit("state", { state: "stopped" });
  }

  // reconnectNow skips the backoff wait (used when the browser comes back
  // online).
  reconnectNow() {
    if (this.stopped || this.ws) return;
    this.timers.clearTimeout(this.reconnectTimer);
    this.connect();
  }

  connect() {
    this.ready = false;
    this.emit("state", { state: "connecting" });
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url);
    } catch (err) {
      this.scheduleReconnect(String(err));
      return;
    }
    this.ws = ws;
    this.authFailed = false;
    this.refusal = null;
    ws.onopen = () => ws.send(JSON.stringify({ type: "auth", token: this.token }));
    ws.onmessage = (ev) => {
      if (ws !== this.ws) return;
      // A message may carry several frames, one per line.
      for (const line of String(ev.data).split("\n")) {
        if (!line.trim()) continue;
        let frame;
        try {
          frame = JSON.parse(line);
        } catch {
          continue;
        }
        this.handleFrame(frame);
      }
    };
    ws.onclose = (ev) => {
      if (ws !== this.ws) return;
      this.ws = null;
      this.ready = false;
      this.timers.clearInterval(this.pingTimer);
      if (this.stopped) return;
      // 1008 policy violation: the gateway refused our token or origin,
      // unless what it said was temporary (storage down, shutting down).
      const temporary = isTemporaryRefusal(this.refusal, ev);
      if (!temporary && (this.authFailed || ev.code === 1008)) {
        this.stopped = true;
        this.emit("state", { state: "unauthorized", reason: this.authError || ev.reason || "sign-in refused" });
        return;
      }
      this.scheduleReconnect(this.refusal?.message || ev.reason || "");
    };
    ws.onerror = () => {}; // onclose follows and decides
  }

  scheduleReconnect(reason) {
    const delay = backoffDelay(this.attempt++, this.random);
    this.emit("state", { state: "reconnecting", delay, reason, unavailable: !!this.refusal });
    this.reconnectTimer = this.timers.setTimeout(() => this.connect(), delay);
  }

  handleFrame(f) {
    switch (f.type) {
      case "ready":
        this.ready = true;
        this.attempt = 0;
        this.emit("state", { state: "connected" });
        this.timers.clearInterval(this.pingTimer);
        this.pingTimer = this.timers.setInterval(() => this.send({ type: "ping" }), this.pingMs);
        this.emit("ready", f);
        // Every resumed answer gets a fresh stall allowance from now.
        for (const r of this.inflight.values()) r.last = this.now();
        this.watchStalls();
        // Resume answers that were streaming when we lost the connection
        // (or the page), from the last seq we saw.
        for (const [request, r] of this.inflight) {
          this.rawSend({ type: "session.resume", session: r.session, request, after: r.seq });
        }
        for (const q of this.queue.splice(0)) this.rawSend(q);
        break;
      case "delta": {
        const r = this.inflight.get(f.request);
        if (!r) break;
        // A resume may replay deltas we already have: seq makes it exact.
        if (typeof f.seq === "number" && f.seq <= r.seq) return;
        r.seq = typeof f.seq === "number" ? f.seq : r.seq + 1;
        r.text += f.text || "";
        r.last = this.now();
        this.saveSoon();
        this.emit("delta", { request: f.request, session: r.session, seq: r.seq, text: f.text || "", full: r.text });
        break;
      }
      case "done": {
        const r = this.inflight.get(f.request);
        if (r) {
          this.inflight.delete(f.request);
          this.saveInflight();
          this.emit("done", { ...f, session: r.session, text: r.text });
        }
        break;
      }
      case "error":
        if (!this.ready) {
          this.refusal = isTemporaryRefusal(f, null) ? f : null;
          if (f.code === "unauthorized" || f.code === "forbidden") {
            this.authFailed = !this.refusal;
            this.authError = f.message;
          }
        }
        if (f.request && this.inflight.has(f.request)) {
          const r = this.inflight.get(f.request);
          this.inflight.delete(f.request);
          this.saveInflight();
          this.emit("reqerror", { ...f, session: r.session, text: r.text });
        }
        break;
    }
    this.emit("frame", f);
  }

  // send queues frames until the connection is authenticated.
  send(frame) {
    if (this.ready && this.ws) {
      this.rawSend(frame);
      return;
    }
    if (frame.type === "ping") return;
    if (this.queue.length < 100) this.queue.push(frame);
  }

  rawSend(frame) {
    try {
      this.ws.send(JSON.stringify(frame));
    } catch {
      // The close handler reconnects; in-flight requests resume then.
    }
  }

  // chat starts a request and tracks it for resume. It returns the request
  // id. Chat frames are not queued while offline: the caller should only
  // offer sending when connected, and a queued message could be sent twice.
  // extra holds additional frame fields (the protocol allows adding).
  chat(session, content, params, extra = {}) {
    const request = newRequestID();
    this.inflight.set(request, { session, seq: 0, text: "", last: this.now() });
    this.saveInflight();
    this.watchStalls();
    const frame = { ...extra, type: "chat", session, request };
    if (content) frame.content = content; // a regenerate has none
    if (params && Object.keys(params).length) frame.params = params;
    this.send(frame);
    return request;
  }

  // cancel asks the server to stop a request. If nothing ends it within
  // a few seconds (its server died), the client gives up on it (stalled,
  // with stopped: true) and the UI keeps its text.
  cancel(request) {
    const r = this.inflight.get(request);
    if (r) r.stopAt = this.now();
    this.send({ type: "cancel", request });
  }

  // inflightFor returns the in-flight requests of a session (after a reload
  // the UI shows their partial text while the resume streams the rest).
  inflightFor(session) {
    const out = [];
    for (const [request, r] of this.inflight) {
      if (r.session === session) out.push({ request, session: r.session, seq: r.seq, text: r.text });
    }
    return out;
  }

  // forget drops a request (a resume that the server no longer knows).
  forget(request) {
    if (this.inflight.delete(request)) this.saveInflight();
  }

  // watchStalls checks in-flight answers once a second while any exist.
  watchStalls() {
    if (!this.stallMs || this.stallTimer || this.inflight.size === 0) return;
    this.stallTimer = this.timers.setInterval(() => this.checkStalls(), Math.min(1000, this.stallMs));
  }

  // checkStalls gives up on answers that got nothing for stallMs while
  // the socket was up: a crashed server's generation never ends, and an
  // answer must not spin forever. The text so far is kept by the UI.
  checkStalls() {
    if (this.inflight.size === 0) {
      this.timers.clearInterval(this.stallTimer);
      this.stallTimer = null;
      return;
    }
    if (!this.ready) return; // offline time is the reconnect's, not a stall
    const now = this.now();
    for (const [request, r] of [...this.inflight]) {
      const stopped = r.stopAt != null;
      const silent = stopped ? now - Math.max(r.stopAt, r.last || 0) : now - (r.last || now);
      const limit = stopped ? Math.min(this.stallMs, 5000) : r.seq > 0 ? this.stallMs : 5 * this.stallMs;
      if (silent < limit) continue;
      // No cancel: if the answer is alive after all (a very slow server),
      // it is stored, and the history shows it after a reload.
      this.inflight.delete(request);
      this.saveInflight();
      this.emit("stalled", { request, session: r.session, text: r.text, stopped });
    }
  }

  loadInflight() {
    if (!this.storage) return;
    try {
      const saved = JSON.parse(this.storage.getItem(INFLIGHT_KEY) || "{}");
      for (const [request, r] of Object.entries(saved)) {
        if (r && typeof r.session === "string" && typeof r.seq === "number" && typeof r.text === "string") {
          this.inflight.set(request, { session: r.session, seq: r.seq, text: r.text, last: 0 });
        }
      }
    } catch {
      // A corrupt entry only loses the resume.
    }
  }

  // saveSoon batches the per-delta saves: the snapshot (text and seq
  // together) may lag a little, and the resume fetches what it lacks.
  saveSoon() {
    if (!this.storage || this.saveTimer) return;
    this.saveTimer = this.timers.setTimeout(() => {
      this.saveTimer = null;
      this.saveInflight();
    }, 250);
  }

  saveInflight() {
    if (!this.storage) return;
    this.timers.clearTimeout(this.saveTimer);
    this.saveTimer = null;
    try {
      if (this.inflight.size === 0) {
        this.storage.removeItem(INFLIGHT_KEY);
      } else {
        this.storage.setItem(INFLIGHT_KEY, JSON.stringify(Object.fromEntries(this.inflight)));
      }
    } catch {
      // Storage full or disabled: resume works within the page only.
    }
  }
}
