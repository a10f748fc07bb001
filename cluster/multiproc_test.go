package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

// proc is one node process of the test cluster.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string // a gateway's host:port

	mu     sync.Mutex // protects stderr
	stderr bytes.Buffer
	exited chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// kill sends SIGKILL: no drain, no farewell, as when a machine dies.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// startNode runs the node binary with args and waits for its ready line.
func startNode(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stderr = p
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			p.kill()
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.log())
		}
	})
	select {
	case line := <-ready:
		if a, ok := strings.CutPrefix(line, "listening "); ok {
			p.addr = a
		}
	case <-p.exited:
		t.Fatalf("%s exited before it was ready:\n%s", name, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after a minute:\n%s", name, p.log())
	}
	return p
}

// wsConn is a test WebSocket client.
type wsConn struct {
	t       *testing.T
	ws      *websocket.Conn
	pending []gateway.ServerFrame
}

func dial(t *testing.T, gw *proc, token string) *wsConn {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + token}}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+gw.addr+"/v1/ws", h)
	if err != nil {
		t.Fatalf("dial %s: %v", gw.name, err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &wsConn{t: t, ws: ws}
	if f := c.read(); f.Type != gateway.TypeReady {
		t.Fatalf("have %+v; want ready", f)
	}
	return c
}

func (c *wsConn) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *wsConn) read() gateway.ServerFrame {
	c.t.Helper()
	if len(c.pending) == 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		for line := range strings.SplitSeq(string(msg), "\n") {
			var f gateway.ServerFrame
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				c.t.Fatalf("frame %q: %v", line, err)
			}
			c.pending = append(c.pending, f)
		}
	}
	f := c.pending[0]
	c.pending = c.pending[1:]
	return f
}

func (c *wsConn) session() string {
	c.t.Helper()
	c.send(map[string]any{"type": gateway.TypeSessionCreate, "title": "t"})
	f := c.read()
	if f.Type != gateway.TypeSession || f.Session == nil {
		c.t.Fatalf("have %+v; want a session", f)
	}
	return f.Session.ID
}

const maxTokens = 96

func (c *wsConn) chat(sid, req, content string) {
	c.t.Helper()
	c.chatWith(sid, req, content, map[string]any{"max_tokens": maxTokens, "temperature": 0, "seed": 1})
}

func (c *wsConn) chatWith(sid, req, content string, params map[string]any) {
	c.t.Helper()
	c.send(map[string]any{"type": gateway.TypeChat, "session": sid, "request": req, "content": content, "params": params})
}

// reply returns the stored assistant message of sid's last turn.
func (c *wsConn) reply(sid string) gateway.Message {
	c.t.Helper()
	c.send(map[string]any{"type": gateway.TypeSessionGet, "session": sid})
	f := c.read()
	if f.Type != gateway.TypeSession || f.Session == nil || len(f.Session.Messages) == 0 {
		c.t.Fatalf("have %+v; want the session", f)
	}
	m := f.Session.Messages[len(f.Session.Messages)-1]
	if m.Role != "assistant" {
		c.t.Fatalf("have last message %+v; want the reply", m)
	}
	return m
}

// collect reads req's deltas until done; seqs must run 1, 2, 3… with no
// gap or repeat. stopAt, when positive, returns early after that seq.
func (c *wsConn) collect(req string, after, stopAt int) (text string, last int, done gateway.ServerFrame) {
	c.t.Helper()
	last = after
	for {
		f := c.read()
		switch {
		case f.Type == gateway.TypeDelta && f.Request == req:
			if f.Seq != last+1 {
				c.t.Fatalf("have seq %d after %d; want %d", f.Seq, last, last+1)
			}
			last = f.Seq
			text += f.Text
			if stopAt > 0 && last >= stopAt {
				return text, last, gateway.ServerFrame{}
			}
		case f.Type == gateway.TypeDone && f.Request == req:
			return text, last, f
		default:
			c.t.Fatalf("have %+v while collecting %s", f, req)
		}
	}
}

// enginesOf returns the engines that accepted a request, in order, from
// its output stream, which is on its stream log's slot (the engine
// appends the deltas to the log).
func enginesOf(t *testing.T, rdb redis.UniversalClient, prefix, sid, req string) []string {
	t.Helper()
	ctx := context.Background()
	ks, err := testredis.Keys(ctx, rdb, prefix+"sess:{s:"+sid+"}:req:"+req+":log:cl:acme/"+sid+"/"+req+"#*:out")
	if err != nil || len(ks) != 1 {
		t.Fatalf("have output keys %v, %v; want one", ks, err)
	}
	msgs, err := rdb.XRange(ctx, ks[0], "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		if m.Values["k"] == "a" {
			out = append(out, m.Values["e"].(string))
		}
	}
	return out
}

func waitReady(t *testing.T, gws ...*proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, gw := range gws {
		for {
			resp, err := http.Get("http://" + gw.addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready: %v", gw.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func waitNoPending(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int64
		qs, err := rdb.SMembers(ctx, keyspace.New(prefix).Queues()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if p, err := rdb.XPending(ctx, q, "engines").Result(); err == nil {
				n += p.Count
			}
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("have %d pending requests; want none", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMultiProcess runs two gateways and two engines as separate processes
// on one private Redis: chats through either gateway, session affinity,
// an engine killed mid-stream, and a Redis outage.
func TestMultiProcess(t *testing.T) {
	modelPath := testmodels.Path(t, testmodels.Stories260K)
	srv := testredis.Start(t)
	rdb := srv.Client()
	const prefix = "mp:"
	dir := t.TempDir()
	bin := filepath.Join(dir, "node")
	build := exec.Command("go", "build", "-o", bin, "./testdata/node")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	common := []string{"-redis", srv.URL(), "-prefix", prefix}
	engineArgs := func(id string) []string {
		return append([]string{"-role", "engine", "-id", id, "-model", modelPath, "-step-delay", "15ms"}, common...)
	}
	engines := map[string]*proc{
		"e1": startNode(t, bin, "e1", engineArgs("e1")...),
		"e2": startNode(t, bin, "e2", engineArgs("e2")...),
	}
	g1 := startNode(t, bin, "g1", append([]string{"-role", "gateway", "-id", "g1"}, common...)...)
	g2 := startNode(t, bin, "g2", append([]string{"-role", "gateway", "-id", "g2"}, common...)...)
	waitReady(t, g1, g2)

	ctx := context.Background()
	key, err := tenants.NewHS256Key("acme-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.NewStore(rdb, prefix, time.Now).Create(ctx, tenants.Tenant{ID: "acme", Keys: []tenants.Key{key}}); err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "aud": "specgate", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "acme-1"
	token, err := tok.SignedString(key.Secret)
	if err != nil {
		t.Fatal(err)
	}

	// A node says it is ready before its first heartbeat lands: on a
	// busy machine that can take a moment.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ns, err := cluster.Nodes(ctx, rdb, prefix)
		if err == nil && len(ns) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("have nodes %+v, %v; want 2 gateways and 2 engines", ns, err)
		}
	}

	const prompt = "Once upon a time"
	var ref string
	var refDone gateway.ServerFrame
	t.Run("either gateway", func(t *testing.T) {
		for i, gw := range []*proc{g1, g2, g1} {
			c := dial(t, gw, token)
			sid := c.session()
			c.chat(sid, "r1", prompt)
			text, _, done := c.collect("r1", 0, 0)
			if done.FinishReason != "stop" && done.FinishReason != "length" {
				t.Fatalf("%s: have %+v; want stop or length", gw.name, done)
			}
			if i == 0 {
				ref, refDone = text, done
				continue
			}
			if text != ref {
				t.Fatalf("%s: have %q; want %q as through g1", gw.name, text, ref)
			}
		}
		if len(ref) < 40 {
			t.Fatalf("have a reference of %q; want a longer reply to kill an engine in", ref)
		}
	})

	t.Run("text prompt on /v1/completions", func(t *testing.T) {
		// The gateway process has no model: an engine tokenizes the text.
		body := strings.NewReader(`{"prompt":"` + storyText + `","max_tokens":8,"temperature":0}`)
		req, err := http.NewRequest(http.MethodPost, "http://"+g1.addr+"/v1/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		if want := len(storyTokens(t)); resp.StatusCode != http.StatusOK || len(r.Choices) != 1 || r.Choices[0].Text == "" ||
			r.Usage.PromptTokens != want || r.Usage.CompletionTokens == 0 {
			t.Fatalf("have %d %+v; want 200, a completion of the %d-token prompt", resp.StatusCode, r, want)
		}
	})

	var affSession string
	t.Run("session affinity", func(t *testing.T) {
		c1, c2 := dial(t, g1, token), dial(t, g2, token)
		sid := c1.session()
		affSession = sid
		var first string
		for i, c := range []*wsConn{c1, c2, c1} {
			req := fmt.Sprintf("t%d", i)
			c.chat(sid, req, "And then?")
			c.collect(req, 0, 0)
			es := enginesOf(t, rdb, prefix, sid, req)
			if len(es) != 1 {
				t.Fatalf("turn %d: have engines %v; want one", i, es)
			}
			if i == 0 {
				first = es[0]
			} else if es[0] != first {
				t.Fatalf("turn %d: have engine %s; want %s, where the session's prefix is", i, es[0], first)
			}
		}
	})

	top := t // owns nodes started by a subtest that later ones use
	// A sampled request draws each token from (seed, position) alone, so
	// the engine that takes it over continues exactly the text the first
	// one would have written: the client sees the uninterrupted reply.
	t.Run("seeded sample survives a killed engine", func(t *testing.T) {
		params := map[string]any{"max_tokens": maxTokens, "temperature": 1.0, "top_p": 0.95, "seed": 4242}
		c := dial(t, g1, token)
		sid := c.session()
		c.chatWith(sid, "s1", prompt, params)
		want, _, wantDone := c.collect("s1", 0, 0)
		if len(want) < 40 {
			t.Fatalf("have a sampled reference of %q; want a longer reply to kill an engine in", want)
		}
		c.chatWith(c.session(), "s1", prompt, params)
		if again, _, _ := c.collect("s1", 0, 0); again != want {
			t.Fatalf("have %q on a second run; want %q: the seeded reply is not reproducible", again, want)
		}

		sid = c.session()
		c.chatWith(sid, "s1", prompt, params)
		head, last, _ := c.collect("s1", 0, 4)
		es := enginesOf(t, rdb, prefix, sid, "s1")
		if len(es) != 1 {
			t.Fatalf("have engines %v; want one", es)
		}
		engines[es[0]].kill()
		delete(engines, es[0])
		engines["e3"] = startNode(top, bin, "e3", engineArgs("e3")...) // two engines for the next case
		tail, _, done := c.collect("s1", last, 0)
		if have := head + tail; have != want {
			t.Fatalf("have %q; want %q, the reply of the same seed with nothing killed", have, want)
		}
		if done.FinishReason != wantDone.FinishReason || done.Usage == nil || done.Usage.CompletionTokens != wantDone.Usage.CompletionTokens ||
			done.Stats == nil || done.Stats.Seed != 4242 {
			t.Fatalf("have done %+v (stats %+v); want %s with %d tokens and seed 4242", done, done.Stats, wantDone.FinishReason, wantDone.Usage.CompletionTokens)
		}
		if after := enginesOf(t, rdb, prefix, sid, "s1"); len(after) != 2 || after[1] == es[0] {
			t.Fatalf("have engines %v; want %s, then another", after, es[0])
		}
		if m := c.reply(sid); m.Content != want || m.Partial || m.FinishReason != wantDone.FinishReason {
			t.Fatalf("have stored reply %+v; want %q, whole", m, want)
		}
		// A resume from the start replays the same text.
		c.send(map[string]any{"type": gateway.TypeSessionResume, "session": sid, "request": "s1"})
		if f := c.read(); f.Type != gateway.TypeSession {
			t.Fatalf("have %+v; want the session first", f)
		}
		if again, _, _ := c.collect("s1", 0, 0); again != want {
			t.Fatalf("have %q on resume; want %q", again, want)
		}
		waitNoPending(t, rdb, prefix)
	})

	t.Run("engine killed mid-stream", func(t *testing.T) {
		c := dial(t, g1, token)
		sid := c.session()
		c.chat(sid, "r1", prompt)
		head, last, _ := c.collect("r1", 0, 5)
		es := enginesOf(t, rdb, prefix, sid, "r1")
		if len(es) != 1 {
			t.Fatalf("have engines %v; want one", es)
		}
		victim := engines[es[0]]
		victim.kill()
		delete(engines, es[0])
		tail, _, done := c.collect("r1", last, 0)
		if have := head + tail; have != ref {
			t.Fatalf("have %q; want %q, the uninterrupted greedy reply", have, ref)
		}
		if done.FinishReason != refDone.FinishReason || done.Usage == nil || done.Usage.CompletionTokens != refDone.Usage.CompletionTokens {
			t.Fatalf("have done %+v; want %s with %d tokens", done, refDone.FinishReason, refDone.Usage.CompletionTokens)
		}
		if after := enginesOf(t, rdb, prefix, sid, "r1"); len(after) != 2 || after[1] == es[0] {
			t.Fatalf("have engines %v; want %s, then the other", after, es[0])
		}
		waitNoPending(t, rdb, prefix)
	})

	t.Run("redis outage", func(t *testing.T) {
		c := dial(t, g1, token) // sockets authenticate against Redis: dial first
		srv.Kill()
		c.chat(affSession, "during", "Hello?")
		f := c.read()
		if f.Type != gateway.TypeError || f.Code != gateway.CodeUnavailable || !f.Temporary {
			t.Fatalf("have %+v; want a temporary unavailable error", f)
		}
		time.Sleep(2 * time.Second)
		srv.Restart()
		waitReady(t, g1, g2)
		for _, gw := range []*proc{g1, g2} {
			c := dial(t, gw, token)
			sid := c.session()
			c.chat(sid, "after", prompt)
			if text, _, _ := c.collect("after", 0, 0); text != ref {
				t.Fatalf("%s after the outage: have %q; want %q", gw.name, text, ref)
			}
		}
		// Nothing stored before the outage is lost.
		c = dial(t, g2, token)
		c.send(map[string]any{"type": gateway.TypeSessionGet, "session": affSession})
		f = c.read()
		if f.Type != gateway.TypeSession || f.Session == nil || len(f.Session.Messages) < 6 {
			t.Fatalf("have %+v; want the session with its 3 turns", f)
		}
		waitNoPending(t, rdb, prefix)
	})
}
