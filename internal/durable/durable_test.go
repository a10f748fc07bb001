package durable

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/testredis"
)

var incr = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// A write that returns is on the replica already: read there, at once,
// every one of many writes is seen.
func TestWritesAreOnTheReplicaWhenTheyReturn(t *testing.T) {
	g := testredis.StartSentinel(t)
	w := New(g.Client(), Options{Replicas: 1})
	replica := redis.NewClient(&redis.Options{Addr: g.Replica.Addr()})
	defer replica.Close()
	ctx := context.Background()
	for i := range 50 {
		key := "k" + strconv.Itoa(i)
		if err := w.Pipelined(ctx, key, func(p redis.Pipeliner) { p.Set(ctx, key, i, 0) }); err != nil {
			t.Fatal(err)
		}
		if v, err := replica.Get(ctx, key).Int(); err != nil || v != i {
			t.Fatalf("replica has %d, %v for %s right after the write; want %d", v, err, key, i)
		}
		if n, err := w.Run(ctx, incr, []string{"n"}).Int(); err != nil || n != i+1 {
			t.Fatalf("script: have %d, %v; want %d", n, err, i+1)
		}
		if v, _ := replica.Get(ctx, "n").Int(); v != i+1 {
			t.Fatalf("replica has n=%d right after the script; want %d", v, i+1)
		}
	}
}

// A server without replicas is not waited on: writes go through at once.
func TestNoReplicaNoWait(t *testing.T) {
	s := testredis.Start(t)
	w := New(s.Client(), Options{Replicas: 1, Timeout: 5 * time.Second})
	ctx := context.Background()
	start := time.Now()
	for i := range 20 {
		if n, err := w.Run(ctx, incr, []string{"n"}).Int(); err != nil || n != i+1 {
			t.Fatalf("have %d, %v; want %d", n, err, i+1)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("20 writes took %v: they waited for a replica that does not exist", d)
	}
}

// TestRefusedCommandStillWaitsForReplicas: one command of a pipeline
// refused by Redis does not hide a short WAIT. Callers take the other
// commands' writes as done when only a refusal came back, so a write the
// replicas lack must still say ErrNotReplicated.
func TestRefusedCommandStillWaitsForReplicas(t *testing.T) {
	s := testredis.Start(t)
	rdb := s.Client()
	w := New(rdb, Options{Replicas: 1, Timeout: 50 * time.Millisecond})
	// The primary counts a replica that never acknowledges: what a
	// replica stalled behind its link looks like to WAIT.
	w.known[rdb.String()] = replicaCount{n: 1, at: time.Now().Add(time.Hour)}
	ctx := context.Background()
	var first, refused *redis.IntCmd
	err := w.Pipelined(ctx, "k", func(p redis.Pipeliner) {
		first = p.Incr(ctx, "n")
		p.Set(ctx, "k", "not a number", 0)
		refused = p.Incr(ctx, "k")
	})
	if first.Err() != nil || refused.Err() == nil {
		t.Fatalf("have INCR n: %v, INCR k: %v; want the second refused", first.Err(), refused.Err())
	}
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("have %v; want ErrNotReplicated: the replicas hold none of the writes", err)
	}
}
