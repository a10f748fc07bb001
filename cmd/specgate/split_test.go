package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestSplitOpenAIAsOneProcess: a gateway without a model serves the
// OpenAI API as one process does. /v1/models names the engines' model,
// requests may name it, and a text prompt on /v1/completions (tokenized
// by the engine) gets the reply one process gives; another model name is
// 404 model_not_found.
func TestSplitOpenAIAsOneProcess(t *testing.T) {
	rs := testredis.Start(t)
	startServe(t, rs.URL(), "--role", "engine")
	gw := startServe(t, rs.URL(), "--role", "gateway")
	tok := tenantToken(t, rs, "alice")
	rs1 := testredis.Start(t)
	one := startServe(t, rs1.URL())
	tok1 := tenantToken(t, rs1, "alice")

	models := func(p *serveProc, tok string) map[string]any {
		status, body := oaiCall(t, p, tok, http.MethodGet, "/v1/models", nil)
		var list struct{ Data []map[string]any }
		if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Data) != 1 {
			t.Fatalf("have %d %s (%v); want one model", status, body, err)
		}
		return list.Data[0]
	}
	want := models(one, tok1)
	name, _ := want["id"].(string)
	// The gateway learns the model from the engine's heartbeat.
	deadline := time.Now().Add(20 * time.Second)
	var have map[string]any
	for have = models(gw, tok); have["id"] != name && time.Now().Before(deadline); have = models(gw, tok) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range []string{"id", "arch", "context_length", "quantization"} {
		if have[k] != want[k] {
			t.Errorf("the gateway lists %s=%v; one process lists %v", k, have[k], want[k])
		}
	}

	body := map[string]any{"model": name, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
	status, split := oaiCall(t, gw, tok, http.MethodPost, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("gateway: have %d %s; want 200", status, split)
	}
	status, whole := oaiCall(t, one, tok1, http.MethodPost, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("one process: have %d %s; want 200", status, whole)
	}
	type reply struct {
		Model   string
		Choices []struct{ Text string }
	}
	var a, b reply
	if json.Unmarshal(split, &a) != nil || json.Unmarshal(whole, &b) != nil || len(a.Choices) != 1 || len(b.Choices) != 1 {
		t.Fatalf("have %s and %s; want one choice each", split, whole)
	}
	if a.Model != name || a.Choices[0].Text != b.Choices[0].Text || a.Choices[0].Text == "" {
		t.Fatalf("gateway: model %q text %q; one process: model %q text %q", a.Model, a.Choices[0].Text, b.Model, b.Choices[0].Text)
	}

	chat := map[string]any{"model": name, "messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 4}
	if status, b := oaiCall(t, gw, tok, http.MethodPost, "/v1/chat/completions", chat); status != 200 {
		t.Fatalf("chat naming the model: have %d %s; want 200", status, b)
	}
	chat["model"] = "gpt-4o"
	if status, b := oaiCall(t, gw, tok, http.MethodPost, "/v1/chat/completions", chat); status != 404 || !strings.Contains(string(b), `"model_not_found"`) {
		t.Fatalf("another model: have %d %s; want 404 model_not_found", status, b)
	}
}

// oaiCall sends one OpenAI API request to p and returns the status and body.
func oaiCall(t *testing.T, p *serveProc, tok, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(p.base, "/")+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
