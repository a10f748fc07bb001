package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// logTarget is a stream log on session sid's slot, as a gateway keeps one.
func logTarget(prefix, sid, rid string) LogTarget {
	return LogTarget{Key: keyspace.New(prefix).RequestLog(sid, rid), MaxLen: 1000, TTL: time.Minute}
}

// readSeqs reads s to its end and checks that its deltas are numbered
// 1, 2, ... with text.
func readSeqs(t *testing.T, s *Stream, from int) (string, *engine.Final) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var text strings.Builder
	want := from
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			t.Fatalf("recv after %q: %v", text.String(), err)
		}
		if ev.Final != nil {
			return text.String(), ev.Final
		}
		if ev.Seq != want || ev.Text == "" {
			t.Fatalf("have delta %+v; want seq %d with text", ev, want)
		}
		want++
		text.WriteString(ev.Text)
	}
}

// checkLog checks that the log holds the deltas 1..n exactly once, their
// text being text, and that the request's output stream holds none.
func checkLog(t *testing.T, rdb redis.UniversalClient, c *Client, lt LogTarget, s *Stream, text string) int {
	t.Helper()
	ctx := context.Background()
	msgs, err := rdb.XRange(ctx, lt.Key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i, m := range msgs {
		if want := fmt.Sprintf("%d-0", i+1); m.ID != want {
			t.Fatalf("log entry %d has id %s; want %s", i, m.ID, want)
		}
		b.WriteString(str(m.Values, logText))
	}
	if b.String() != text {
		t.Fatalf("the log holds %q; the stream read %q", b.String(), text)
	}
	out, err := rdb.XRange(ctx, s.out, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out {
		if k := str(m.Values, "k"); k != kindAccepted && k != kindFinal {
			t.Fatalf("output entry %s of kind %q; want only accepted and final (deltas go to the log)", m.ID, k)
		}
	}
	if keyspace.Slot(s.rec) != keyspace.Slot(lt.Key) || keyspace.Slot(s.out) != keyspace.Slot(lt.Key) {
		t.Fatalf("record %s and output %s are not on the log's slot", s.rec, s.out)
	}
	return len(msgs)
}

// TestLoggedDeltasCrossOnce: a request submitted with a stream log has
// its deltas appended there by the engine, once each, numbered 1, 2, ...
// (only those with text; tokens without text wait for theirs), and read
// back from there; its output stream holds no delta.
func TestLoggedDeltasCrossOnce(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	fe := newFakeEngine(time.Millisecond)
	fe.split = true
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	for _, max := range []int{20, 21} { // 21: the last token never makes text
		if max == 21 {
			// A restarted primary forgets its scripts: the engine's
			// rounds of appends must load theirs again.
			if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		rid := fmt.Sprintf("r%d", max)
		lt := logTarget(prefix, "s{1}", rid)
		s, err := c.SubmitToLog(context.Background(), engine.Request{ID: "acme/s/" + rid, Tenant: "acme", Session: "s{1}", MaxTokens: max}, lt)
		if err != nil {
			t.Fatal(err)
		}
		text, final := readSeqs(t, s, 1)
		if text != fakeText(1, 20) || final.FinishReason != engine.FinishLength || final.Usage.CompletionTokens != max {
			t.Fatalf("max %d: have %q, %+v; want the text of 20 tokens, length, %d tokens", max, text, final, max)
		}
		if n := checkLog(t, rdb, c, lt, s, text); n != 10 {
			t.Fatalf("max %d: the log has %d deltas; want 10", max, n)
		}
		if ttl := rdb.PTTL(context.Background(), lt.Key).Val(); ttl <= 0 || ttl > lt.TTL {
			t.Fatalf("the log's TTL is %v; want up to %v", ttl, lt.TTL)
		}
	}
}

// TestLoggedFailover: an engine dies mid-reply; the one that takes the
// request over goes on with the log's numbering, from the tokens the log
// holds: no gap, no duplicate, one entry per delta.
func TestLoggedFailover(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	f1, f2 := newFakeEngine(5*time.Millisecond), newFakeEngine(5*time.Millisecond)
	f1.split, f2.split = true, true
	o1 := fastEngine(rdb, prefix, "e1", f1)
	o1.DrainTimeout = time.Millisecond // a crash: nothing finishes
	stop1 := startEngine(t, o1)
	startEngine(t, fastEngine(rdb, prefix, "e2", f2))
	waitEngines(t, c, 2)
	sess := ""
	for i := 0; sess == ""; i++ {
		if id, _ := Route("acme/s"+string(rune('a'+i)), c.Engines()); id == "e1" {
			sess = "s" + string(rune('a'+i))
		}
	}
	lt := logTarget(prefix, sess, "r1")
	ctx := context.Background()
	s, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/" + sess + "/r1", Tenant: "acme", Session: sess, MaxTokens: 60}, lt)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for seq := 1; seq <= 5; seq++ {
		ev, err := s.Recv(ctx)
		if err != nil || ev.Final != nil || ev.Seq != seq {
			t.Fatalf("have %+v, %v; want delta %d", ev, err, seq)
		}
		text += ev.Text
	}
	stop1()
	rest, final := readSeqs(t, s, 6)
	if want := fakeText(1, 60); text+rest != want {
		t.Fatalf("have %q; want %q", text+rest, want)
	}
	if final.FinishReason != engine.FinishLength || final.Usage.CompletionTokens != 60 || s.Engine() != "e2" {
		t.Fatalf("have %+v on %s; want length with 60 completion tokens on e2", final, s.Engine())
	}
	if subs := f2.submissions(); len(subs) != 1 || len(subs[0].Generated) < 10 || len(subs[0].Generated)%2 != 0 {
		t.Fatalf("have e2 submissions %+v; want one with the logged deltas' tokens", subs)
	}
	if n := checkLog(t, rdb, c, lt, s, text+rest); n != 30 {
		t.Fatalf("the log has %d deltas; want 30", n)
	}
}

// TestLoggedLogEnded: a log that a gateway's crash recovery ended with a
// done record takes no more deltas, and the engine stops the request.
func TestLoggedLogEnded(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	fe := newFakeEngine(10 * time.Millisecond)
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	lt := logTarget(prefix, "s", "r1")
	ctx := context.Background()
	s, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/s/r1", Tenant: "acme", Session: "s", MaxTokens: 1000}, lt)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Recv(ctx); err != nil || ev.Seq != 1 {
		t.Fatalf("have %+v, %v; want delta 1", ev, err)
	}
	// What recovery writes: a done record after the last delta. The
	// engine appends on meanwhile, so, as recovery does, read the log's
	// end again when it moved between the read and the write.
	var seq int
	for {
		last := rdb.XRevRangeN(ctx, lt.Key, "+", "-", 1).Val()[0].ID
		n, _, _ := strings.Cut(last, "-")
		fmt.Sscan(n, &seq)
		err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lt.Key, ID: fmt.Sprintf("%d-0", seq+1), Values: []any{"done", "{}"}}).Err()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "equal or smaller") || seq >= 1000 {
			t.Fatal(err)
		}
	}
	_, final := readAll(t, s)
	if final.FinishReason != engine.FinishCancelled || final.Usage.CompletionTokens >= 1000 {
		t.Fatalf("have %+v; want cancelled early", final)
	}
	msgs := rdb.XRange(ctx, lt.Key, "-", "+").Val()
	if tail := msgs[len(msgs)-1]; tail.ID != fmt.Sprintf("%d-0", seq+1) {
		t.Fatalf("the log ends with %s %v; want the done record", tail.ID, tail.Values)
	}
}

// TestLoggedConcurrent: many requests at once, whose deltas the engine
// appends in shared rounds: each log holds its own request's deltas, each
// once, in order.
func TestLoggedConcurrent(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	fe := newFakeEngine(time.Millisecond)
	fe.split = true
	o := fastEngine(rdb, prefix, "e1", fe)
	o.Capacity = 64
	startEngine(t, o)
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	const n = 40
	type result struct {
		lt   LogTarget
		s    *Stream
		text string
		err  error
	}
	res := make(chan result, n)
	for i := range n {
		go func() {
			sid, rid := fmt.Sprintf("s%d", i), "r"
			lt := logTarget(prefix, sid, rid)
			s, err := c.SubmitToLog(context.Background(), engine.Request{ID: "acme/" + sid + "/r", Tenant: "acme", Session: sid, MaxTokens: 30 + i}, lt)
			if err != nil {
				res <- result{err: err}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var text strings.Builder
			for want := 1; ; want++ {
				ev, err := s.Recv(ctx)
				if err != nil || ev.Final != nil {
					res <- result{lt: lt, s: s, text: text.String(), err: err}
					return
				}
				if ev.Seq != want {
					res <- result{err: fmt.Errorf("%s: delta %d after %d", sid, ev.Seq, want-1)}
					return
				}
				text.WriteString(ev.Text)
			}
		}()
	}
	for range n {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkLog(t, rdb, c, r.lt, r.s, r.text)
		if !strings.HasPrefix(fakeText(1, 80), r.text) || len(r.text) < len(fakeText(1, 30)) {
			t.Fatalf("have %q; want the fake engine's text", r.text)
		}
	}
}
