package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/durable"
)

// EngineOptions configure RunEngine. Redis and Engine are required; every
// zero field takes the default noted on it.
type EngineOptions struct {
	Redis redis.UniversalClient
	// Prefix is put before every key ("": none); it must match the
	// gateways'.
	Prefix string
	// ID names this engine: its request stream and consumer (NewID()).
	ID string
	// Addr is the HTTP address advertised in the heartbeat ("").
	Addr string
	// Engine runs the requests: the local *engine.Engine. When it is an
	// engine.SessionWarmer, the gateways' word on which sessions are live
	// reaches it.
	Engine engine.Generator
	// Capacity is how many requests this engine holds at once, running or
	// queued in the engine (64). It never reads more entries than it has
	// free slots; gateways route elsewhere when it is full.
	Capacity int
	// FreeKV reports free device KV blocks for the heartbeat (nil: -1).
	FreeKV func() int
	// Model is the served model the heartbeat names, for gateways that
	// have no model of their own (nil: not named).
	Model *engine.ModelCard
	// HeartbeatInterval and HeartbeatTTL pace the heartbeat (1s, 5s).
	HeartbeatInterval time.Duration
	HeartbeatTTL      time.Duration
	// ClaimInterval is how often running requests are refreshed and dead
	// engines' requests looked for (1s). ClaimTimeout is how long a
	// request may go unrefreshed before another engine takes it over
	// (10s); it must be several ClaimIntervals.
	ClaimInterval time.Duration
	ClaimTimeout  time.Duration
	// MaxAttempts is how many engines may take a request before it ends
	// with an error instead (3).
	MaxAttempts int
	// WaitReplicas is how many Redis replicas must hold a request's
	// acquisition and each output entry before the engine goes on (WAIT),
	// so that a primary's failover cannot take back a fence or a delta a
	// gateway may have passed on; a primary with fewer replicas is waited
	// on for the ones it has (default 1; -1 never waits).
	WaitReplicas int
	// RetryTimeout is how long a write is retried while Redis is
	// unreachable before the request is abandoned to a takeover (60s).
	RetryTimeout time.Duration
	// DrainTimeout is how long RunEngine waits, after its ctx ends, for
	// running requests to finish; the rest are left to other engines
	// (30s).
	DrainTimeout time.Duration
	// OutTTL is how long a request's keys live after their last write
	// (10m).
	OutTTL time.Duration
	// ProgressInterval is how often a logged request whose tokens make
	// no text yet (nothing to append to its log) tells its gateway that
	// it is alive, with an entry in its output stream, so that the
	// gateway's IdleTimeout (60s) counts tokens, not only text (10s).
	ProgressInterval time.Duration
	// Logger (slog.Default()).
	Logger *slog.Logger
}

func (o *EngineOptions) validate() error {
	if o.Redis == nil {
		return errors.New("cluster: EngineOptions.Redis is required")
	}
	if o.Engine == nil {
		return errors.New("cluster: EngineOptions.Engine is required")
	}
	if o.ID == "" {
		o.ID = NewID()
	}
	if strings.ContainsAny(o.ID, "/{}") || o.ID == "*shared" {
		return fmt.Errorf("cluster: engine id %q may not contain '/', '{' or '}'", o.ID)
	}
	if o.Capacity <= 0 {
		o.Capacity = 64
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	def(&o.HeartbeatInterval, time.Second)
	def(&o.HeartbeatTTL, 5*time.Second)
	def(&o.ClaimInterval, time.Second)
	def(&o.ClaimTimeout, 10*time.Second)
	def(&o.RetryTimeout, 60*time.Second)
	if o.WaitReplicas == 0 {
		o.WaitReplicas = 1
	}
	def(&o.DrainTimeout, 30*time.Second)
	def(&o.OutTTL, 10*time.Minute)
	def(&o.ProgressInterval, 10*time.Second)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ClaimTimeout < 2*o.ClaimInterval {
		return fmt.Errorf("cluster: ClaimTimeout %v must be at least two ClaimIntervals (%v)", o.ClaimTimeout, o.ClaimInterval)
	}
	return nil
}

// worker is one engine's side of the request path.
type worker struct {
	o   EngineOptions
	k   keys
	log *slog.Logger
	dw  *durable.Writer // acquisitions and output entries wait for replicas
	// deltas appends output entries in rounds (deltas.go).
	deltas *deltaBatcher

	jobs sync.WaitGroup

	mu       sync.Mutex // protects the fields below
	inflight map[string]*job
	draining bool
	freed    chan struct{} // cap 1: a slot was freed
}

// job is one request this engine holds.
type job struct {
	rk, queue, entry string
	rec, out         string    // its fence record and output stream
	log              LogTarget // where its deltas go (Key "": the output)
	// owner is the log's claim key (keyspace LogOwner) when the
	// submission claimed the log, else "": only while the claim is rk
	// does the request append.
	owner   string
	req     engine.Request
	bad     error           // the request did not decode: refuse it
	renewed time.Time       // when a delta append last renewed the TTLs
	ctx     context.Context // cancelled to cancel the request
	cancel  context.CancelFunc
}

// RunEngine feeds requests from Redis to o.Engine and writes their results
// back, until ctx ends; then it stops taking requests, waits up to
// DrainTimeout for the running ones, and returns. Requests it could not
// finish stay pending and are taken over by other engines. It survives
// Redis outages (retrying, logging once per outage) and returns an error
// only for bad options.
func RunEngine(ctx context.Context, o EngineOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	w := &worker{o: o, k: newKeys(o.Prefix), dw: durable.New(o.Redis, durable.Options{Replicas: o.WaitReplicas}), log: o.Logger.With("engine", o.ID), inflight: map[string]*job{}, freed: make(chan struct{}, 1)}
	w.deltas = newDeltaBatcher(w)

	// Jobs run under runCtx, which outlives ctx by the drain; background
	// loops under bgCtx, which ends after the jobs; the heartbeat under
	// ctx, so gateways stop routing here as soon as the drain starts.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(5)
	go func() {
		defer bg.Done()
		w.warmth(bgCtx)
	}()
	go func() {
		defer bg.Done()
		w.deltas.run(bgCtx)
	}()
	go func() {
		defer bg.Done()
		heartbeat(ctx, o.Redis, w.k, o.HeartbeatInterval, o.HeartbeatTTL, w.info, w.log)
	}()
	go func() {
		defer bg.Done()
		w.control(bgCtx)
	}()
	go func() {
		defer bg.Done()
		w.sweepLoop(bgCtx, runCtx)
	}()

	w.readLoop(ctx, runCtx)

	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.DrainTimeout):
		w.log.Warn("cluster: drain timed out; leaving running requests to other engines")
		stopRun()
		<-done
	}
	stopBG()
	bg.Wait()
	return nil
}

func (w *worker) info() NodeInfo {
	w.mu.Lock()
	n := len(w.inflight)
	w.mu.Unlock()
	free := -1
	if w.o.FreeKV != nil {
		free = w.o.FreeKV()
	}
	return NodeInfo{Role: RoleEngine, ID: w.o.ID, Addr: w.o.Addr, Load: n, Capacity: w.o.Capacity, FreeKV: free, Model: w.o.Model, Started: started}
}

func (w *worker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return 0
	}
	return w.o.Capacity - len(w.inflight)
}

// ensureGroup creates the consumer group on queue (and the stream).
func (w *worker) ensureGroup(ctx context.Context, queue string) error {
	err := w.o.Redis.XGroupCreateMkStream(ctx, queue, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("cluster: create group on %s: %w", queue, err)
	}
	return w.o.Redis.SAdd(ctx, w.k.queues(), queue).Err()
}

// readLoop takes new entries from this engine's stream and the shared one
// while there are free slots, until ctx ends.
func (w *worker) readLoop(ctx, runCtx context.Context) {
	own, shared := w.k.queue(w.o.ID), w.k.shared()
	ready := false
	failing := false
	backoff := 50 * time.Millisecond
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for ctx.Err() == nil {
		if !ready {
			err := w.ensureGroup(ctx, own)
			if err == nil {
				err = w.ensureGroup(ctx, shared)
			}
			if err != nil {
				if !failing && ctx.Err() == nil {
					w.log.Warn("cluster: cannot set up request streams; retrying", "err", err)
					failing = true
				}
				if !pause() {
					return
				}
				continue
			}
			ready = true
		}
		n := w.free()
		if n <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.freed:
			case <-time.After(w.o.ClaimInterval):
			}
			continue
		}
		// The two streams live on different hash slots (by engine), so
		// they are read apart: the shared one without blocking, then this
		// engine's own with a short block. A shared entry waits at most
		// one block: it is there only when every engine was saturated or
		// none was known, so it waits for a free slot anyway.
		res, err := w.o.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: w.o.ID, Streams: []string{shared, ">"},
			Count: int64(n), Block: -1,
		}).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		if err == nil {
			n -= countMessages(res)
			if n > 0 {
				var mine []redis.XStream
				mine, err = w.o.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
					Group: group, Consumer: w.o.ID, Streams: []string{own, ">"},
					// A short block: go-redis does not end a blocked read
					// when ctx ends, and a drain should start promptly.
					Count: int64(n), Block: 250 * time.Millisecond,
				}).Result()
				if errors.Is(err, redis.Nil) {
					err = nil
				}
				res = append(res, mine...)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				ready = false // Redis lost its data: set up again
			}
			if !failing {
				w.log.Warn("cluster: reading requests failing; retrying", "err", err)
				failing = true
			}
			if !pause() {
				return
			}
			continue
		}
		if failing {
			w.log.Info("cluster: reading requests again")
			failing = false
		}
		backoff = 50 * time.Millisecond
		for _, st := range res {
			for _, m := range st.Messages {
				w.take(runCtx, st.Stream, m)
			}
		}
	}
}

func countMessages(res []redis.XStream) int {
	n := 0
	for _, st := range res {
		n += len(st.Messages)
	}
	return n
}

// take starts a job for queue entry m unless this engine holds it already.
func (w *worker) take(runCtx context.Context, queue string, m redis.XMessage) {
	rk := str(m.Values, fieldKey)
	if rk == "" {
		// Not a request any version wrote: drop it rather than have every
		// engine trip on it forever.
		w.log.Warn("cluster: dropping a request entry without a key", "queue", queue, "entry", m.ID)
		w.ack(queue, m.ID)
		return
	}
	// A request that does not decode (a newer wire version, a bad
	// field) is refused like one the engine refuses, so its gateway
	// hears why at once.
	r, bad := decodeRequest(str(m.Values, fieldVersion), str(m.Values, fieldRequest))
	lt, lerr := entryLog(m.Values)
	if bad == nil {
		bad = lerr
	}
	if bad != nil {
		w.log.Warn("cluster: refusing a request entry that does not decode", "queue", queue, "entry", m.ID, "err", bad)
		if !errors.As(bad, new(*engine.Error)) {
			bad = &engine.Error{Code: engine.CodeBadRequest, Message: bad.Error()}
		}
	}
	w.mu.Lock()
	if _, ok := w.inflight[rk]; ok {
		w.mu.Unlock()
		return // a takeover handed us back our own running request
	}
	jctx, cancel := context.WithCancel(runCtx)
	j := &job{rk: rk, queue: queue, entry: m.ID, log: lt, req: r, bad: bad, ctx: jctx, cancel: cancel}
	j.rec, j.out = w.k.forRequest(rk, lt.Key)
	if lt.Key != "" && str(m.Values, fieldLogOwned) == "1" {
		j.owner = w.k.ks.LogOwner(lt.Key)
	}
	w.inflight[rk] = j
	w.mu.Unlock()
	w.jobs.Add(1)
	go func() {
		defer w.jobs.Done()
		defer w.release(j)
		w.run(runCtx, j)
	}()
}

// entryLog reads a queue entry's stream log target (Key "": none). A
// version 2 entry must name one; a bad cap or TTL is an error, with the
// key kept so that the refusal goes where the gateway reads.
func entryLog(v map[string]any) (LogTarget, error) {
	lt := LogTarget{Key: str(v, fieldLog)}
	if lt.Key == "" {
		if str(v, fieldVersion) == "2" {
			return lt, errors.New("cluster: a version 2 request entry without its stream log")
		}
		return lt, nil
	}
	n, err := strconv.ParseInt(str(v, fieldLogMax), 10, 64)
	if err != nil || n <= 0 {
		return lt, fmt.Errorf("cluster: stream log cap %q", str(v, fieldLogMax))
	}
	ms, err := strconv.ParseInt(str(v, fieldLogTTL), 10, 64)
	if err != nil || ms <= 0 {
		return lt, fmt.Errorf("cluster: stream log TTL %q", str(v, fieldLogTTL))
	}
	lt.MaxLen, lt.TTL = n, time.Duration(ms)*time.Millisecond
	return lt, nil
}

func (w *worker) release(j *job) {
	j.cancel()
	w.mu.Lock()
	delete(w.inflight, j.rk)
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// retry runs f until it succeeds, f says stop, runCtx ends or
// RetryTimeout passes since the first failure.
func (w *worker) retry(runCtx context.Context, what string, f func(ctx context.Context) error) error {
	backoff := 20 * time.Millisecond
	var first time.Time
	for {
		ctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil || runCtx.Err() != nil || errors.Is(err, errStop) {
			return err
		}
		if first.IsZero() {
			first = time.Now()
			w.log.Warn("cluster: "+what+" failing; retrying", "err", err)
		} else if time.Since(first) > w.o.RetryTimeout {
			return err
		}
		select {
		case <-runCtx.Done():
			return runCtx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// errStop ends a retry: the outcome is final, not a Redis failure.
var errStop = errors.New("cluster: stop")

// lostError says this engine no longer owns a request.
type lostError struct{ code int64 }

func (e *lostError) Error() string {
	if e.code == appendDone {
		return "cluster: request already done"
	}
	return "cluster: request taken over by another engine"
}

func (e *lostError) Unwrap() error { return errStop }

// appendEntry appends fields to j's output under fence; last marks the
// final entry. It reports whether the request's cancel flag is set.
func (w *worker) appendEntry(runCtx context.Context, j *job, fence int64, last bool, fields ...any) (cancelled bool, err error) {
	return w.appendOut(runCtx, j, fence, last, 0, fields...)
}

// appendOut is appendEntry for a delta of order key order (outOrder; 0:
// not a delta), whose retry does not write it twice.
func (w *worker) appendOut(runCtx context.Context, j *job, fence int64, last bool, order int, fields ...any) (cancelled bool, err error) {
	fin := "0"
	if last {
		fin = "1"
	}
	args := append([]any{fence, fin, w.o.OutTTL.Milliseconds(), w.k.gatewayChan(""), j.rk, order}, fields...)
	err = w.retry(runCtx, "appending output", func(ctx context.Context) error {
		n, err := w.deltas.do(ctx, appendScript, []string{j.rec, j.out}, args)
		if err != nil {
			return fmt.Errorf("cluster: append to %s: %w", j.rk, err)
		}
		if n < 0 {
			return &lostError{n}
		}
		cancelled = n == appendCancelled
		return nil
	})
	return cancelled, err
}

// appendDelta appends delta seq (fields) to j's stream log under fence.
// It reports whether the request should stop: its cancel flag is set, or
// the log was ended by a gateway's crash recovery, so nobody reads on.
func (w *worker) appendDelta(runCtx context.Context, j *job, fence int64, seq int, fields ...any) (stop bool, err error) {
	// The TTLs are renewed now and then, not with every delta: the final
	// entry and the gateway's done record renew them in full.
	now := time.Now()
	renew := "0"
	if j.renewed.IsZero() || now.Sub(j.renewed) >= min(w.o.OutTTL, j.log.TTL)/4 {
		renew = "1"
	}
	owned, owner := "0", j.log.Key+":unclaimed" // any key of the log's slot
	if j.owner != "" {
		owned, owner = "1", j.owner
	}
	args := append([]any{fence, w.o.OutTTL.Milliseconds(), w.k.gatewayChan(""), j.rk, seq, j.log.TTL.Milliseconds(), renew, owned}, fields...)
	defer func() {
		if err == nil && renew == "1" {
			j.renewed = now
		}
	}()
	err = w.retry(runCtx, "appending output", func(ctx context.Context) error {
		n, err := w.deltas.do(ctx, logAppendScript, []string{j.rec, j.out, j.log.Key, owner}, args)
		if err != nil {
			return fmt.Errorf("cluster: append delta %d of %s: %w", seq, j.rk, err)
		}
		switch {
		case n == appendLogEnded:
			w.log.Warn("cluster: the request's stream log was ended by its gateway, or claimed by a newer submission; stopping", "request", j.req.ID, "seq", seq)
			stop = true
		case n < 0:
			return &lostError{n}
		default:
			stop = n == appendCancelled
		}
		return nil
	})
	return stop, err
}

// durableRun runs a script through the durable writer. A script that ran
// but whose replicas lagged past the wait is taken as done (its reply is
// kept): running it again would append a second copy of the entry.
func (w *worker) durableRun(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := w.dw.Run(ctx, sc, keys, args...)
	if errors.Is(cmd.Err(), durable.ErrNotReplicated) {
		w.log.Warn("cluster: a write reached the primary but not its replica in time", "err", cmd.Err())
		return redis.NewCmdResult(cmd.Val(), nil)
	}
	return cmd
}

// ack removes j's queue entry: the request is done.
func (w *worker) ack(queue, entry string) {
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := w.o.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XAck(ctx, queue, group, entry)
			p.XDel(ctx, queue, entry)
			return nil
		})
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Left pending: whoever takes it over finds the request done and
	// acknowledges it then.
}

// run owns one request from acquisition to its final entry.
func (w *worker) run(runCtx context.Context, j *job) {
	log := w.log.With("request", j.req.ID)
	var fence int64
	var cancelFlag bool
	err := w.retry(runCtx, "acquiring a request", func(ctx context.Context) error {
		res, err := w.durableRun(ctx, acquireScript, []string{j.rec}, w.o.ID, w.o.OutTTL.Milliseconds()).Int64Slice()
		if err != nil {
			return fmt.Errorf("cluster: acquire %s: %w", j.rk, err)
		}
		if len(res) != 2 {
			return fmt.Errorf("cluster: acquire %s: reply %v", j.rk, res)
		}
		fence, cancelFlag = res[0], res[1] == 1
		return nil
	})
	if err != nil {
		return // Redis gone for RetryTimeout, or draining: left pending
	}
	if fence == appendDone {
		w.ack(j.queue, j.entry)
		return
	}

	// What earlier owners wrote: their tokens become Generated; a logged
	// request's numbering goes on after their last delta (seq).
	var gen []int32
	accepted, ended := false, false
	seq := 0
	err = w.retry(runCtx, "reading output", func(ctx context.Context) error {
		gen, accepted, ended, seq = nil, false, false, 0
		msgs, err := w.o.Redis.XRange(ctx, j.out, "-", "+").Result()
		if err != nil {
			return fmt.Errorf("cluster: read output of %s: %w", j.rk, err)
		}
		for _, m := range msgs {
			e, err := decodeOut(m)
			if err != nil {
				return fmt.Errorf("%w: %w", errStop, err)
			}
			accepted = accepted || e.Kind == kindAccepted
			gen = append(gen, e.Event.Tokens...)
		}
		if j.log.Key == "" || !accepted {
			return nil
		}
		if j.owner != "" {
			o, err := w.o.Redis.Get(ctx, j.owner).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("cluster: read the stream log claim of %s: %w", j.rk, err)
			}
			if o != j.rk {
				// A newer submission of the request id, or the
				// gateway that ended the reply, holds the log: what
				// is there is not this request's to continue.
				ended = true
				return nil
			}
		}
		logged, err := w.o.Redis.XRange(ctx, j.log.Key, "-", "+").Result()
		if err != nil {
			return fmt.Errorf("cluster: read the stream log of %s: %w", j.rk, err)
		}
		for _, m := range logged {
			ev, ok, err := decodeLogDelta(m)
			if err != nil {
				return fmt.Errorf("%w: %w", errStop, err)
			}
			if !ok {
				ended = true
				break
			}
			if ev.Seq != seq+1 {
				// Engines never trim a running request's log: this
				// is a log that lost entries (a Redis failover) or
				// that an engine of an earlier version capped.
				return fmt.Errorf("%w: the stream log of %s has delta %d after %d", errStop, j.rk, ev.Seq, seq)
			}
			seq = ev.Seq
			gen = append(gen, ev.Tokens...)
		}
		return nil
	})
	if errors.Is(err, errStop) {
		w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishError, Err: &engine.Error{Code: engine.CodeInternal, Message: err.Error()}}, 0)
		return
	}
	if err != nil {
		return
	}
	if accepted {
		log.Info("cluster: taking over request", "fence", fence, "generated", len(gen))
	}
	switch {
	case cancelFlag || ended || j.ctx.Err() != nil && runCtx.Err() == nil:
		w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishCancelled}, len(gen))
		return
	case fence > int64(w.o.MaxAttempts):
		w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishError, Err: &engine.Error{Code: engine.CodeInternal,
			Message: fmt.Sprintf("request failed on %d engines", fence-1)}}, len(gen))
		return
	}

	r := j.req
	r.Generated = append(append([]int32(nil), r.Generated...), gen...)
	var st engine.Events
	err = j.bad
	if err == nil {
		st, err = w.o.Engine.Generate(j.ctx, r)
	}
	if err != nil {
		if runCtx.Err() != nil {
			return
		}
		if j.ctx.Err() != nil {
			w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishCancelled}, len(gen))
			return
		}
		if !accepted {
			// The first engine's refusal is Submit's answer.
			b, _ := json.Marshal(toWireError(err))
			if _, aerr := w.appendEntry(runCtx, j, fence, true, "k", kindRefused, "j", string(b)); aerr == nil || errors.Is(aerr, errStop) {
				w.ack(j.queue, j.entry)
			}
			return
		}
		w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishError, Err: err}, len(gen))
		return
	}
	if _, err := w.appendEntry(runCtx, j, fence, false, "k", kindAccepted, "e", w.o.ID, "f", fence); err != nil {
		j.cancel()
		return
	}
	w.pump(runCtx, j, fence, st, len(gen), seq)
}

// outOrder is an output delta's place in its stream, which a retried
// append and a reader both compare with the last one's: the delta's Seq
// (tokens generated so far, raised by every delta with tokens), doubled,
// plus one for a delta without tokens. Only a request's last delta can
// be one (pump holds text without tokens until tokens come), and it can
// share its Seq with the delta before it (text the detokenizer flushes
// at the end): the order still grows where Seq alone would call it a
// repeat and drop the text.
func outOrder(seq, tokens int) int {
	if tokens == 0 {
		return 2*seq + 1
	}
	return 2 * seq
}

// pump copies the engine's events to the output stream, or to the stream
// log, whose deltas after seq it numbers. Text that comes without tokens
// (held back for a stop string) waits for them, so every written delta
// carries the tokens behind its text. A logged delta has text: tokens
// that do not make text yet wait for it too, and those left at the end
// are not written (a takeover generates them again).
func (w *worker) pump(runCtx context.Context, j *job, fence int64, st engine.Events, replayed, seq int) {
	var pend engine.Event
	// wrote is when the gateway last heard of the request.
	wrote := time.Now()
	// badDelta is set when a delta cannot be encoded: the request ends
	// with an error here, since another engine would only fail the same.
	var badDelta error
	flush := func(last bool) error {
		logged := j.log.Key != ""
		if logged && pend.Text == "" || len(pend.Tokens) == 0 && (pend.Text == "" || !last && logged) {
			if last {
				pend = engine.Event{}
			}
			return nil
		}
		var fields []any
		if logged {
			fields = []any{logText, pend.Text, logTokens, encodeTokens(pend.Tokens)}
		} else {
			fields = []any{"k", kindDelta, "s", strconv.Itoa(pend.Seq), "x", pend.Text, "t", encodeTokens(pend.Tokens)}
		}
		if len(pend.Logprobs) > 0 {
			// JSON has no NaN or infinity: a model that gives one must
			// not lose the logprobs the client asked for in silence.
			b, err := json.Marshal(pend.Logprobs)
			if err != nil {
				badDelta = fmt.Errorf("cluster: encode the log probabilities of delta %d: %w", pend.Seq, err)
				return badDelta
			}
			fields = append(fields, "l", string(b))
		}
		var cancelled bool
		var err error
		if logged {
			cancelled, err = w.appendDelta(runCtx, j, fence, seq+1, fields...)
			if err == nil {
				seq++
			}
		} else {
			cancelled, err = w.appendOut(runCtx, j, fence, false, outOrder(pend.Seq, len(pend.Tokens)), fields...)
		}
		if err != nil {
			return err
		}
		pend, wrote = engine.Event{}, time.Now()
		if cancelled {
			j.cancel() // the stream now ends with "cancelled"
		}
		return nil
	}
	fail := func() {
		if badDelta != nil {
			w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishError, Err: &engine.Error{Code: engine.CodeInternal, Message: badDelta.Error()}}, replayed)
			return
		}
		j.cancel()
	}
	for {
		ev, err := st.Recv(runCtx)
		if errors.Is(err, io.EOF) {
			// Ended without a final: not the engine's contract.
			w.finish(runCtx, j, fence, &engine.Final{FinishReason: engine.FinishError, Err: errors.New("engine stream ended without a final event")}, replayed)
			return
		}
		if err != nil {
			j.cancel() // draining ran out: left to another engine
			return
		}
		if ev.Final != nil {
			if err := flush(true); err != nil {
				fail()
				return
			}
			w.finish(runCtx, j, fence, ev.Final, replayed)
			return
		}
		pend.Seq = ev.Seq
		pend.Tokens = append(pend.Tokens, ev.Tokens...)
		pend.Logprobs = append(pend.Logprobs, ev.Logprobs...)
		pend.Text += ev.Text
		if len(pend.Tokens) == 0 {
			continue
		}
		if err := flush(false); err != nil {
			fail()
			return
		}
		if len(pend.Tokens) > 0 && time.Since(wrote) >= w.o.ProgressInterval {
			// Tokens held for text: the gateway would take the
			// silence for a stalled request. An accepted entry is
			// what every gateway version reads as progress, and
			// costs one write per interval, not one per token.
			cancelled, err := w.appendEntry(runCtx, j, fence, false, "k", kindAccepted, "e", w.o.ID, "f", fence)
			if err != nil {
				j.cancel()
				return
			}
			wrote = time.Now()
			if cancelled {
				j.cancel()
			}
		}
	}
}

// finish writes the final entry and acknowledges the queue entry. The
// completion count includes the tokens earlier owners generated.
func (w *worker) finish(runCtx context.Context, j *job, fence int64, f *engine.Final, replayed int) {
	f.Usage.CompletionTokens += replayed
	b, _ := json.Marshal(toWireFinal(f))
	_, err := w.appendEntry(runCtx, j, fence, true, "k", kindFinal, "j", string(b))
	var lost *lostError
	if err == nil || errors.As(err, &lost) && lost.code == appendDone {
		w.ack(j.queue, j.entry)
	}
}

// control cancels requests on the control channel's word.
func (w *worker) control(ctx context.Context) {
	listen(ctx, w.o.Redis, w.k.control(), func(id string) {
		w.mu.Lock()
		j := w.inflight[id]
		w.mu.Unlock()
		if j != nil {
			j.cancel()
		}
	})
}

// sweepLoop refreshes this engine's requests and takes over dead engines'
// every ClaimInterval.
func (w *worker) sweepLoop(ctx, runCtx context.Context) {
	t := time.NewTicker(w.o.ClaimInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, w.o.ClaimInterval+5*time.Second)
		if err := w.refresh(cctx); err != nil && ctx.Err() == nil {
			w.log.Debug("cluster: refresh", "err", err)
		}
		if err := w.sweep(cctx, runCtx); err != nil && ctx.Err() == nil {
			w.log.Debug("cluster: sweep", "err", err)
		}
		cancel()
	}
}

// refresh resets the idle time of this engine's pending entries, so no
// other engine takes them over, and applies cancel flags whose
// notification was lost.
func (w *worker) refresh(ctx context.Context) error {
	w.mu.Lock()
	byQueue := map[string][]string{}
	jobs := make([]*job, 0, len(w.inflight))
	for _, j := range w.inflight {
		byQueue[j.queue] = append(byQueue[j.queue], j.entry)
		jobs = append(jobs, j)
	}
	w.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	flags := make([]*redis.BoolCmd, len(jobs))
	_, err := w.o.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for q, ids := range byQueue {
			p.XClaimJustID(ctx, &redis.XClaimArgs{Stream: q, Group: group, Consumer: w.o.ID, MinIdle: 0, Messages: ids})
		}
		for i, j := range jobs {
			flags[i] = p.HExists(ctx, j.rec, "cancel")
		}
		return nil
	})
	for i, j := range jobs {
		if flags[i].Val() {
			j.cancel()
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: refresh: %w", err)
	}
	return nil
}

// cleanupScript deletes request stream KEYS[1] when it is empty with
// nothing pending; atomic, so an XADD racing with it either lands first
// (and the stream stays) or recreates it. Returns 1 when the stream is
// gone.
var cleanupScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
if redis.call('XLEN', KEYS[1]) > 0 then return 0 end
local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1])
if ok and p[1] > 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// cleanup forgets request stream q when it is empty. The set of streams
// lives on another slot than q, so the two cannot change in one script:
// q leaves the set first and returns to it unless the script deleted it.
// A gateway adds a stream to the set after writing to it, so whichever
// order the two sides run in, a stream holding a request ends in the set.
func (w *worker) cleanup(ctx context.Context, q string) error {
	if err := w.o.Redis.SRem(ctx, w.k.queues(), q).Err(); err != nil {
		return fmt.Errorf("cluster: clean up %s: %w", q, err)
	}
	gone, err := cleanupScript.Run(ctx, w.o.Redis, []string{q}, group).Int()
	if err == nil && gone == 1 {
		return nil
	}
	if aerr := w.o.Redis.SAdd(ctx, w.k.queues(), q).Err(); aerr != nil {
		err = errors.Join(err, aerr)
	}
	if err != nil {
		return fmt.Errorf("cluster: clean up %s: %w", q, err)
	}
	return nil
}

// sweep takes over requests whose owner stopped refreshing them, and the
// undelivered requests of engines that are gone.
func (w *worker) sweep(ctx, runCtx context.Context) error {
	if w.free() <= 0 {
		return nil
	}
	queues, err := w.o.Redis.SMembers(ctx, w.k.queues()).Result()
	if err != nil {
		return fmt.Errorf("cluster: list request streams: %w", err)
	}
	ns, err := Nodes(ctx, w.o.Redis, w.o.Prefix)
	if err != nil {
		return err
	}
	liveEngines := map[string]bool{w.o.ID: true}
	for _, n := range engines(ns) {
		liveEngines[n.ID] = true
	}
	var errs []error
	for _, q := range queues {
		n := w.free()
		if n <= 0 {
			break
		}
		msgs, _, err := w.o.Redis.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: q, Group: group, Consumer: w.o.ID, MinIdle: w.o.ClaimTimeout, Start: "0-0", Count: int64(n),
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "NOGROUP") {
			errs = append(errs, fmt.Errorf("cluster: claim on %s: %w", q, err))
			continue
		}
		for _, m := range msgs {
			if m.Values != nil { // nil: deleted since it was delivered
				w.take(runCtx, q, m)
			}
		}
		if q == w.k.shared() || liveEngines[w.k.queueOwner(q)] {
			continue
		}
		// A gone engine's stream: nobody reads it unless we do.
		if err := w.o.Redis.XGroupCreate(ctx, q, group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			if err := w.cleanup(ctx, q); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if n = w.free(); n > 0 {
			res, err := w.o.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: w.o.ID, Streams: []string{q, ">"}, Count: int64(n), Block: -1,
			}).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				errs = append(errs, fmt.Errorf("cluster: read %s: %w", q, err))
				continue
			}
			for _, st := range res {
				for _, m := range st.Messages {
					w.take(runCtx, q, m)
				}
			}
		}
		if err := w.cleanup(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
