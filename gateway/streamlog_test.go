package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// TestDeltaNeverWaitsForTheLog pauses every write on a private Redis in
// the middle of a reply: the deltas still reach the client at once (the
// log is appended after the socket write, not before), and once writes
// resume the log holds every delta, so a resume from any offset is exact.
func TestDeltaNeverWaitsForTheLog(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("paused")

	content := "a b c d e f"
	words := strings.SplitAfter(fakeReply(content), " ")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const pause = 2 * time.Second
	if err := rs.Client().Do(ctx, "client", "pause", pause.Milliseconds(), "write").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	for seq := 2; seq <= len(words); seq++ {
		e.gen.gate <- struct{}{}
		f, err := c.tryRead(time.Second)
		if err != nil || f.Type != TypeDelta || f.Seq != seq || f.Text != words[seq-1] {
			t.Fatalf("delta %d while Redis takes no writes: have %+v, %v", seq, f, err)
		}
	}
	if waited := time.Since(paused); waited >= pause {
		t.Fatalf("the deltas took %v, past the %v pause: they waited for the log", waited, pause)
	}
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDone || f.FinishReason != engine.FinishStop {
		t.Fatalf("have %+v; want done with finish_reason stop", f)
	}
	if time.Since(paused) < pause {
		t.Fatal("done came before Redis took writes again: it cannot have been stored")
	}

	for _, after := range []int{0, 3, len(words)} {
		c.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": after})
		if f := c.read(); f.Type != TypeSession {
			t.Fatalf("have %+v; want session", f)
		}
		text, last, done, errs := c.collectAfter("r1", after)
		if want := strings.Join(words[after:], ""); text != want || len(errs) > 0 || done.FinishReason != engine.FinishStop {
			t.Fatalf("resume after %d: have %q (last seq %d) %v %+v; want %q", after, text, last, errs, done, want)
		}
	}
}

// TestLogWriterSeesAppendsGoOut: what a turn waits for before a send is
// its append being written to Redis's connection, which happens while
// Redis executes no writes at all; the append lands once they resume.
func TestLogWriterSeesAppendsGoOut(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Shorter than the test client's read timeout, which the log
	// writer's client copies.
	const pause = 700 * time.Millisecond
	if err := rs.Client().Do(ctx, "client", "pause", pause.Milliseconds(), "write").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	q := e.srv.logw.queue("s_sent", "r1")
	select {
	case <-e.srv.logw.push(q, logEntry{Seq: 1, Text: "one"}):
	case <-time.After(pause / 2):
		t.Fatal("the append was not reported written while Redis paused writes")
	}
	if time.Since(paused) >= pause {
		t.Fatal("reported after the pause: Redis's answer, not the write, was waited for")
	}
	if !e.srv.logw.flush(ctx, q) {
		t.Fatal("the append did not land once Redis took writes again")
	}
	es, err := e.srv.log.readAfter(ctx, "s_sent", "r1", 0, 0)
	if err != nil || len(es) != 1 || es[0].Seq != 1 || es[0].Text != "one" {
		t.Fatalf("have log %+v, %v; want the one delta", es, err)
	}
}

// TestAppendArgsTagLast: the log writer's tag is the append's last
// argument, so the write that carries it has carried the deltas too.
func TestAppendArgsTagLast(t *testing.T) {
	l := &streamLog{maxLen: 100, ttl: time.Minute}
	args := l.appendArgs("lgsent:tag", []logEntry{{Seq: 1, Text: "a"}, {Seq: 2, Text: "b"}})
	if len(args) != 7 || args[len(args)-1] != "lgsent:tag" {
		t.Fatalf("have args %v; want max length, ttl, two seq/text pairs, then the tag", args)
	}
}
