package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
)

// ClientOptions configure a Client. Redis is required; every zero field
// takes the default noted on it.
type ClientOptions struct {
	// Redis is where requests are queued and results read.
	Redis redis.UniversalClient
	// Prefix is put before every key ("": none); it must match the
	// engines'.
	Prefix string
	// ID names this gateway in heartbeats and notifications (NewID()).
	ID string
	// Addr is the HTTP address advertised in the heartbeat ("").
	Addr string
	// PlaceTimeout is how long Submit waits for an engine to accept or
	// refuse the request (10s); then it fails with *UnavailableError.
	PlaceTimeout time.Duration
	// IdleTimeout is how long a stream waits for its next entry while
	// Redis is unreachable or no engine runs the request (60s); then it
	// ends with finish reason "error". It must exceed the engines'
	// ClaimTimeout, or streams give up before failover can happen.
	IdleTimeout time.Duration
	// PollInterval is how often a waiting stream reads its output without
	// a notification (500ms): notifications are lost while Redis is down.
	PollInterval time.Duration
	// HeartbeatInterval and HeartbeatTTL pace this gateway's heartbeat
	// (1s, 5s); RefreshInterval is how often the live engines are re-read
	// for routing (500ms).
	HeartbeatInterval time.Duration
	HeartbeatTTL      time.Duration
	RefreshInterval   time.Duration
	// OutTTL is how long a request's keys live after their last write
	// (10m).
	OutTTL time.Duration
	// Logger (slog.Default()).
	Logger *slog.Logger
}

func (o *ClientOptions) validate() error {
	if o.Redis == nil {
		return errors.New("cluster: ClientOptions.Redis is required")
	}
	if o.ID == "" {
		o.ID = NewID()
	}
	def(&o.PlaceTimeout, 10*time.Second)
	def(&o.IdleTimeout, 60*time.Second)
	def(&o.PollInterval, 500*time.Millisecond)
	def(&o.HeartbeatInterval, time.Second)
	def(&o.HeartbeatTTL, 5*time.Second)
	def(&o.RefreshInterval, 500*time.Millisecond)
	def(&o.OutTTL, 10*time.Minute)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

func def(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// Client is the gateway side of the Redis request path: an
// engine.Generator (with engine.Readier, engine.SessionWarmer and
// engine.ModelReporter), like the in-process engine, so a gateway takes
// either. Its methods are safe for concurrent use. NewClient starts a
// heartbeat, a warmth announcer, a refresher of the live engine list and a
// notification subscriber; Close stops them.
type Client struct {
	o ClientOptions
	k keys

	cancel context.CancelFunc
	wg     sync.WaitGroup // the background goroutines

	mu      sync.Mutex // protects the fields below
	live    map[string]*Stream
	byID    map[string]*Stream // engine request id → its latest stream
	engines []NodeInfo
	listErr error
	warm    map[string]int // live sessions: how many live calls are not yet undone

	warmCh chan warmthMsg // warmth changes for the announcer
}

// NewClient checks o and starts the client's background goroutines. It
// does not need Redis to be up: routing starts once a refresh succeeds.
func NewClient(o ClientOptions) (*Client, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{o: o, k: newKeys(o.Prefix), cancel: cancel, live: map[string]*Stream{}, byID: map[string]*Stream{},
		listErr: errors.New("cluster: engine list not read yet"), warm: map[string]int{}, warmCh: make(chan warmthMsg, 256)}
	c.refresh(ctx)
	c.wg.Add(4)
	go func() {
		defer c.wg.Done()
		c.announce(ctx)
	}()
	go func() {
		defer c.wg.Done()
		heartbeat(ctx, o.Redis, c.k, o.HeartbeatInterval, o.HeartbeatTTL, c.info, o.Logger)
	}()
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(o.RefreshInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.refresh(ctx)
			}
		}
	}()
	go func() {
		defer c.wg.Done()
		c.subscribe(ctx)
	}()
	return c, nil
}

// ID returns the gateway's node id.
func (c *Client) ID() string { return c.o.ID }

// Close stops the background goroutines and removes the heartbeat. Streams
// already handed out keep working (they poll) until they end.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// Ready reports whether a request can be placed now: the engine list was
// read and names at least one live engine. The gateway's /readyz uses it.
func (c *Client) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listErr != nil {
		return c.listErr
	}
	if len(c.engines) == 0 {
		return errors.New("cluster: no live engine")
	}
	return nil
}

// Engines returns the live engines as last read.
func (c *Client) Engines() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]NodeInfo(nil), c.engines...)
}

// ServedModel returns the model the live engines name in their
// heartbeats (the first by id, as engines of one deployment serve one
// model); ok is false while none has.
func (c *Client) ServedModel() (engine.ModelCard, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.engines {
		if e.Model != nil {
			return *e.Model, true
		}
	}
	return engine.ModelCard{}, false
}

func (c *Client) info() NodeInfo {
	c.mu.Lock()
	n := len(c.live)
	c.mu.Unlock()
	return NodeInfo{Role: RoleGateway, ID: c.o.ID, Addr: c.o.Addr, Load: n, FreeKV: -1, Started: started}
}

// started is the process start, for heartbeats.
var started = time.Now()

func (c *Client) refresh(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, c.o.RefreshInterval+time.Second)
	ns, err := Nodes(cctx, c.o.Redis, c.o.Prefix)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// Keep routing on the last list: a request placed on a dead
		// engine's stream is still taken over.
		c.listErr = err
		return
	}
	c.listErr = nil
	c.engines = engines(ns)
}

// subscribe wakes streams when the append script says their output grew.
// go-redis resubscribes after a reconnect; what is lost meanwhile the
// streams' polling recovers.
func (c *Client) subscribe(ctx context.Context) {
	listen(ctx, c.o.Redis, c.k.gatewayChan(c.o.ID), func(id string) {
		c.mu.Lock()
		s := c.live[id]
		c.mu.Unlock()
		if s != nil {
			s.wake()
		}
	})
}

// listen calls fn with each message published on channel until ctx ends.
// go-redis resubscribes after a reconnect; callers recover what is missed
// meanwhile by other means (polling, timeouts).
func listen(ctx context.Context, rdb redis.UniversalClient, channel string, fn func(payload string)) {
	ps := rdb.Subscribe(ctx, channel)
	defer ps.Close()
	ch := ps.Channel(redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			fn(m.Payload)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LogTarget is a gateway's stream log of one request (the chat
// protocol's session.resume reads it): entry id "<seq>-0" with the
// protocol's seq, 1, 2, ... for the deltas with text, field "d" the
// text, expiring TTL after its last write. MaxLen is the log's cap once
// the reply is over (the gateway's done record applies it): the engine
// never trims the log of a request that runs, since a takeover reads it
// from delta 1; a request adds at most one entry per generated token.
type LogTarget struct {
	Key    string
	MaxLen int64
	TTL    time.Duration
}

// Submit queues r for an engine and waits until one accepts it (returns
// its stream) or refuses it (returns the engine's *engine.Error). It fails
// with *UnavailableError when Redis cannot be reached or no engine answers
// within PlaceTimeout, and with ctx's error when ctx ends first.
// Cancelling ctx later cancels the request. A request without an ID gets
// one. The caller must read the stream to its io.EOF.
func (c *Client) Submit(ctx context.Context, r engine.Request) (*Stream, error) {
	return c.submit(ctx, r, LogTarget{})
}

// SubmitToLog is Submit for a request whose deltas the engine appends to
// stream log lt itself, in the protocol's numbering, instead of to the
// request's output stream: each delta crosses Redis once, and the log
// holds every delta before any gateway reads it. The stream's events are
// read back from that log: only deltas with text, Seq the protocol's.
func (c *Client) SubmitToLog(ctx context.Context, r engine.Request, lt LogTarget) (*Stream, error) {
	if lt.Key == "" || lt.MaxLen <= 0 || lt.TTL <= 0 {
		return nil, fmt.Errorf("cluster: stream log target %+v needs a key, a cap and a TTL", lt)
	}
	return c.submit(ctx, r, lt)
}

func (c *Client) submit(ctx context.Context, r engine.Request, lt LogTarget) (*Stream, error) {
	if r.ID == "" {
		r.ID = "req-" + randHex(8)
	}
	version, body, err := encodeRequest(r, lt.Key != "")
	if err != nil {
		return nil, &engine.Error{Code: engine.CodeBadRequest, Message: "request does not encode: " + err.Error()}
	}
	rk := r.ID + "#" + randHex(6)
	s := c.newStream(r.ID, rk, lt.Key)
	affinity := r.Tenant + "/" + r.Session
	if r.Session == "" {
		affinity = rk
	}
	c.mu.Lock()
	target, routed := Route(affinity, c.engines)
	c.live[rk] = s
	c.byID[r.ID] = s
	c.mu.Unlock()
	queue := c.k.shared()
	if routed {
		queue = c.k.queue(target)
	}

	pctx, cancel := context.WithTimeout(ctx, c.o.PlaceTimeout)
	defer cancel()
	// The request's record, the queue and the set of queues are on three
	// hash slots: no transaction spans them. The record's order does not
	// matter (an engine's acquire creates it as well); the set is written
	// after the queue, which the sweeper's cleanup relies on.
	values := []any{fieldKey, rk, fieldGateway, c.o.ID, fieldVersion, version, fieldRequest, string(body)}
	if lt.Key != "" {
		values = append(values, fieldLog, lt.Key, fieldLogMax, lt.MaxLen, fieldLogTTL, lt.TTL.Milliseconds(), fieldLogOwned, "1")
		// The log is this submission's alone, and starts empty: what an
		// earlier submission of the request id wrote (one given up on,
		// whose engine may still run) is neither read as this reply nor
		// written into it. Before the queue entry, so that no engine
		// appends before the claim.
		_, err = c.o.Redis.TxPipelined(pctx, func(p redis.Pipeliner) error {
			p.Del(pctx, lt.Key)
			p.Set(pctx, c.k.ks.LogOwner(lt.Key), rk, lt.TTL)
			return nil
		})
		if err != nil {
			c.forget(s)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &UnavailableError{Reason: "cannot claim the stream log", Err: err}
		}
	}
	_, err = c.o.Redis.Pipelined(pctx, func(p redis.Pipeliner) error {
		p.HSet(pctx, s.rec, "gw", c.o.ID)
		p.PExpire(pctx, s.rec, c.o.OutTTL)
		p.XAdd(pctx, &redis.XAddArgs{Stream: queue, Values: values})
		return nil
	})
	if err == nil {
		err = c.o.Redis.SAdd(pctx, c.k.queues(), queue).Err()
	}
	if err != nil {
		c.forget(s)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &UnavailableError{Reason: "cannot queue the request", Err: err}
	}
	if err := s.awaitPlacement(pctx); err != nil {
		c.forget(s)
		if errors.As(err, new(*UnavailableError)) || ctx.Err() != nil {
			// Nobody may run it any more: an engine that takes it later
			// finds it cancelled.
			c.cancelKey(s.rec, rk)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	s.stop = context.AfterFunc(ctx, func() { s.Cancel() })
	return s, nil
}

// Generate is Submit behind the engine.Generator contract.
func (c *Client) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	s, err := c.Submit(ctx, r)
	if err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return s, nil
}

// GenerateToLog is SubmitToLog behind the engine.Generator contract, for
// a gateway that keeps a stream log per request.
func (c *Client) GenerateToLog(ctx context.Context, r engine.Request, log string, maxLen int64, ttl time.Duration) (engine.Events, error) {
	s, err := c.SubmitToLog(ctx, r, LogTarget{Key: log, MaxLen: maxLen, TTL: ttl})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newStream is the reader of request rk (engine request id id), whose
// deltas are in stream log log ("": in its output stream).
func (c *Client) newStream(id, rk, log string) *Stream {
	rec, out := c.k.forRequest(rk, log)
	return &Stream{c: c, id: id, rk: rk, rec: rec, out: out, log: log, last: "0", notify: make(chan struct{}, 1)}
}

var (
	_ engine.Generator     = (*Client)(nil)
	_ engine.Readier       = (*Client)(nil)
	_ engine.SessionWarmer = (*Client)(nil)
)

// Handle names ev's request for Attach: its request key, "" when ev is
// not one of this client's streams. A gateway keeps it with its turn, so
// that when it dies another gateway can go on reading the request, which
// runs on in an engine.
func (c *Client) Handle(ev engine.Events) string {
	s, ok := ev.(*Stream)
	if !ok {
		return ""
	}
	if s.log != "" {
		// Request keys hold no space (engine request ids are the
		// gateway's "<tenant>/<session>/<request>", none with one).
		return s.rk + " " + s.log
	}
	return s.rk
}

// Attach reads the request that Handle named, from its first entry, on
// this gateway: the engine's notifications come here from now on, and
// Cancel of its id works here. The request may be running or over.
func (c *Client) Attach(ctx context.Context, handle string) (engine.Events, error) {
	rk, log, _ := strings.Cut(handle, " ")
	i := strings.LastIndexByte(rk, '#') // Submit: the id, '#', a random suffix
	id := rk[:max(i, 0)]
	if id == "" {
		return nil, fmt.Errorf("cluster: attach: %q is not a request handle: %w", handle, engine.ErrGone)
	}
	s := c.newStream(id, rk, log)
	// Only to a request that still exists: its record expires OutTTL
	// after its last write, and a fresh one would wait on nothing.
	n, err := c.o.Redis.Exists(ctx, s.rec).Result()
	if err == nil && n == 1 {
		err = c.o.Redis.HSet(ctx, s.rec, "gw", c.o.ID).Err()
	}
	if err != nil {
		return nil, &UnavailableError{Reason: "cannot attach to the request", Err: err}
	}
	if n == 0 {
		return nil, fmt.Errorf("cluster: attach: request %s: %w", id, engine.ErrGone)
	}
	c.mu.Lock()
	c.live[rk] = s
	c.byID[id] = s
	c.mu.Unlock()
	return s, nil
}

// Cancel asks the engine running request id to stop; the stream then ends
// with finish reason "cancelled" (unless it already ended). Unknown ids
// are ignored. It does not wait; a cancel that cannot reach Redis is
// retried by the stream's reader.
func (c *Client) Cancel(id string) {
	c.mu.Lock()
	s := c.byID[id]
	c.mu.Unlock()
	if s != nil {
		s.Cancel()
	}
}

// cancelKey sets the cancel flag of request rk (record rec) and tells the
// engines.
func (c *Client) cancelKey(rec, rk string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.o.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, rec, "cancel", "1")
		p.PExpire(ctx, rec, c.o.OutTTL)
		p.Publish(ctx, c.k.control(), rk)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster: cancel %s: %w", rk, err)
	}
	return nil
}

func (c *Client) forget(s *Stream) {
	c.mu.Lock()
	if c.live[s.rk] == s {
		delete(c.live, s.rk)
	}
	if c.byID[s.id] == s {
		delete(c.byID, s.id)
	}
	c.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
}

// Stream is one request's events read from Redis: deltas, then one Final,
// then io.EOF. Recv is for one goroutine at a time; Cancel for any.
type Stream struct {
	c        *Client
	id, rk   string
	rec, out string // the request's fence record and output stream
	// log is the stream log the engine appends the deltas to ("": they
	// are in the output stream).
	log    string
	notify chan struct{} // cap 1: the output may have grown
	stop   func() bool   // undoes the ctx watch

	cancelWanted atomic.Bool // a cancel is still to be delivered

	mu     sync.Mutex // protects engine
	engine string     // the engine that last accepted the request

	// Owned by the reader.
	last    string // id of the last output entry read
	lastSeq int    // seq of the last delta read (log or output)
	lastOut int    // outOrder of the last output delta read
	// drained: the last read took entries and everything there was;
	// the next read waits for the engine's word that more came.
	drained     bool
	final       *outEntry // read from the output, held until the log is read to its end
	buf         []outEntry
	ended       bool
	engineFinal bool // the end was the engine's final, not the reader's giving up
	progress    time.Time
}

// ID returns the engine request id.
func (s *Stream) ID() string { return s.id }

// LogKey names the stream log the engine appends the deltas to ("": the
// request has none, its deltas are in its output stream).
func (s *Stream) LogKey() string { return s.log }

// Engine returns the id of the engine that last accepted the request.
func (s *Stream) Engine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engine
}

// Cancel asks the engine to stop the request. It does not wait.
func (s *Stream) Cancel() {
	if err := s.c.cancelKey(s.rec, s.rk); err != nil {
		s.cancelWanted.Store(true)
		s.wake()
	}
}

func (s *Stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// fetchCount bounds the entries one read takes from a stream.
const fetchCount = 256

// fetch reads the output entries after the last one into buf.
func (s *Stream) fetch(ctx context.Context) error {
	if s.log != "" {
		return s.fetchLogged(ctx)
	}
	msgs, err := s.c.o.Redis.XRangeN(ctx, s.out, "("+s.last, "+", fetchCount).Result()
	if err != nil {
		return fmt.Errorf("cluster: read output of %s: %w", s.id, err)
	}
	for _, m := range msgs {
		e, err := decodeOut(m)
		if err != nil {
			return &decodeError{err}
		}
		s.last = m.ID
		if e.Kind == kindDelta {
			if o := outOrder(e.Event.Seq, len(e.Event.Tokens)); o <= s.lastOut {
				// A second copy: the engine's append reached the
				// primary, which this read saw, and the primary
				// failed over before its replica held it, so the
				// engine's retry wrote it again. Orders only grow.
				continue
			} else {
				s.lastOut = o
			}
			s.lastSeq = e.Event.Seq
		}
		s.buf = append(s.buf, e)
	}
	if len(msgs) > 0 {
		s.progress = time.Now()
	}
	s.drained = len(msgs) > 0 && len(msgs) < fetchCount
	return nil
}

// fetchLogged reads a logged request's new entries into buf: the output
// stream's (accepted, refused, final), then the log's deltas. The two are
// on one slot and read in that order in one round trip, so a final read
// comes after every delta the engine wrote before it; it is held back
// until a read of the log comes back short, i.e. the log is read to its
// end. The two reads are one transaction: a plain pipeline keeps their
// order only while both run on one node, and a slot migration (ASK,
// MOVED) resends a redirected command on its own, so the log could be
// read before the output and a final passed on ahead of deltas.
func (s *Stream) fetchLogged(ctx context.Context) error {
	var outCmd, logCmd *redis.XMessageSliceCmd
	_, err := s.c.o.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		outCmd = p.XRangeN(ctx, s.out, "("+s.last, "+", fetchCount)
		logCmd = p.XRangeN(ctx, s.log, "("+strconv.Itoa(s.lastSeq)+"-0", "+", fetchCount)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster: read output of %s: %w", s.id, err)
	}
	grew := false
	for _, m := range outCmd.Val() {
		e, err := decodeOut(m)
		if err != nil {
			return &decodeError{err}
		}
		s.last, grew = m.ID, true
		switch {
		case e.Kind == kindDelta:
			return &decodeError{fmt.Errorf("cluster: delta %s of %s in the output, not the log", m.ID, s.id)}
		case e.Kind == kindFinal:
			s.final = &e
		default:
			s.buf = append(s.buf, e)
		}
	}
	msgs := logCmd.Val()
	for _, m := range msgs {
		ev, ok, err := decodeLogDelta(m)
		if err != nil {
			return &decodeError{err}
		}
		if !ok {
			continue // the gateway's done record
		}
		if ev.Seq != s.lastSeq+1 {
			// Entries lost (engines never trim a running request's
			// log) or not written in order: either way text would
			// be lost.
			return &decodeError{fmt.Errorf("cluster: the log of %s has delta %d after %d", s.id, ev.Seq, s.lastSeq)}
		}
		s.lastSeq, grew = ev.Seq, true
		s.buf = append(s.buf, outEntry{ID: m.ID, Kind: kindDelta, Event: ev})
	}
	if s.final != nil && len(msgs) < fetchCount {
		s.buf = append(s.buf, *s.final)
		s.final = nil
	}
	if grew {
		s.progress = time.Now()
	}
	s.drained = grew && s.final == nil && len(msgs) < fetchCount && len(outCmd.Val()) < fetchCount
	return nil
}

// wait blocks until a notification, the poll interval (or d, when
// shorter), or ctx's end.
func (s *Stream) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(min(d, s.c.o.PollInterval))
	defer t.Stop()
	select {
	case <-s.notify:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitPlacement waits for the first output entry: a refusal is returned,
// anything else means an engine took the request.
func (s *Stream) awaitPlacement(ctx context.Context) error {
	backoff := 20 * time.Millisecond
	for {
		err := s.fetch(ctx)
		if err == nil && len(s.buf) > 0 {
			if e := s.buf[0]; e.Kind == kindRefused {
				return e.Refuse
			}
			return nil
		}
		if err == nil && s.log != "" {
			if rerr := s.legacyRefusal(ctx); rerr != nil {
				return rerr
			}
		}
		d := time.Hour
		if err != nil {
			d, backoff = backoff, min(2*backoff, time.Second)
		}
		if werr := s.wait(ctx, d); werr != nil {
			if err == nil {
				err = errors.New("no engine took it")
			}
			return &UnavailableError{Reason: "no engine accepted the request in time", Err: err}
		}
	}
}

// legacyRefusal is the refusal an engine of an earlier version wrote for
// a logged request, nil when there is none: such an engine cannot run a
// queue entry of version 2, and it writes its refusal to the output key
// of an unlogged request, where this stream does not read. Heard there,
// the chat fails at once rather than after PlaceTimeout.
func (s *Stream) legacyRefusal(ctx context.Context) error {
	msgs, err := s.c.o.Redis.XRangeN(ctx, s.c.k.out(s.rk), "-", "+", 1).Result()
	if err != nil || len(msgs) == 0 {
		return nil // a later poll, or PlaceTimeout, decides
	}
	e, err := decodeOut(msgs[0])
	if err != nil || e.Kind != kindRefused {
		return nil
	}
	return &UnavailableError{Reason: "an engine of an earlier version refused the request (upgrade the engines first)", Err: e.Refuse}
}

// Recv returns the next event. After the event that carries Final it
// returns io.EOF. It blocks until an event is ready or ctx is done (then
// ctx's error, and the stream stays usable). When no entry comes for
// IdleTimeout (Redis down, or no engine left to take the request over) it
// ends the stream with finish reason "error" and an *UnavailableError.
func (s *Stream) Recv(ctx context.Context) (engine.Event, error) {
	backoff := 20 * time.Millisecond
	if s.progress.IsZero() {
		s.progress = time.Now()
	}
	for {
		if s.ended {
			return engine.Event{}, io.EOF
		}
		for len(s.buf) > 0 {
			e := s.buf[0]
			s.buf = s.buf[1:]
			switch e.Kind {
			case kindAccepted:
				s.mu.Lock()
				s.engine = e.Engine
				s.mu.Unlock()
			case kindDelta:
				return e.Event, nil
			case kindFinal:
				s.engineFinal = true
				return s.end(e.Event.Final), nil
			case kindRefused:
				// Refused after an earlier accept: not written by this
				// version's engines, but end cleanly if it is.
				return s.end(&engine.Final{FinishReason: engine.FinishError, Err: e.Refuse}), nil
			}
		}
		if s.cancelWanted.Load() {
			if s.c.cancelKey(s.rec, s.rk) == nil {
				s.cancelWanted.Store(false)
			}
		}
		if s.drained {
			// Everything there was is passed on: read again once the
			// engine says it appended (or a poll interval passed), not
			// at once for nothing, which would double the reads.
			s.drained = false
			if err := s.wait(ctx, time.Hour); err != nil {
				return engine.Event{}, err
			}
		}
		err := s.fetch(ctx)
		if err != nil && ctx.Err() != nil {
			return engine.Event{}, ctx.Err()
		}
		if len(s.buf) > 0 {
			backoff = 20 * time.Millisecond
			continue
		}
		var dec *decodeError
		if errors.As(err, &dec) {
			return s.end(&engine.Final{FinishReason: engine.FinishError, Err: &engine.Error{Code: engine.CodeInternal, Message: err.Error()}}), nil
		}
		if time.Since(s.progress) > s.c.o.IdleTimeout {
			why := "the request made no progress"
			if err != nil {
				why = "Redis unreachable"
			}
			s.Cancel()
			return s.end(&engine.Final{FinishReason: engine.FinishError, Err: &UnavailableError{Reason: why, Err: err}}), nil
		}
		d := time.Hour
		if err != nil {
			d, backoff = backoff, min(2*backoff, time.Second)
		}
		if err := s.wait(ctx, d); err != nil {
			return engine.Event{}, err
		}
	}
}

// sealScript releases stream log KEYS[2]'s claim (KEYS[1]) when request
// key ARGV[1] holds it, so that its engine appends no more, and returns
// the log's entries from id ARGV[2] on. A log that another submission
// claimed is not this request's: nothing is returned.
var sealScript = redis.NewScript(`
local o = redis.call('GET', KEYS[1])
if o and o ~= ARGV[1] then return {} end
if o then redis.call('DEL', KEYS[1]) end
return redis.call('XRANGE', KEYS[2], ARGV[2], '+')
`)

// Seal ends a logged request's deltas where they are, for the gateway
// storing the reply: the engine may append no more to the log (it stops
// the request at its next delta; the request is cancelled too, unless
// its final was read), and Seal returns the deltas the log holds after
// the last one Recv returned. So the reply made of what Recv and Seal
// returned is exactly the log's deltas, and the done record can follow
// them. Deltas after a gap (entries Redis lost) or an entry that does
// not decode are not returned. An error means the seal may not have
// held (Redis): call again; the deltas returned with it are not returned
// again. A stream without a log returns nothing.
func (s *Stream) Seal(ctx context.Context) ([]engine.Event, error) {
	if s.log == "" {
		return nil, nil
	}
	if !s.engineFinal {
		s.Cancel()
	}
	// Deltas a read took from the log but Recv has not returned come
	// first: lastSeq is the last one read, not the last one returned.
	var evs []engine.Event
	rest := s.buf[:0]
	for _, e := range s.buf {
		if e.Kind == kindDelta {
			evs = append(evs, e.Event)
		} else {
			rest = append(rest, e)
		}
	}
	s.buf = rest
	msgs, err := sealScript.Run(ctx, s.c.o.Redis, []string{s.c.k.ks.LogOwner(s.log), s.log}, s.rk, "("+strconv.Itoa(s.lastSeq)+"-0").Slice()
	if err != nil {
		return evs, fmt.Errorf("cluster: seal the stream log of %s: %w", s.id, err)
	}
	for _, raw := range msgs {
		// The seal held: an entry that does not decode ends the reply
		// there, as a gap does (it is no Redis failure to retry).
		m, err := xMessage(raw)
		if err != nil {
			break
		}
		ev, ok, err := decodeLogDelta(m)
		if err != nil || !ok || ev.Seq != s.lastSeq+1 {
			break
		}
		s.lastSeq = ev.Seq
		evs = append(evs, ev)
	}
	return evs, nil
}

// xMessage decodes one stream entry of a script's reply.
func xMessage(raw any) (redis.XMessage, error) {
	e, ok := raw.([]any)
	if !ok || len(e) != 2 {
		return redis.XMessage{}, fmt.Errorf("stream entry %v", raw)
	}
	id, _ := e[0].(string)
	kv, _ := e[1].([]any)
	m := redis.XMessage{ID: id, Values: make(map[string]any, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		m.Values[k] = kv[i+1]
	}
	return m, nil
}

func (s *Stream) end(f *engine.Final) engine.Event {
	s.ended = true
	s.c.forget(s)
	return engine.Event{Final: f}
}

// decodeError marks an output entry this version cannot read.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }
