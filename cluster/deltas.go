package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/durable"
)

// Output entries are appended in rounds, not one round trip each: an engine step emits a delta for every running request at once,
// and their appends go to Redis as one pipeline per primary with one
// replica WAIT, instead of a script call and a WAIT per delta. A request
// has at most one append in flight (its pump waits for it, and the
// engine's stream coalesces what comes meanwhile), so a request's deltas
// stay in order whatever the rounds do.

// deltaRounds bounds the rounds in flight.
const deltaRounds = 4

// deltaAppend is one append script call (logAppendScript, appendScript)
// waiting for its round.
type deltaAppend struct {
	sc   *redis.Script
	keys []string
	args []any
	n    int64
	err  error
	done chan struct{}
	// gone: the caller stopped waiting (and may retry): a round that
	// has not sent it yet drops it, so that a retry does not make two.
	gone atomic.Bool
}

// deltaBatcher gathers appends into rounds. Its run loop is owned by
// RunEngine.
type deltaBatcher struct {
	w     *worker
	mu    sync.Mutex // protects pend
	pend  []*deltaAppend
	wake  chan struct{} // cap 1
	slots chan struct{} // rounds in flight
	wg    sync.WaitGroup
}

func newDeltaBatcher(w *worker) *deltaBatcher {
	return &deltaBatcher{w: w, wake: make(chan struct{}, 1), slots: make(chan struct{}, deltaRounds)}
}

// do runs script sc with keys and args in the next round and returns
// its reply, or ctx's error when ctx ends first. The append may still
// land then: both scripts skip a delta whose seq Redis holds, so a
// delta's retry is safe; appendScript's other entries (accepted) may be
// written twice, which their readers allow.
func (b *deltaBatcher) do(ctx context.Context, sc *redis.Script, keys []string, args []any) (int64, error) {
	a := &deltaAppend{sc: sc, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.pend = append(b.pend, a)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-a.done:
		return a.n, a.err
	case <-ctx.Done():
		a.gone.Store(true)
		return 0, ctx.Err()
	}
}

// run starts rounds until ctx ends, then waits for those in flight.
func (b *deltaBatcher) run(ctx context.Context) {
	defer b.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		b.gather()
		select {
		case <-ctx.Done():
			return
		case b.slots <- struct{}{}: // while every slot is busy, more gather
		}
		b.mu.Lock()
		batch := b.pend
		b.pend = nil
		b.mu.Unlock()
		if len(batch) == 0 {
			<-b.slots
			continue
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.slots }()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b.round(rctx, batch)
			cancel()
		}()
	}
}

// gather lets the other pumps of a step queue their appends before a
// round starts: it yields while the queue still grows, a few times at
// most.
func (b *deltaBatcher) gather() {
	b.mu.Lock()
	n := len(b.pend)
	b.mu.Unlock()
	for range 4 {
		runtime.Gosched()
		b.mu.Lock()
		m := len(b.pend)
		b.mu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

// round sends batch, one pipeline per primary, and answers every append.
func (b *deltaBatcher) round(ctx context.Context, batch []*deltaAppend) {
	groups := map[string][]*deltaAppend{}
	var order []string
	cc, isCluster := b.w.o.Redis.(*redis.ClusterClient)
	for _, a := range batch {
		if a.gone.Load() {
			a.err = errors.New("cluster: append given up")
			close(a.done)
			continue
		}
		node := ""
		if isCluster {
			m, err := cc.MasterForKey(ctx, a.keys[0])
			if err != nil {
				a.err = err
				close(a.done)
				continue
			}
			node = m.Options().Addr
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], a)
	}
	failed := false
	for _, node := range order {
		g := groups[node]
		if again := b.send(ctx, g); len(again) > 0 {
			// A primary that did not know a script (new, or promoted):
			// load it and send those again.
			var err error
			loaded := map[*redis.Script]bool{}
			for _, a := range again {
				if !loaded[a.sc] && err == nil {
					loaded[a.sc] = true
					err = a.sc.Load(ctx, b.w.o.Redis).Err()
				}
			}
			if err == nil {
				again = b.send(ctx, again)
				err = errors.New("NOSCRIPT after a load")
			}
			for _, a := range again {
				a.err = fmt.Errorf("cluster: load an append script: %w", err)
			}
		}
		for _, a := range g {
			failed = failed || a.err != nil
			close(a.done)
		}
	}
	if failed && isCluster {
		// A failover moves slots: only a reload makes MasterForKey name
		// the promoted replica.
		cc.ReloadState(ctx)
	}
}

// send pipelines g (one primary) and records each reply; it returns the
// appends the server answered NOSCRIPT, untouched.
func (b *deltaBatcher) send(ctx context.Context, g []*deltaAppend) (noscript []*deltaAppend) {
	cmds := make([]*redis.Cmd, len(g))
	err := b.w.dw.Pipelined(ctx, g[0].keys[0], func(p redis.Pipeliner) {
		for i, a := range g {
			cmds[i] = a.sc.EvalSha(ctx, p, a.keys, a.args...)
		}
	})
	if errors.Is(err, durable.ErrNotReplicated) {
		// The scripts ran: running them again would change nothing
		// (the log skips a seq it holds), waiting would stall every
		// request of the round.
		b.w.log.Warn("cluster: deltas reached the primary but not its replica in time", "err", err)
		err = nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		err = nil // one command's refusal: each command says its own
	}
	for i, a := range g {
		c := cmds[i]
		switch {
		case c == nil:
			a.err = err
		case redis.HasErrorPrefix(c.Err(), "NOSCRIPT"):
			noscript = append(noscript, a)
		case c.Err() != nil:
			a.err = c.Err()
		case err != nil:
			a.err = err
		default:
			a.n, a.err = c.Int64()
		}
		if a.err == nil && c == nil {
			a.err = errors.New("cluster: the delta round did not start")
		}
	}
	return noscript
}
