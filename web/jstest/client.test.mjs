// Unit tests of the protocol client with a fake WebSocket and fake timers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ChatClient, backoffDelay, newRequestID, wsURL, isTemporaryRefusal } from "../static/client.js";

class FakeSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    this.closed = false;
    FakeSocket.all.push(this);
  }
  send(s) {
    this.sent.push(JSON.parse(s));
  }
  close() {
    this.closed = true;
  }
  // test helpers
  open() {
    this.onopen?.();
  }
  recv(...frames) {
    this.onmessage?.({ data: frames.map((f) => JSON.stringify(f)).join("\n") });
  }
  drop(code = 1006, reason = "") {
    this.onclose?.({ code, reason });
  }
}

function fakeTimers() {
  const t = { pending: [], id: 0 };
  t.setTimeout = (fn, ms) => (t.pending.push({ id: ++t.id, fn, ms }), t.id);
  t.clearTimeout = (id) => (t.pending = t.pending.filter((p) => p.id !== id));
  t.setInterval = () => 0;
  t.clearInterval = () => {};
  t.runNext = () => {
    const p = t.pending.shift();
    p.fn();
    return p.ms;
  };
  return t;
}

function memStorage() {
  const m = new Map();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k) };
}

function setup(storage = memStorage()) {
  FakeSocket.all = [];
  const timers = fakeTimers();
  const c = new ChatClient({ url: "ws://h/v1/ws", token: "tok", WebSocketImpl: FakeSocket, storage, timers, random: () => 1 });
  const states = [];
  c.on("state", (s) => states.push(s.state));
  return { c, timers, states, storage, sock: () => FakeSocket.all.at(-1) };
}

test("authenticates first and queues frames until ready", () => {
  const { c, sock, states } = setup();
  c.start();
  c.send({ type: "session.list" });
  sock().open();
  assert.deepEqual(sock().sent, [{ type: "auth", token: "tok" }]);
  sock().recv({ type: "ready", tenant: "t", user: "u", protocol: 1 });
  assert.deepEqual(sock().sent.at(-1), { type: "session.list" });
  assert.deepEqual(states, ["connecting", "connected"]);
});

test("streams deltas, drops replays, resumes after a drop with the last seq", () => {
  const { c, sock, timers } = setup(null); // no storage: no save timers

  const texts = [];
  let done = null;
  c.on("delta", (d) => texts.push(d.text));
  c.on("done", (d) => (done = d));
  c.start();
  sock().open();
  sock().recv({ type: "ready" });
  const req = c.chat("s1", "hi", { temperature: 0 });
  assert.match(req, /^[A-Za-z0-9._:-]+$/);
  assert.deepEqual(sock().sent.at(-1), { type: "chat", session: "s1", request: req, content: "hi", params: { temperature: 0 } });
  sock().recv({ type: "delta", request: req, seq: 1, text: "Hel" }, { type: "delta", request: req, seq: 2, text: "lo" });
  sock().drop();
  assert.equal(timers.runNext(), 500); // first backoff step, jitter at its top
  sock().open();
  sock().recv({ type: "ready" });
  assert.deepEqual(sock().sent.at(-1), { type: "session.resume", session: "s1", request: req, after: 2 });
  // The server may replay seq 2; it must not be shown twice.
  sock().recv({ type: "delta", request: req, seq: 2, text: "lo" }, { type: "delta", request: req, seq: 3, text: "!" });
  sock().recv({ type: "done", request: req, finish_reason: "stop", stats: { ttft_ms: 12 } });
  assert.deepEqual(texts, ["Hel", "lo", "!"]);
  assert.equal(done.text, "Hello!");
  assert.equal(done.session, "s1");
  assert.equal(c.inflight.size, 0);
});

test("a reload resumes from storage", () => {
  const storage = memStorage();
  const a = setup(storage);
  a.c.start();
  a.sock().open();
  a.sock().recv({ type: "ready" });
  const req = a.c.chat("s9", "q");
  a.sock().recv({ type: "delta", request: req, seq: 1, text: "par" });
  a.c.saveInflight(); // what the batched save does within 250 ms
  // New page: a new client reads the same storage.
  const b = setup(storage);
  assert.deepEqual(b.c.inflightFor("s9"), [{ request: req, session: "s9", seq: 1, text: "par" }]);
  b.c.start();
  b.sock().open();
  b.sock().recv({ type: "ready" });
  assert.deepEqual(b.sock().sent.at(-1), { type: "session.resume", session: "s9", request: req, after: 1 });
});

test("backoff grows and resets after ready", () => {
  const { c, sock, timers } = setup();
  c.start();
  const delays = [];
  for (let i = 0; i < 8; i++) {
    sock().drop();
    delays.push(timers.runNext());
  }
  assert.deepEqual(delays, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  sock().open();
  sock().recv({ type: "ready" });
  sock().drop();
  assert.equal(timers.runNext(), 500);
  assert.equal(backoffDelay(3, () => 0), 2000);
});

test("a refused token stops reconnecting", () => {
  const { c, sock, timers, states } = setup();
  let reason = "";
  c.on("state", (s) => (reason = s.reason || reason));
  c.start();
  sock().open();
  sock().recv({ type: "error", code: "unauthorized", reason: "token_expired", message: "token expired" });
  sock().drop(1008, "token_expired");
  assert.equal(states.at(-1), "unauthorized");
  assert.equal(reason, "token expired");
  assert.equal(timers.pending.length, 0);
});

test("an error frame ends its request", () => {
  const { c, sock } = setup();
  let err = null;
  c.on("reqerror", (e) => (err = e));
  c.start();
  sock().open();
  sock().recv({ type: "ready" });
  const req = c.chat("s1", "x");
  sock().recv({ type: "error", code: "queue_full", message: "busy", request: req });
  assert.equal(err.code, "queue_full");
  assert.equal(c.inflight.size, 0);
});

test("helpers", () => {
  assert.equal(wsURL({ protocol: "https:", host: "chat.example:8443" }), "wss://chat.example:8443/v1/ws");
  assert.equal(wsURL({ protocol: "http:", host: "localhost:8080" }), "ws://localhost:8080/v1/ws");
  const ids = new Set(Array.from({ length: 100 }, () => newRequestID()));
  assert.equal(ids.size, 100);
});

test("a temporary refusal keeps the token and reconnects", () => {
  for (const [frame, close] of [
    [{ type: "error", code: "unavailable", reason: "", message: "cannot read tenant keys", temporary: true }, [1008, "unavailable"]],
    [{ type: "error", code: "unavailable", message: "storage down" }, [1013, "unavailable"]],
    [{ type: "error", code: "over_quota", reason: "too_many_connections", temporary: true }, [1013, "too_many_connections"]],
    [null, [1013, "try_again_later"]],
    [null, [1001, "shutdown"]],
  ]) {
    const { c, sock, timers, states } = setup();
    c.start();
    sock().open();
    if (frame) sock().recv(frame);
    sock().drop(...close);
    assert.equal(states.at(-1), "reconnecting", JSON.stringify([frame, close]));
    assert.equal(timers.pending.length, 1);
    assert.equal(c.stopped, false);
  }
  assert.equal(isTemporaryRefusal({ code: "unauthorized", reason: "token_expired" }, { code: 1008 }), false);
  assert.equal(isTemporaryRefusal(null, { code: 1008, reason: "bad_signature" }), false);
});

test("a silent answer is given up after stallMs, keeping its text", () => {
  let now = 1000;
  FakeSocket.all = [];
  const timers = fakeTimers();
  const c = new ChatClient({ url: "ws://h/v1/ws", token: "tok", WebSocketImpl: FakeSocket, storage: memStorage(), timers, stallMs: 5000, now: () => now });
  const stalled = [];
  c.on("stalled", (r) => stalled.push(r));
  c.start();
  const sock = FakeSocket.all.at(-1);
  sock.open();
  sock.recv({ type: "ready" });
  const req = c.chat("s1", "x");
  sock.recv({ type: "delta", request: req, seq: 1, text: "half" });
  now += 4000;
  c.checkStalls();
  assert.equal(stalled.length, 0);
  // Offline time does not count.
  sock.drop();
  now += 60000;
  c.checkStalls();
  assert.equal(stalled.length, 0);
  c.reconnectNow();
  const sock2 = FakeSocket.all.at(-1);
  sock2.open();
  sock2.recv({ type: "ready" });
  now += 4999;
  c.checkStalls();
  assert.equal(stalled.length, 0);
  now += 2;
  c.checkStalls();
  assert.deepEqual(stalled, [{ request: req, session: "s1", text: "half", stopped: false }]);
  assert.equal(c.inflight.size, 0);
  assert.ok(!sock2.sent.some((f) => f.type === "cancel"), "a stalled answer is not cancelled");
  // Before its first text an answer may wait five times as long (a queue).
  const queued = c.chat("s1", "y");
  now += 5 * 5000 - 1;
  c.checkStalls();
  assert.equal(stalled.length, 1);
  now += 2;
  c.checkStalls();
  assert.equal(stalled.at(-1).request, queued);
});

test("a regenerate frame has no content", () => {
  const { c, sock } = setup();
  c.start();
  sock().open();
  sock().recv({ type: "ready" });
  const req = c.chat("s1", "", {}, { replace: "r_old" });
  assert.deepEqual(sock().sent.at(-1), { type: "chat", session: "s1", request: req, replace: "r_old" });
});

test("a stop that nothing answers ends the request within 5 s", () => {
  let now = 0;
  FakeSocket.all = [];
  const c = new ChatClient({ url: "ws://h/v1/ws", token: "tok", WebSocketImpl: FakeSocket, timers: fakeTimers(), stallMs: 45000, now: () => now });
  const stalled = [];
  c.on("stalled", (r) => stalled.push(r));
  c.start();
  const sock = FakeSocket.all.at(-1);
  sock.open();
  sock.recv({ type: "ready" });
  const req = c.chat("s1", "x");
  sock.recv({ type: "delta", request: req, seq: 1, text: "part" });
  c.cancel(req);
  now += 4999;
  c.checkStalls();
  assert.equal(stalled.length, 0);
  now += 1;
  c.checkStalls();
  assert.deepEqual(stalled, [{ request: req, session: "s1", text: "part", stopped: true }]);
});
