package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
)

// TestKVProbe: the heartbeat's free KV blocks follow a real engine's
// snapshot while a request holds blocks.
func TestKVProbe(t *testing.T) {
	if have := cluster.NewKVProbe(nil).Free(); have != -1 {
		t.Errorf("have %d free without an engine; want -1", have)
	}
	eng := newEngine(t, 5*time.Millisecond)
	probe := cluster.NewKVProbe(eng)
	all := eng.Options().KVBlocks
	if have := probe.Free(); have != all {
		t.Fatalf("have %d free before any request; want all %d", have, all)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := eng.Submit(ctx, engine.Request{Messages: story, MaxTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	low := all
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		low = min(low, probe.Free())
		if ev.Final != nil {
			break
		}
	}
	if low >= all {
		t.Errorf("have at least %d free blocks throughout a request; want fewer than all %d", low, all)
	}
}
