package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// TestLongReplyAttach: a gateway that takes over a turn (Attach by its
// Handle) reads the whole generation from its first delta, however long
// the reply, logged or not. A log cap of 10 stands for the default 10000
// with a reply of more deltas than that: the engine must not trim a
// running request's log, which is the only copy of its reply.
func TestLongReplyAttach(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", newFakeEngine(time.Millisecond)))
	a := fastClient(t, rdb, prefix)
	b := fastClient(t, rdb, prefix)
	waitEngines(t, a, 1)
	ctx := context.Background()
	const n = 400
	for _, logged := range []bool{false, true} {
		t.Run(fmt.Sprintf("logged=%v", logged), func(t *testing.T) {
			id := fmt.Sprintf("acme/s/long-%v", logged)
			req := engine.Request{ID: id, MaxTokens: n, Prompt: []int32{1}}
			var st engine.Events
			var err error
			if logged {
				st, err = a.GenerateToLog(ctx, req, keyspace.New(prefix).RequestLog("s", id), 10, time.Minute)
			} else {
				st, err = a.Generate(ctx, req)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 300; i++ {
				if ev, err := st.Recv(ctx); err != nil || ev.Text != fakeText(i, i) {
					t.Fatalf("first reader, delta %d: have %+v, %v", i, ev, err)
				}
			}
			at, err := b.Attach(ctx, a.Handle(st))
			if err != nil {
				t.Fatal(err)
			}
			text, final := readAll(t, at.(*Stream))
			readAll(t, st.(*Stream))
			if text != fakeText(1, n) || final.FinishReason != engine.FinishLength {
				t.Fatalf("attached reader: have %d bytes, %+v; want the whole reply (%d bytes), length", len(text), final, len(fakeText(1, n)))
			}
		})
	}
}

// TestLongReplyFailover: an engine dies after more deltas than the log's
// cap; the next engine reads Generated back from the log and continues
// the reply to its length, as it does for a short one.
func TestLongReplyFailover(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	f1, f2 := newFakeEngine(time.Millisecond), newFakeEngine(time.Millisecond)
	o1 := fastEngine(rdb, prefix, "e1", f1)
	o1.DrainTimeout = time.Millisecond
	stop1 := startEngine(t, o1)
	startEngine(t, fastEngine(rdb, prefix, "e2", f2))
	waitEngines(t, c, 2)
	sess := ""
	for i := 0; sess == ""; i++ {
		if id, _ := Route("acme/s"+string(rune('a'+i)), c.Engines()); id == "e1" {
			sess = "s" + string(rune('a'+i))
		}
	}
	ctx := context.Background()
	lt := LogTarget{Key: keyspace.New(prefix).RequestLog(sess, "r1"), MaxLen: 10, TTL: time.Minute}
	s, err := c.SubmitToLog(ctx, engine.Request{ID: "acme/" + sess + "/r1", Tenant: "acme", Session: sess, MaxTokens: 600}, lt)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for seq := 1; seq <= 300; seq++ {
		ev, err := s.Recv(ctx)
		if err != nil || ev.Final != nil {
			t.Fatalf("have %+v, %v", ev, err)
		}
		text += ev.Text
	}
	stop1()
	rest, final := readAll(t, s)
	if text+rest != fakeText(1, 600) || final.FinishReason != engine.FinishLength {
		t.Fatalf("after the engine's death: have %d more bytes, %+v; want the reply continued to its length", len(rest), final)
	}
}
