package main

// The service's lifecycle as an operator meets it: `specgate serve` runs as
// a real process (this test binary as the command), is sent SIGTERM or
// killed with SIGKILL mid-reply, and is started again; clients are the
// outside client of internal/wsraw (hand-rolled WebSocket, hand-signed
// JWTs).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/internal/wsraw"
	"github.com/specgate/specgate/tenants"
)

// serveProc is one `specgate serve` process.
type serveProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string     // http://host:port
	exited chan error // the process's Wait result, once
	mu     sync.Mutex // protects log
	log    strings.Builder
}

// listeningRE finds the address in the line that says serve is up: the
// gateway's "listening", or the engine role's metrics address.
var listeningRE = regexp.MustCompile(`(?:msg=listening url=|msg="engine serving requests from Redis".* metrics=)(http://[^/\s]+)`)

// startServe starts serve on a free port against redisURL with a small
// random-weight model (no EOS to speak of: replies run to the context) and
// waits until it listens.
func startServe(t *testing.T, redisURL string, extra ...string) *serveProc {
	t.Helper()
	model := testmodels.Path(t, filepath.Join("synth", "synth-llama-f32.gguf"))
	args := []string{"serve", "--addr", "127.0.0.1:0", "--redis", redisURL}
	if i := slices.Index(extra, "--role"); i < 0 || i+1 == len(extra) || extra[i+1] != roleGateway {
		args = append(args, "--model", model, "--threads", "1") // a gateway refuses engine flags
	}
	args = append(args, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{t: t, cmd: cmd, exited: make(chan error, 1)}
	up := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case up <- m[1]:
				default:
				}
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve log:\n%s", p.logText())
		}
	})
	select {
	case p.base = <-up:
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("serve exited before listening (%v):\n%s", err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not listen within 60s:\n%s", p.logText())
	}
	return p
}

func (p *serveProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// wait waits for the process to exit and returns its exit code.
func (p *serveProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			p.t.Fatalf("serve: %v", err)
		}
		return 0
	case <-time.After(d):
		p.t.Fatalf("serve did not exit within %v:\n%s", d, p.logText())
		return -1
	}
}

// tenantToken creates tenant acme (after serve migrated the Redis) and
// signs a token for user by hand.
func tenantToken(t *testing.T, rs *testredis.Server, user string) string {
	t.Helper()
	k, err := tenants.NewHS256Key("acme-1")
	if err != nil {
		t.Fatal(err)
	}
	store := tenants.NewStore(rs.Client(), "", nil)
	if _, err := store.Create(context.Background(), tenants.Tenant{ID: "acme", Keys: []tenants.Key{k}}); err != nil && !errors.Is(err, tenants.ErrExists) {
		t.Fatal(err)
	}
	return wsraw.JWT(t, map[string]any{"alg": "HS256", "kid": "acme-1"}, wsraw.Claims(user, nil), wsraw.HMACSigner(k.Secret))
}

// login dials p with tok and reads ready.
func login(t *testing.T, p *serveProc, tok string) *wsraw.Conn {
	t.Helper()
	c := wsraw.MustDial(t, p.base, tok)
	c.Ready()
	return c
}

func newSession(t *testing.T, c *wsraw.Conn) string {
	t.Helper()
	c.SendJSON(map[string]any{"type": "session.create", "title": "t"})
	f := c.Read()
	if f.Type != "session" || f.Session == nil {
		t.Fatalf("have %+v; want a session", f)
	}
	return f.Session.ID
}

// chatUntil starts a greedy chat and reads its deltas up to seq n,
// returning their text.
func chatUntil(t *testing.T, c *wsraw.Conn, sid, rid string, n int) string {
	t.Helper()
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": rid, "content": "Once upon a time", "params": map[string]any{"temperature": 0}})
	var b strings.Builder
	for seq := 1; seq <= n; seq++ {
		f := c.Read()
		if f.Type != "delta" || f.Request != rid || f.Seq != seq {
			t.Fatalf("have %+v; want delta %d of %s", f, seq, rid)
		}
		b.WriteString(f.Text)
	}
	return b.String()
}

// lastReply reads the session and returns its last message, which must be
// the assistant's reply to rid.
func lastReply(t *testing.T, c *wsraw.Conn, sid, rid string) (content string, partial bool, interrupted string) {
	t.Helper()
	c.SendJSON(map[string]any{"type": "session.get", "session": sid})
	f := c.Read()
	if f.Type != "session" || len(f.Session.Messages) == 0 {
		t.Fatalf("have %+v; want the session with its messages", f)
	}
	m := f.Session.Messages[len(f.Session.Messages)-1]
	if m.Role != "assistant" || m.Request != rid {
		t.Fatalf("have last message %+v; want the assistant's reply to %s", m, rid)
	}
	return m.Content, m.Partial, m.Interrupted
}

// TestKillMidStreamLosesNothing: the process running a turn is killed with
// SIGKILL in the middle of a reply. In one process, serve is started again
// on the same Redis: the orphaned turn is finalized from its stream log
// within seconds, a resume gets every delta that reached Redis and a done
// within 15 s, and the stored reply is exactly those deltas, marked
// partial, interrupted "crash". With gateways and engine apart the
// generation outlives the gateway: the other gateway, there all along,
// takes the turn over and reads the engine's stream on, so a client that
// reconnects there and resumes gets the whole reply (the same as an
// uninterrupted greedy run), no gap, no duplicate, stored complete.
func TestKillMidStreamLosesNothing(t *testing.T) {
	for _, split := range []bool{false, true} {
		name := "one process, restarted"
		if split {
			name = "gateways apart, the other takes over"
		}
		t.Run(name, func(t *testing.T) { killMidStream(t, split) })
	}
}

func killMidStream(t *testing.T, split bool) {
	rs := testredis.Start(t)
	// A short lease keeps the test short; recovery comes about 1.5
	// leases after the kill.
	role := []string{"--turn-lease", "1s"}
	if split {
		startServe(t, rs.URL(), "--role", "engine")
		role = append(role, "--role", "gateway")
	}
	for attempt := 1; ; attempt++ {
		a := startServe(t, rs.URL(), role...)
		var b *serveProc
		if split {
			b = startServe(t, rs.URL(), role...)
		}
		tok := tenantToken(t, rs, "alice")
		c := login(t, a, tok)
		sid := newSession(t, c)
		rid := fmt.Sprintf("r%d", attempt)
		head := chatUntil(t, c, sid, rid, 3)
		if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		a.wait(10 * time.Second)

		if !split {
			b = startServe(t, rs.URL(), role...)
		}
		restarted := time.Now()
		c2 := login(t, b, tok)
		c2.Timeout = 20 * time.Second
		c2.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": rid, "after": 3})
		if f := c2.Read(); f.Type != "session" {
			t.Fatalf("have %+v; want session", f)
		}
		tail, done, errs := c2.Collect(rid, 3)
		if took := time.Since(restarted); took > 15*time.Second {
			t.Fatalf("done came %v after the restart; want within 15s", took)
		}
		if len(errs) > 0 {
			t.Fatalf("have errors %+v", errs)
		}
		content, partial, why := lastReply(t, c2, sid, rid)
		if content != head+tail {
			t.Fatalf("stored reply %q; want every delta the resume read, %q", content, head+tail)
		}
		if split {
			if !strings.Contains(b.logText(), "took over a dead gateway's turn") {
				// The reply ended before the kill landed. Try again.
				if attempt < 3 {
					_ = b.cmd.Process.Kill()
					b.wait(10 * time.Second)
					continue
				}
				t.Fatalf("every reply finished before the kill; the takeover was not exercised")
			}
			if partial || why != "" || done.FinishReason == "error" || done.FinishReason == "cancelled" {
				t.Fatalf("have partial %v, interrupted %q, done %+v; want the whole reply, stored complete", partial, why, done)
			}
			// The same greedy request, uninterrupted, on the gateway that
			// took over: the reply the client got must be all of it.
			sid2 := newSession(t, c2)
			whole := chatUntil(t, c2, sid2, "ref", 0)
			rest, _, _ := c2.Collect("ref", 0)
			if whole+rest != head+tail {
				t.Fatalf("reply across the takeover %q; want the uninterrupted one %q", head+tail, whole+rest)
			}
			t.Logf("attempt %d: %d bytes before the kill, %d more after the takeover; done %v after the kill", attempt, len(head), len(tail), time.Since(restarted).Round(time.Millisecond))
			return
		}
		if !partial {
			// The reply ended before the kill landed: nothing was
			// orphaned. Try again (the reply takes a few hundred ms).
			if attempt < 3 {
				_ = b.cmd.Process.Kill()
				b.wait(10 * time.Second)
				continue
			}
			t.Fatalf("every reply finished before the kill; the crash path was not exercised")
		}
		if why != "crash" || done.FinishReason != "error" {
			t.Fatalf("have interrupted %q, done %+v; want crash and finish_reason error", why, done)
		}
		t.Logf("attempt %d: %d bytes before the kill, %d more from the log; done %v after the restart", attempt, len(head), len(tail), time.Since(restarted).Round(time.Millisecond))
		return
	}
}

// TestSIGTERMDrainsAndCloses: on SIGTERM serve stops accepting, lets a
// running reply finish, sends its done and a 1001 "shutdown" close to every
// socket, idle or not, and exits 0. With a shutdown deadline too short for
// the reply, the reply is stored partial (interrupted "shutdown") and a
// resume on the restarted service reads every delta and the done.
func TestSIGTERMDrainsAndCloses(t *testing.T) {
	rs := testredis.Start(t)
	tok := ""
	for _, tc := range []struct {
		name     string
		deadline string
	}{{"reply finishes", "30s"}, {"deadline cuts the reply", "1ms"}} {
		t.Run(tc.name, func(t *testing.T) {
			a := startServe(t, rs.URL(), "--shutdown-timeout", tc.deadline)
			if tok == "" {
				tok = tenantToken(t, rs, "alice")
			}
			idle := []*wsraw.Conn{login(t, a, tok), login(t, a, tok), login(t, a, tok)}
			c := login(t, a, tok)
			sid := newSession(t, c)
			head := chatUntil(t, c, sid, "r1", 1)
			if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			tail, done, errs := c.Collect("r1", 1)
			if len(errs) > 0 {
				t.Fatalf("have errors %+v", errs)
			}
			if f, ok := c.Next(10 * time.Second); ok || c.CloseCode != 1001 || c.CloseText != "shutdown" {
				t.Fatalf("after done: have frame %+v (ok %v), close %d %q; want close 1001 shutdown", f, ok, c.CloseCode, c.CloseText)
			}
			for i, ic := range idle {
				if fs := ic.UntilClose(10 * time.Second); len(fs) > 0 || ic.CloseCode != 1001 || ic.CloseText != "shutdown" {
					t.Fatalf("idle socket %d: have frames %+v, close %d %q; want close 1001 shutdown", i, fs, ic.CloseCode, ic.CloseText)
				}
			}
			if code := a.wait(30 * time.Second); code != 0 {
				t.Fatalf("serve exited %d; want 0:\n%s", code, a.logText())
			}

			// Restarted: the stored reply is what the client saw, and a
			// resume from the start reads it all and the same done.
			b := startServe(t, rs.URL())
			c2 := login(t, b, tok)
			content, partial, why := lastReply(t, c2, sid, "r1")
			if content != head+tail {
				t.Fatalf("stored %q; want %q", content, head+tail)
			}
			cut := done.FinishReason == "cancelled"
			t.Logf("done after %d bytes: %s", len(head+tail), done.FinishReason)
			if partial != cut || (cut && why != "shutdown") {
				t.Fatalf("done %+v, stored partial %v interrupted %q; want partial (shutdown) exactly when the reply was cut", done, partial, why)
			}
			if tc.deadline == "30s" && cut {
				t.Fatalf("the reply was cut although the deadline was 30s")
			}
			c2.SendJSON(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": 0})
			if f := c2.Read(); f.Type != "session" {
				t.Fatalf("have %+v; want session", f)
			}
			again, done2, _ := c2.Collect("r1", 0)
			if again != head+tail || done2.FinishReason != done.FinishReason {
				t.Fatalf("resume: have %q, %+v; want %q and the same done", again, done2, head+tail)
			}
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
			c2.UntilClose(10 * time.Second)
			if code := b.wait(30 * time.Second); code != 0 {
				t.Fatalf("serve exited %d; want 0", code)
			}
		})
	}
}

// TestMaxTokensZeroIsTheContext: a chat without max_tokens may use what the
// context has left (PROTOCOL.md), not the engine's smaller default cap. The
// model is random-weight with a 1536-token context and a seed whose greedy
// text meets no end-of-sequence token. Also: --auth-timeout is the browser
// sign-in timeout.
func TestMaxTokensZeroIsTheContext(t *testing.T) {
	model := filepath.Join(t.TempDir(), "ctx1536.gguf")
	if r := specgate(t, nil, "mkmodel", "--out", model, "--context", "1536", "--dim", "64", "--heads", "2", "--layers", "1", "--ffn", "128", "--vocab", "512", "--seed", "4"); r.code != 0 {
		t.Fatalf("mkmodel: %d %s", r.code, r.stderr)
	}
	rs := testredis.Start(t)
	p := startServe(t, rs.URL(), "--model", model, "--auth-timeout", "300ms")
	c := login(t, p, tenantToken(t, rs, "alice"))
	c.Timeout = 30 * time.Second
	sid := newSession(t, c)
	c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": "Once upon a time"})
	_, done, errs := c.Collect("r1", 0)
	if len(errs) > 0 || done.Usage == nil {
		t.Fatalf("have %+v %+v", errs, done)
	}
	u := done.Usage
	if done.FinishReason != "length" || u.PromptTokens+u.CompletionTokens != 1536 || u.CompletionTokens <= 1024 {
		t.Fatalf("have %s after %d+%d tokens; want length at the 1536-token context, past 1024", done.FinishReason, u.PromptTokens, u.CompletionTokens)
	}

	start := time.Now()
	silent := wsraw.MustDial(t, p.base, "")
	fs := silent.UntilClose(10 * time.Second)
	if took := time.Since(start); len(fs) != 1 || fs[0].Reason != "auth_timeout" || took > 3*time.Second {
		t.Fatalf("have %+v after %v; want auth_timeout after about 300ms", fs, took)
	}
}
