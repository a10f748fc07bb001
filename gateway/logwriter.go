package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The stream log is written behind the socket, not in front of it: a turn
// queues each delta for the log and goes back to its engine stream at
// once, without waiting for Redis's answer. One writer appends every
// turn's queued deltas, in rounds that each take what all turns queued
// meanwhile (in practice one engine step's deltas) and send it as one
// pipeline per Redis primary with one replica WAIT; several rounds may be
// in flight, never two holding the same turn, so each log's appends stay
// in order.
//
// A delta goes to its client once its append's bytes are handed to the
// kernel on the log's Redis connection (sentConn sees them go by): the
// writer itself releases the round's deltas to their sockets then, so a
// delta costs its turn one wake-up, not one to queue it and another to
// send it. A client therefore never holds a delta that is not already on
// its way to Redis: when the gateway is killed right after a send, Redis
// still gets the append and crash recovery still finds every delta the
// client saw.

// sentWait bounds how long a delta is held back waiting for its append to
// be handed to Redis before it is sent anyway (Redis unreachable: deltas
// go on, rule 6 of the protocol).
const sentWait = 50 * time.Millisecond

// logRounds bounds the rounds in flight.
const logRounds = 8

// deltaSink is where a queue's deltas go once released: the turn's client.
type deltaSink interface {
	sendDelta(seq int, text string)
}

// sentMark releases a batch's deltas (seq <= through) to their client
// once the batch's bytes are written to Redis's socket, or its round
// ended (whatever became of it).
type sentMark struct {
	q       *logQueue
	through int
	once    sync.Once
}

func (m *sentMark) done() { m.once.Do(func() { m.q.release(m.through) }) }

// sentTracker maps the tags of appends in flight to their marks. A tag is
// an argument of the last command of a pipeline of appends, so the bytes
// written to the connection carry it after the appends'.
type sentTracker struct {
	prefix string // "lgsent:<random>:", the same length for every tag
	next   atomic.Uint64

	mu      sync.Mutex // protects pending
	pending map[string][]*sentMark
}

func newSentTracker() *sentTracker {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &sentTracker{prefix: "lgsent:" + hex.EncodeToString(b[:]) + ":", pending: map[string][]*sentMark{}}
}

// tagLen is the digits after the prefix: fixed, so a scan knows the end.
const tagLen = 12

func (t *sentTracker) add(m []*sentMark) string {
	n := strconv.FormatUint(t.next.Add(1)%1e12, 10)
	tag := t.prefix + string(bytes.Repeat([]byte{'0'}, tagLen-len(n))) + n
	t.mu.Lock()
	t.pending[tag] = m
	t.mu.Unlock()
	return tag
}

func (t *sentTracker) drop(tag string) {
	t.mu.Lock()
	delete(t.pending, tag)
	t.mu.Unlock()
}

// wrote marks the batches whose tags p carries as sent.
func (t *sentTracker) wrote(p []byte) {
	pre := []byte(t.prefix)
	for {
		i := bytes.Index(p, pre)
		if i < 0 || len(p) < i+len(pre)+tagLen {
			return
		}
		tag := string(p[i : i+len(pre)+tagLen])
		p = p[i+len(pre)+tagLen:]
		t.mu.Lock()
		ms := t.pending[tag]
		t.mu.Unlock()
		for _, m := range ms {
			m.done()
		}
	}
}

// sentConn is a connection of the log's own Redis client that reports
// what it writes to the tracker.
type sentConn struct {
	net.Conn
	t *sentTracker
}

func (c *sentConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.t.wrote(p[:n])
	}
	return n, err
}

// logClient is a client like rdb (same servers, same options) whose
// connections report to t; ok is false for a kind of client it cannot
// copy, whose batches then count as sent only when their round ends.
func logClient(rdb redis.UniversalClient, t *sentTracker) (c redis.UniversalClient, ok bool) {
	wrap := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &sentConn{Conn: conn, t: t}, nil
		}
	}
	switch rc := rdb.(type) {
	case *redis.Client:
		o := *rc.Options()
		if o.Dialer == nil {
			return rdb, false
		}
		o.Dialer = wrap(o.Dialer)
		return redis.NewClient(&o), true
	case *redis.ClusterClient:
		o := *rc.Options()
		if o.Dialer == nil {
			if o.TLSConfig != nil {
				return rdb, false
			}
			d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 5 * time.Minute}
			o.Dialer = d.DialContext
		}
		o.Dialer = wrap(o.Dialer)
		return redis.NewClusterClient(&o), true
	}
	return rdb, false
}

// logQueue is one turn's deltas on their way to its stream log and to
// its client.
type logQueue struct {
	sid, rid string
	key      string // the log's
	out      deltaSink

	mu       sync.Mutex // protects the fields below
	entries  []logEntry // not yet in the log, in seq order
	held     []logEntry // not yet released to the client, in seq order
	heldAt   time.Time  // when held last went from empty to not
	inflight bool       // a round holds some of the entries
	closed   bool       // the log ended with a done record (recovery), or the turn gave it up
	failing  bool       // the last attempt failed
	stalled  bool       // deltas were released without their appends since the last good round
	retryAt  time.Time  // after a failure: not before then
	attempts int        // rounds that included this queue
	renewed  time.Time  // when a round that renewed the log's TTL started
	changed  chan struct{}
}

// release sends the held deltas up to seq through to the client, in order.
func (q *logQueue) release(through int) {
	q.mu.Lock()
	q.releaseLocked(through)
	q.mu.Unlock()
}

// releaseLocked is release with q.mu held: the lock keeps the deltas of
// two releasers (a round and the watchdog) in order.
func (q *logQueue) releaseLocked(through int) {
	n := 0
	for n < len(q.held) && q.held[n].Seq <= through {
		q.out.sendDelta(q.held[n].Seq, q.held[n].Text)
		n++
	}
	if n == 0 {
		return
	}
	k := copy(q.held, q.held[n:])
	clear(q.held[k:])
	q.held = q.held[:k]
	if k > 0 {
		q.heldAt = time.Now()
	}
}

// logWriter appends every turn's queued deltas to their stream logs.
type logWriter struct {
	l   *streamLog // on the log's own client, with its sent tracker
	log *slog.Logger
	// timeout bounds one round's writes.
	timeout time.Duration
	// hold is sentWait; tests that must tell the watchdog's release from
	// the write's on a busy machine widen it before the first push.
	hold time.Duration

	mu    sync.Mutex // protects dirty and live
	dirty map[*logQueue]bool
	live  map[*logQueue]bool // queues of running turns, for the watchdog
	wake  chan struct{}      // cap 1
	slots chan struct{}      // rounds in flight
	wg    sync.WaitGroup

	// The watchdog releases deltas held longer than sentWait; it runs
	// only while some are held (watching).
	watchdog *time.Timer
	watching atomic.Bool
}

func newLogWriter(l *streamLog, log *slog.Logger, timeout time.Duration) *logWriter {
	w := &logWriter{l: l, log: log, timeout: timeout, hold: sentWait, dirty: map[*logQueue]bool{}, live: map[*logQueue]bool{},
		wake: make(chan struct{}, 1), slots: make(chan struct{}, logRounds)}
	w.watchdog = time.AfterFunc(time.Hour, w.watch)
	w.watchdog.Stop()
	return w
}

// queue returns a turn's queue, whose deltas go to out once released;
// end must follow when the turn is over.
func (w *logWriter) queue(sid, rid string, out deltaSink) *logQueue {
	q := &logQueue{sid: sid, rid: rid, key: w.l.key(sid, rid), out: out, changed: make(chan struct{}, 1)}
	w.mu.Lock()
	w.live[q] = true
	w.mu.Unlock()
	return q
}

// end forgets q's turn; what q still holds for the log is written on.
func (w *logWriter) end(q *logQueue) {
	w.mu.Lock()
	delete(w.live, q)
	w.mu.Unlock()
}

// push queues e (seqs ascending) for q's log and for its client, to whom
// it goes once it is handed to Redis. It never blocks. While q's log is
// unreachable (its last round failed, or deltas were held too long:
// stalled) that is at once: a turn waits out an outage once, not for
// every delta.
func (w *logWriter) push(q *logQueue, e logEntry) {
	q.mu.Lock()
	if q.closed || q.failing || q.stalled {
		q.releaseLocked(math.MaxInt)
		q.out.sendDelta(e.Seq, e.Text)
		if !q.closed {
			q.entries = append(q.entries, e)
		}
		closed := q.closed
		q.mu.Unlock()
		if !closed {
			w.mark(q)
		}
		return
	}
	q.entries = append(q.entries, e)
	first := len(q.held) == 0
	if first {
		q.heldAt = time.Now()
	}
	q.held = append(q.held, e)
	q.mu.Unlock()
	w.mark(q)
	if first && w.watching.CompareAndSwap(false, true) {
		w.watchdog.Reset(w.hold)
	}
}

// watch releases the deltas held longer than sentWait, and stalls their
// queues, then sleeps until the next held delta's time is up.
func (w *logWriter) watch() {
	// Cleared before the scan: a push after the scan sees it clear and
	// re-arms; one before is seen by the scan.
	w.watching.Store(false)
	now := time.Now()
	next := time.Duration(-1)
	var late []*logQueue
	w.mu.Lock()
	for q := range w.live {
		q.mu.Lock()
		if len(q.held) > 0 {
			if left := w.hold - now.Sub(q.heldAt); left <= 0 {
				late = append(late, q)
			} else if next < 0 || left < next {
				next = left
			}
		}
		q.mu.Unlock()
	}
	w.mu.Unlock()
	for _, q := range late {
		w.stall(q)
	}
	if next >= 0 && w.watching.CompareAndSwap(false, true) {
		w.watchdog.Reset(next)
	}
}

// settle returns once every delta pushed to q went to the client, waiting
// at most sentWait for the last ones' appends to go out.
func (w *logWriter) settle(q *logQueue) {
	t := time.NewTimer(w.hold)
	defer t.Stop()
	for {
		q.mu.Lock()
		n := len(q.held)
		q.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-q.changed:
		case <-t.C:
			w.stall(q)
			return
		}
	}
}

// abandon drops q's backlog and retries: its turn gave up storing the
// reply, so nothing will read what is left, and a gateway that outlives a
// long outage must not retry the appends of every such turn for ever.
func (w *logWriter) abandon(q *logQueue) {
	q.mu.Lock()
	n := len(q.entries)
	q.closed, q.entries = true, nil
	q.mu.Unlock()
	w.mu.Lock()
	delete(w.dirty, q)
	w.mu.Unlock()
	if n > 0 {
		w.log.Warn("gateway: stream log backlog dropped with its reply", "session", q.sid, "request", q.rid, "deltas", n)
	}
}

// stall releases what q holds without waiting for its appends, and
// records that: the next deltas are not held until a round for q gets
// through.
func (w *logWriter) stall(q *logQueue) {
	q.mu.Lock()
	q.stalled = true
	q.releaseLocked(math.MaxInt)
	q.mu.Unlock()
}

func (w *logWriter) mark(q *logQueue) {
	w.mu.Lock()
	w.dirty[q] = true
	w.mu.Unlock()
	w.poke()
}

func (w *logWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// flush asks for q's backlog to be written now and waits for the attempt:
// true when nothing is left to write (or the log was ended by recovery),
// false when the attempt failed or ctx ended.
func (w *logWriter) flush(ctx context.Context, q *logQueue) bool {
	for {
		q.mu.Lock()
		if len(q.entries) == 0 && !q.inflight || q.closed {
			q.mu.Unlock()
			return true
		}
		q.retryAt = time.Time{}
		before := q.attempts
		q.mu.Unlock()
		w.mark(q)
		for {
			select {
			case <-q.changed:
			case <-ctx.Done():
				return false
			}
			q.mu.Lock()
			tried, failing := q.attempts > before, q.failing
			q.mu.Unlock()
			if !tried {
				continue
			}
			if failing {
				return false
			}
			break
		}
	}
}

// run starts rounds until ctx ends, then waits for those in flight.
func (w *logWriter) run(ctx context.Context) {
	defer w.watchdog.Stop()
	defer w.wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			w.gather()
		case <-timer.C:
		}
		next := w.dispatch(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if next.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(time.Until(next))
		}
	}
}

// gather lets the turns that are ready to run push their deltas before a
// round starts: yielding while the set of dirty queues still grows, a few
// times at most. An engine step wakes all its turns at once, and one round
// for the whole step costs Redis and this writer one round trip instead of
// one for every few turns.
func (w *logWriter) gather() {
	w.mu.Lock()
	n := len(w.dirty)
	w.mu.Unlock()
	for range 4 {
		runtime.Gosched()
		w.mu.Lock()
		m := len(w.dirty)
		w.mu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

// dispatch starts a round with what every dirty queue not in flight holds,
// when a round slot is free; it returns when the next retry of a failing
// queue is due (zero: none).
func (w *logWriter) dispatch(ctx context.Context) time.Time {
	select {
	case w.slots <- struct{}{}:
	default:
		return time.Time{} // a round ending pokes the writer
	}
	now := time.Now()
	var next time.Time
	w.mu.Lock()
	// Sized once: a round holds a step's worth of turns, and growing
	// these by appending made them the writer's largest garbage.
	batches := make([]logBatch, 0, len(w.dirty))
	qs := make([]*logQueue, 0, len(w.dirty))
	marks := make([]sentMark, len(w.dirty)) // never grows: &marks[i] stay put
	for q := range w.dirty {
		q.mu.Lock()
		switch {
		case q.closed || len(q.entries) == 0:
			delete(w.dirty, q)
		case q.inflight:
			// stays dirty: the next round after this one's end takes it
		case now.Before(q.retryAt):
			if next.IsZero() || q.retryAt.Before(next) {
				next = q.retryAt
			}
		default:
			delete(w.dirty, q)
			m := &marks[len(batches)]
			m.q, m.through = q, q.entries[len(q.entries)-1].Seq
			q.inflight = true
			// The TTL is renewed now and then, not with every delta:
			// the done record renews it in full at the end.
			expire := q.renewed.IsZero() || now.Sub(q.renewed) >= w.l.ttl/4
			batches = append(batches, logBatch{sid: q.sid, rid: q.rid, key: q.key, mark: m, expire: expire,
				entries: q.entries[:len(q.entries):len(q.entries)]})
			qs = append(qs, q)
		}
		q.mu.Unlock()
	}
	w.mu.Unlock()
	if len(batches) == 0 {
		<-w.slots
		return next
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.round(ctx, now, batches, qs)
		<-w.slots
		w.poke() // queues that were in flight or waited for a slot
	}()
	return next
}

// round writes batches and records what became of each.
func (w *logWriter) round(ctx context.Context, started time.Time, batches []logBatch, qs []*logQueue) {
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	res := w.l.appendBatches(wctx, batches)
	cancel()
	for i, q := range qs {
		batches[i].mark.done()
		r := res[i]
		q.mu.Lock()
		q.attempts++
		q.inflight = false
		switch {
		case q.closed: // abandoned while in flight
		case r.err != nil:
			if !q.failing {
				w.log.Warn("gateway: stream log unavailable; keeping deltas until it is back", "session", q.sid, "request", q.rid, "err", r.err)
			}
			q.failing, q.retryAt = true, time.Now().Add(logRetry)
		case !r.open:
			q.failing, q.closed, q.entries = false, true, nil
			w.log.Warn("gateway: stream log was ended by crash recovery", "session", q.sid, "request", q.rid)
		default:
			q.failing, q.stalled = false, false
			if batches[i].expire || len(batches[i].entries) > 1 { // the script renews too
				q.renewed = started
			}
			if n := len(batches[i].entries); n == len(q.entries) {
				// The round was the array's last holder: the next
				// deltas reuse it instead of each allocating anew.
				clear(q.entries)
				q.entries = q.entries[:0]
			} else {
				q.entries = q.entries[n:]
			}
		}
		again := len(q.entries) > 0 && !q.closed
		q.mu.Unlock()
		if again {
			w.mu.Lock()
			w.dirty[q] = true
			w.mu.Unlock()
		}
		select {
		case q.changed <- struct{}{}:
		default:
		}
	}
}
