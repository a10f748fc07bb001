package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/specgate/specgate/internal/testredis"
)

// TestSplitDeltaCrossesRedisOnce: with gateway and engine apart, a reply's
// deltas are in Redis once each, in one stream with one numbering: the
// request's stream log, entry i being delta i, written by the engine; no
// other stream holds a delta. A client that drops its socket after delta
// 1 and resumes on a new one after 1 gets the rest, no gap, no duplicate,
// and what the log holds is exactly what the client read: the reply a
// single process gives the same greedy request.
func TestSplitDeltaCrossesRedisOnce(t *testing.T) {
	rs := testredis.Start(t)
	startServe(t, rs.URL(), "--role", "engine")
	gw := startServe(t, rs.URL(), "--role", "gateway")
	tok := tenantToken(t, rs, "alice")
	c := login(t, gw, tok)
	sid := newSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "Once upon a time",
		"params": map[string]any{"temperature": 0, "max_tokens": 120}})
	// One delta only: how many a reply makes depends on timing (a
	// consumer that lags gets the engine's events coalesced).
	var head strings.Builder
	if f := c.Read(); f.Type != "delta" || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	} else {
		head.WriteString(f.Text)
	}
	if err := c.WriteFrame(0x8, []byte{0x03, 0xe8}, true); err != nil { // close 1000
		t.Fatal(err)
	}

	c2 := login(t, gw, tok)
	c2.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 1})
	if f := c2.Read(); f.Type != "session" {
		t.Fatalf("have %+v; want session", f)
	}
	tail, done, errs := c2.Collect("r1", 1)
	if len(errs) > 0 || done.FinishReason == "error" || done.FinishReason == "cancelled" {
		t.Fatalf("have errors %+v, done %+v", errs, done)
	}
	content, partial, _ := lastReply(t, c2, sid, "r1")
	if content != head.String()+tail || partial {
		t.Fatalf("stored %q (partial %v); want what the client read, %q", content, partial, head.String()+tail)
	}

	// Every stream in Redis: only the log holds deltas, each once.
	rdb := rs.Client()
	ctx := context.Background()
	logKey := fmt.Sprintf("sess:{s:%s}:req:r1:log", sid)
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	n := 0
	for _, k := range keys {
		if rdb.Type(ctx, k).Val() != "stream" {
			continue
		}
		msgs, err := rdb.XRange(ctx, k, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if k == logKey {
				if m.Values["done"] != nil {
					if m.ID != fmt.Sprintf("%d-0", n+1) {
						t.Fatalf("done record %s after %d deltas", m.ID, n)
					}
					continue
				}
				n++
				if m.ID != fmt.Sprintf("%d-0", n) {
					t.Fatalf("log entry %s; want %d-0", m.ID, n)
				}
				logged.WriteString(fmt.Sprint(m.Values["d"]))
				continue
			}
			if m.Values["k"] == "d" || m.Values["d"] != nil || m.Values["x"] != nil {
				t.Fatalf("stream %s holds a delta too: %s %v", k, m.ID, m.Values)
			}
		}
	}
	if logged.String() != content || n < 1 {
		t.Fatalf("the log holds %d deltas, %q; want the reply, %q", n, logged.String(), content)
	}

	// The same request to one process (its own Redis): the same reply.
	rs1 := testredis.Start(t)
	one := startServe(t, rs1.URL())
	c1 := login(t, one, tenantToken(t, rs1, "alice"))
	sid1 := newSession(t, c1)
	c1.SendJSON(map[string]any{"type": "chat", "session": sid1, "request": "r1", "content": "Once upon a time",
		"params": map[string]any{"temperature": 0, "max_tokens": 120}})
	if whole, _, _ := c1.Collect("r1", 0); whole != content {
		t.Fatalf("split mode gave %q; one process gives %q", content, whole)
	}
	t.Logf("%d deltas, each once in Redis, in %s; %d bytes, done %s %+v", n, logKey, len(content), done.FinishReason, done.Usage)
}
