package cluster

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// TestClusterPrimaryFailoverMidStream kills the Redis Cluster primary that
// holds a running request's fence and output while the engine writes it.
// Its replica takes over; the engine's writes wait and retry, and the
// gateway side reads every delta once, in order, to the final.
func TestClusterPrimaryFailoverMidStream(t *testing.T) {
	if testredis.IsClusterURL() {
		t.Skip("starts a cluster of its own: runs once, in the single-server pass")
	}
	c := testredis.StartCluster(t)
	rdb := c.Client()
	const prefix = "fo:"
	fe := newFakeEngine(60 * time.Millisecond)
	startEngine(t, fastEngine(rdb, prefix, "e1", fe))
	cl := fastClient(t, rdb, prefix)
	waitEngines(t, cl, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n = 60
	s, err := cl.Submit(ctx, engine.Request{ID: "r1", Tenant: "acme", Session: "s1", MaxTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var final *engine.Final
	seq := 0
	killed := false
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Final != nil {
			final = ev.Final
			continue
		}
		if ev.Seq != seq+1 {
			t.Fatalf("have delta %d after %d; want no gap and no repeat", ev.Seq, seq)
		}
		seq = ev.Seq
		text += ev.Text
		if seq == 10 && !killed {
			killed = true
			p := c.KillPrimaryOf(newKeys(prefix).req(s.rk))
			t.Logf("killed primary %s after delta 10", p.Addr())
		}
	}
	if !killed || text != fakeText(1, n) || final == nil || final.FinishReason != engine.FinishLength {
		t.Fatalf("have %q, %+v; want %q and length", text, final, fakeText(1, n))
	}
}

// TestStreamSkipsARepeatedDelta: an output stream that holds a delta
// twice, as a failover leaves it when the gateway read the engine's
// append on the primary before the replica held it (the engine's retry
// writes it again on the promoted replica), is read with each delta once.
func TestStreamSkipsARepeatedDelta(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	c := fastClient(t, rdb, prefix)
	ctx := context.Background()
	const rk = "r1#0a1b2c"
	rec, out := newKeys(prefix).forRequest(rk, "")
	if err := rdb.HSet(ctx, rec, "fence", 1).Err(); err != nil {
		t.Fatal(err)
	}
	add := func(fields ...any) {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: out, Values: fields}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	add("k", kindAccepted, "e", "e1", "f", 1)
	add("k", kindDelta, "s", 1, "x", "one ", "t", "1")
	add("k", kindDelta, "s", 2, "x", "two ", "t", "2")
	add("k", kindDelta, "s", 2, "x", "two ", "t", "2")
	add("k", kindAccepted, "e", "e1", "f", 1)
	add("k", kindDelta, "s", 4, "x", "three four", "t", "3,4")
	add("k", kindFinal, "j", `{"reason":"length"}`)
	ev, err := c.Attach(ctx, rk)
	if err != nil {
		t.Fatal(err)
	}
	text, final := readAll(t, ev.(*Stream))
	if text != "one two three four" || final == nil || final.FinishReason != engine.FinishLength {
		t.Fatalf("have %q, %+v; want each delta once and the final", text, final)
	}
}

// scriptEngine plays one fixed list of events for every request.
type scriptEngine []engine.Event

func (g scriptEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return &scriptEvents{evs: g}, nil
}

func (g scriptEngine) Cancel(string) {}

type scriptEvents struct {
	evs []engine.Event
	at  int
}

func (s *scriptEvents) Recv(ctx context.Context) (engine.Event, error) {
	if s.at == len(s.evs) {
		return engine.Event{}, io.EOF
	}
	s.at++
	return s.evs[s.at-1], nil
}

// TestTextAfterTheLastTokenArrives: text that comes after the last token
// with that token's Seq (the detokenizer's flush of an unfinished
// character at the end) reaches the client; the output's repeat check
// must not take it for a second copy of the token's delta.
func TestTextAfterTheLastTokenArrives(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", scriptEngine{
		{Seq: 1, Tokens: []int32{7}, Text: "a"},
		{Seq: 2, Tokens: []int32{200}},
		{Seq: 2, Text: "\uFFFD"},
		{Final: &engine.Final{FinishReason: engine.FinishLength}},
	}))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	s, err := c.Submit(context.Background(), engine.Request{ID: "r1", Tenant: "acme", Session: "s", MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	text, final := readAll(t, s)
	if text != "a\uFFFD" || final == nil || final.FinishReason != engine.FinishLength {
		t.Fatalf("have %q, %+v; want %q and the final", text, final, "a\uFFFD")
	}
	waitPending(t, rdb, prefix)
}
