package cluster

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

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
