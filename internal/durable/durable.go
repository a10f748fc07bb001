// Package durable makes a Redis write count as stored only once replicas
// hold it too.
//
// Redis replicates asynchronously: a primary acknowledges a write before
// its replicas have it, and when that primary dies and a replica is
// promoted (Redis Cluster, Sentinel) the last writes are gone although
// they were acknowledged. AOF does not help there: the dead primary's file
// is not the one that serves. WAIT closes the gap: sent on the connection
// that wrote, it returns once that many replicas have everything the
// connection wrote. A Writer sends a group of writes and the WAIT together
// on one connection to the primary of the group's slot.
//
// A Writer waits for the replicas the primary has, up to Replicas: right
// after a failover the promoted replica often has none left, and refusing
// every write until one is back would turn the failover into an outage.
package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Writer sends writes that must survive a failover. Safe for concurrent
// use.
type Writer struct {
	rdb      redis.UniversalClient
	replicas int
	timeout  time.Duration

	mu    sync.Mutex // protects known
	known map[string]replicaCount
}

type replicaCount struct {
	n  int
	at time.Time
}

// Options configure a Writer; every zero field takes the default noted.
type Options struct {
	// Replicas is how many replicas must hold a write before it counts
	// (0: none; the Writer is then a plain pipeline).
	Replicas int
	// Timeout bounds the wait for replicas (500ms); it must stay under the
	// client's read timeout. Fewer replicas than expected by then is
	// ErrNotReplicated: the write is on the primary only.
	Timeout time.Duration
}

// New returns a Writer over rdb.
func New(rdb redis.UniversalClient, o Options) *Writer {
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	return &Writer{rdb: rdb, replicas: o.Replicas, timeout: o.Timeout, known: map[string]replicaCount{}}
}

// ErrNotReplicated says a write reached fewer replicas than required.
var ErrNotReplicated = errors.New("durable: write not on enough replicas")

// Pipelined sends fn's commands, which must all be on key's hash slot, and
// then waits for the primary's replicas (at most Replicas). It returns
// ErrNotReplicated when the replicas fell short, else the first command's
// error, or nil.
func (w *Writer) Pipelined(ctx context.Context, key string, fn func(p redis.Pipeliner)) error {
	if w.replicas <= 0 {
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { fn(p); return nil })
		return err
	}
	var node *redis.Client
	switch c := w.rdb.(type) {
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, key); err != nil {
			return fmt.Errorf("durable: primary of %s: %w", key, err)
		}
	case *redis.Client:
		node = c
	default:
		return fmt.Errorf("durable: client %T cannot wait for replicas", w.rdb)
	}
	// One connection for the writes and the WAIT: WAIT counts what its
	// own connection wrote.
	conn := node.Conn()
	defer conn.Close()
	want, err := w.expected(ctx, conn)
	if err != nil {
		return err
	}
	var wait *redis.Cmd
	_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		fn(p)
		if want > 0 {
			wait = p.Do(ctx, "wait", want, w.timeout.Milliseconds())
		}
		return nil
	})
	if wait == nil || wait.Err() != nil {
		return err
	}
	// The WAIT ran, so the connection held: err, if any, is one command's
	// refusal, and the caller tells the others' writes apart by their
	// own errors. Those writes count only once the replicas hold them.
	if n, _ := wait.Int64(); n < int64(want) {
		w.forget(conn)
		return fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, n, want, w.timeout)
	}
	return err
}

// expected is how many replicas to wait for on conn's server: the ones it
// has, at most Replicas, read at most once a second.
func (w *Writer) expected(ctx context.Context, conn *redis.Conn) (int, error) {
	addr := conn.String()
	w.mu.Lock()
	k, ok := w.known[addr]
	w.mu.Unlock()
	if ok && time.Since(k.at) < time.Second {
		return min(k.n, w.replicas), nil
	}
	info, err := conn.Info(ctx, "replication").Result()
	if err != nil {
		return 0, fmt.Errorf("durable: read replication state: %w", err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	w.mu.Lock()
	w.known[addr] = replicaCount{n: n, at: time.Now()}
	w.mu.Unlock()
	return min(n, w.replicas), nil
}

func (w *Writer) forget(conn *redis.Conn) {
	w.mu.Lock()
	delete(w.known, conn.String())
	w.mu.Unlock()
}

// Run runs script sc, whose keys are on one slot, as Pipelined does its
// commands. It sends the script's hash (EVALSHA) and loads the script
// only where a server does not know it yet. When the script ran but the
// replicas fell short, the command's error is ErrNotReplicated and Val
// still holds the script's reply.
func (w *Writer) Run(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	if w.replicas <= 0 {
		return sc.Run(ctx, w.rdb, keys, args...)
	}
	for attempt := 0; ; attempt++ {
		var cmd *redis.Cmd
		err := w.Pipelined(ctx, keys[0], func(p redis.Pipeliner) { cmd = sc.EvalSha(ctx, p, keys, args...) })
		if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") && attempt == 0 {
			if lerr := sc.Load(ctx, w.rdb).Err(); lerr != nil {
				return redis.NewCmdResult(nil, fmt.Errorf("durable: load script: %w", lerr))
			}
			continue
		}
		if cmd == nil {
			return redis.NewCmdResult(nil, err)
		}
		if err != nil && cmd.Err() == nil {
			// The script ran; its value stays readable with Val for a
			// caller that accepts a write on the primary alone.
			cmd.SetErr(err)
		}
		return cmd
	}
}
