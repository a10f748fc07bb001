package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/durable"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// pauseWrites makes rs take no writes until the returned resume is called
// (at the latest by the test's cleanup). The pause's own timeout is only a
// safety net: a test that ends it itself after the event it checks makes
// "before Redis takes writes again" an ordering, not a race against a
// clock that a busy machine can lose.
func pauseWrites(t *testing.T, rs *testredis.Server) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rs.Client().Do(ctx, "client", "pause", pauseCap.Milliseconds(), "write").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := rs.Client().Do(ctx, "client", "unpause").Err(); err != nil {
				t.Errorf("client unpause: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// pauseCap bounds a pauseWrites pause that its test never ended.
const pauseCap = 30 * time.Second

// patientClient is a client of rs whose reads outlast pauseCap: a
// command that Redis holds during a pause is answered after it, not
// given up (the log writer's client copies these options).
func patientClient(t *testing.T, rs *testredis.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ReadTimeout: pauseCap + 5*time.Second, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// widenHold sets w's sentWait before any push: long enough that a writer
// starved by a busy machine is not overtaken by the watchdog, so a test
// can tell a release by the append's write from one by the watchdog.
func widenHold(w *logWriter, d time.Duration) {
	w.mu.Lock() // the turns read hold after locking w.mu
	w.hold = d
	w.mu.Unlock()
}

// TestDeltaNeverWaitsForTheLog pauses every write on a private Redis in
// the middle of a reply: the deltas still reach the client at once (the
// log is appended after the socket write, not before), the done waits for
// Redis to take writes again (it reports the reply stored), and once they
// resume the log holds every delta, so a resume from any offset is exact.
func TestDeltaNeverWaitsForTheLog(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, patientClient(t, rs), "", func(o *Options) { o.PersistTimeout = pauseCap })
	e.gen.gate = make(chan struct{}, 100)
	c := e.login("alice")
	sid := c.createSession("paused")

	content := "a b c d e f"
	words := strings.SplitAfter(fakeReply(content), " ")
	c.send(map[string]any{"type": "chat", "session": sid, "request": "r1", "content": content})
	e.gen.gate <- struct{}{}
	if f := c.read(); f.Type != TypeDelta || f.Seq != 1 {
		t.Fatalf("have %+v; want delta 1", f)
	}
	resume := pauseWrites(t, rs)
	for seq := 2; seq <= len(words); seq++ {
		e.gen.gate <- struct{}{}
		f, err := c.tryRead(3 * time.Second)
		if err != nil || f.Type != TypeDelta || f.Seq != seq || f.Text != words[seq-1] {
			t.Fatalf("delta %d while Redis takes no writes: have %+v, %v", seq, f, err)
		}
	}
	// Every delta came while Redis took no writes. The done must not: it
	// is read on its own while the test waits long enough for a done that
	// skips the store to show, then lets Redis take writes.
	type arrival struct {
		f   ServerFrame
		err error
		at  time.Time
	}
	got := make(chan arrival, 1)
	e.gen.gate <- struct{}{}
	go func() {
		f, err := c.tryRead(pauseCap)
		got <- arrival{f, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	resuming := time.Now()
	resume()
	a := <-got
	if a.err != nil || a.f.Type != TypeDone || a.f.FinishReason != engine.FinishStop {
		t.Fatalf("have %+v, %v; want done with finish_reason stop", a.f, a.err)
	}
	if a.at.Before(resuming) {
		t.Fatalf("done came %v before Redis took writes again: it cannot have been stored", resuming.Sub(a.at))
	}

	for _, after := range []int{0, 3, len(words)} {
		c.send(map[string]any{"type": "session.resume", "session": sid, "request": "r1", "after": after})
		if f := c.read(); f.Type != TypeSession {
			t.Fatalf("have %+v; want session", f)
		}
		text, last, done, errs := c.collectAfter("r1", after)
		if want := strings.Join(words[after:], ""); text != want || len(errs) > 0 || done.FinishReason != engine.FinishStop {
			t.Fatalf("resume after %d: have %q (last seq %d) %v %+v; want %q", after, text, last, errs, done, want)
		}
	}
}

// TestLogWriterSeesAppendsGoOut: what a delta waits for before its send is
// its append being written to Redis's connection, which happens while
// Redis executes no writes at all; the append lands once they resume.
func TestLogWriterSeesAppendsGoOut(t *testing.T) {
	rs := testredis.Start(t)
	// The round's own timeout outlasts the pause too: only Redis's answer
	// ends it.
	e := newEnv(t, patientClient(t, rs), "", func(o *Options) { o.WriteTimeout = pauseCap + 5*time.Second })
	widenHold(e.srv.logw, pauseCap)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resume := pauseWrites(t, rs)
	sink := make(deltaChan, 1)
	q := e.srv.logw.queue("s_sent", "r1", sink)
	defer e.srv.logw.end(q)
	e.srv.logw.push(q, logEntry{Seq: 1, Text: "one"})
	select {
	case <-sink:
	case <-time.After(5 * time.Second):
		t.Fatal("the delta was not released while Redis paused writes")
	}
	// Redis still takes no writes, so the round cannot have its answer
	// yet, nor can the watchdog have fired: the release was the write's.
	q.mu.Lock()
	inflight, stalled := q.inflight, q.stalled
	q.mu.Unlock()
	if !inflight {
		t.Fatal("released once the round ended: Redis's answer, not the write, was waited for")
	}
	if stalled {
		t.Fatal("the delta was released by the watchdog, not by its append's write")
	}
	resume()
	if !e.srv.logw.flush(ctx, q) {
		t.Fatal("the append did not land once Redis took writes again")
	}
	es, err := e.srv.log.readAfter(ctx, "s_sent", "r1", 0, 0)
	if err != nil || len(es) != 1 || es[0].Seq != 1 || es[0].Text != "one" {
		t.Fatalf("have log %+v, %v; want the one delta", es, err)
	}
}

// TestHeldDeltasGoOutWhenRedisHangs: a Redis that takes the log's
// connection but never answers never gets an append's bytes either, so
// the deltas are held, but only for sentWait: then they go to the client
// in order, and while the log stays stuck later ones go at once, and the
// end of a turn (settle) waits for its last ones at most that long too.
func TestHeldDeltasGoOutWhenRedisHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				// Reads what it is sent, answers nothing.
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			})
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: 2 * time.Second, MaxRetries: -1})
	tracker := newSentTracker()
	lrdb, ok := logClient(rdb, tracker)
	if !ok {
		t.Fatal("the log client cannot see its writes")
	}
	t.Cleanup(func() { _ = lrdb.Close(); _ = rdb.Close() })
	l := &streamLog{rdb: lrdb, ks: keyspace.New("t:"), maxLen: 100, ttl: time.Minute, w: durable.New(lrdb, durable.Options{}), sent: tracker}
	w := newLogWriter(l, slog.New(slog.NewTextHandler(io.Discard, nil)), 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); w.run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	sink := make(deltaChan, 16)
	q := w.queue("s", "r", sink)
	defer w.end(q)
	start := time.Now()
	for seq := 1; seq <= 3; seq++ {
		w.push(q, logEntry{Seq: seq, Text: fmt.Sprint("d", seq)})
	}
	for seq := 1; seq <= 3; seq++ {
		select {
		case e := <-sink:
			if e.Seq != seq {
				t.Fatalf("have delta %d; want %d: out of order", e.Seq, seq)
			}
			if took := time.Since(start); took < sentWait {
				t.Fatalf("delta %d released after %v, before its append went out or sentWait (%v) passed", seq, took, sentWait)
			}
		case <-time.After(time.Second):
			t.Fatalf("delta %d still held a second after its push", seq)
		}
	}
	// Stalled: the next one is not held at all.
	w.push(q, logEntry{Seq: 4, Text: "d4"})
	select {
	case e := <-sink:
		if e.Seq != 4 {
			t.Fatalf("have delta %d; want 4", e.Seq)
		}
	default:
		t.Fatal("a delta was held again while the log stays stuck")
	}

	q2 := w.queue("s", "r2", sink)
	defer w.end(q2)
	start = time.Now()
	w.push(q2, logEntry{Seq: 1, Text: "e1"})
	w.settle(q2)
	select {
	case e := <-sink:
		if e.Seq != 1 || e.Text != "e1" {
			t.Fatalf("have %+v; want the other turn's delta 1", e)
		}
	default:
		t.Fatal("settle returned before the turn's last delta went to its client")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("settle took %v; want about sentWait (%v)", took, sentWait)
	}
}

// TestAppendBatches: a one-delta batch (a plain XADD) and a backlog (the
// script) both land; a retry of what already landed adds nothing; a log
// that crash recovery ended takes nothing more and says so, whichever path
// the batch takes.
func TestAppendBatches(t *testing.T) {
	rdb := testredis.Client(t)
	l := &streamLog{rdb: rdb, ks: keyspace.New(testredis.Prefix(t)), maxLen: 100, ttl: time.Minute, w: durable.New(rdb, durable.Options{})}
	ctx := context.Background()
	done := ServerFrame{Type: TypeDone, Request: "r"}
	type step struct {
		seqs []int // appended in one batch ("d<seq>" each)
		done int   // > 0: instead, crash recovery ends the log after this seq
		open bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []int // the log's delta seqs afterwards
	}{
		{"one at a time", []step{{seqs: []int{1}, open: true}, {seqs: []int{2}, open: true}}, []int{1, 2}},
		{"backlog", []step{{seqs: []int{1, 2, 3}, open: true}, {seqs: []int{4}, open: true}}, []int{1, 2, 3, 4}},
		{"retried one", []step{{seqs: []int{1}, open: true}, {seqs: []int{1}, open: true}, {seqs: []int{2}, open: true}}, []int{1, 2}},
		{"retried backlog", []step{{seqs: []int{1, 2}, open: true}, {seqs: []int{1, 2, 3}, open: true}}, []int{1, 2, 3}},
		{"one after recovery", []step{{seqs: []int{1}, open: true}, {done: 1}, {seqs: []int{2}, open: false}}, []int{1}},
		{"backlog after recovery", []step{{seqs: []int{1}, open: true}, {done: 1}, {seqs: []int{2, 3}, open: false}}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "s_" + strings.ReplaceAll(tc.name, " ", "_")
			for k, st := range tc.steps {
				if st.done > 0 {
					if err := l.appendDone(ctx, sid, "r", st.done, done); err != nil {
						t.Fatal(err)
					}
					continue
				}
				var es []logEntry
				for _, q := range st.seqs {
					es = append(es, logEntry{Seq: q, Text: fmt.Sprint("d", q)})
				}
				res := l.appendBatches(ctx, []logBatch{{sid: sid, rid: "r", entries: es, expire: true}})
				if res[0].err != nil || res[0].open != st.open {
					t.Fatalf("step %d: have open=%v err=%v; want open=%v", k, res[0].open, res[0].err, st.open)
				}
			}
			es, err := l.readAfter(ctx, sid, "r", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, e := range es {
				if e.Done != nil {
					continue
				}
				if e.Text != fmt.Sprint("d", e.Seq) {
					t.Fatalf("entry %d holds %q", e.Seq, e.Text)
				}
				got = append(got, e.Seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("have deltas %v; want %v", got, tc.want)
			}
			if last := es[len(es)-1]; tc.steps[len(tc.steps)-2].done > 0 && last.Done == nil {
				t.Fatalf("the log's last entry is delta %d; want the done record", last.Seq)
			}
			if ttl := rdb.PTTL(ctx, l.key(sid, "r")).Val(); ttl <= 0 {
				t.Fatalf("the log has TTL %v; want one", ttl)
			}
		})
	}
}

// TestAppendTagGoesLast: the sent tracker's tag rides in the last command
// of a round's pipeline, so the write that carries it has carried every
// append before it.
func TestAppendTagGoesLast(t *testing.T) {
	rdb := testredis.Start(t).Client()
	var last []redis.Cmder
	rdb.AddHook(pipeHook(func(cmds []redis.Cmder) {
		if cmds[0].Name() == "xadd" || cmds[0].Name() == "eval" { // not the connection's setup
			last = cmds
		}
	}))
	tr := newSentTracker()
	l := &streamLog{rdb: rdb, ks: keyspace.New("t:"), maxLen: 100, ttl: time.Minute, w: durable.New(rdb, durable.Options{}), sent: tr}
	q := &logQueue{out: make(deltaChan, 4)}
	m1, m2 := &sentMark{q: q, through: 1}, &sentMark{q: q, through: 2}
	res := l.appendBatches(context.Background(), []logBatch{
		{sid: "a", rid: "r", entries: []logEntry{{Seq: 1, Text: "x"}}, mark: m1},
		{sid: "a", rid: "q", entries: []logEntry{{Seq: 1, Text: "y"}, {Seq: 2, Text: "z"}}, mark: m2},
	})
	if res[0].err != nil || res[1].err != nil {
		t.Fatal(res[0].err, res[1].err)
	}
	if len(last) < 3 {
		t.Fatalf("have pipeline %v; want both appends and the tag", last)
	}
	for i, c := range last {
		tagged := strings.Contains(fmt.Sprint(c.Args()...), tr.prefix)
		if tagged != (i == len(last)-1) {
			t.Fatalf("command %d of %d (%v) tagged=%v; want the tag on the last only", i, len(last), c.Args(), tagged)
		}
	}
	if len(tr.pending) != 0 {
		t.Fatalf("tags %v still pending after the round", tr.pending)
	}
}

type pipeHook func([]redis.Cmder)

func (h pipeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h(cmds)
		return next(ctx, cmds)
	}
}

// TestRefusedAppendFailsOnlyItsBatch: Redis refusing one command of an
// append round (an XADD of a delta already there, a log it cannot append
// to) says nothing of the other logs' batches in the same pipeline. They
// landed, so they must count as logged: a batch reported failed holds its
// deltas back from the crash guarantee and warns of an outage that is not.
func TestRefusedAppendFailsOnlyItsBatch(t *testing.T) {
	rdb := testredis.Client(t)
	l := &streamLog{rdb: rdb, ks: keyspace.New(testredis.Prefix(t)), maxLen: 100, ttl: time.Minute, w: durable.New(rdb, durable.Options{})}
	ctx := context.Background()
	entries := func(seqs ...int) []logEntry {
		var es []logEntry
		for _, q := range seqs {
			es = append(es, logEntry{Seq: q, Text: fmt.Sprint("d", q)})
		}
		return es
	}
	for _, tc := range []struct {
		name   string
		setup  func(key string) error // the refused batch's log beforehand
		bad    []int                  // the refused batch's deltas
		badErr bool                   // the refused batch itself fails
		good   []int                  // another log's deltas, same round
	}{
		{"delta already there", func(key string) error {
			return l.appendBatches(ctx, []logBatch{{sid: "x", rid: key, entries: entries(1), expire: true}})[0].err
		}, []int{1}, false, []int{1}},
		{"delta into a log of the wrong type", func(key string) error {
			return rdb.Set(ctx, l.key("x", key), "not a stream", time.Minute).Err()
		}, []int{1}, true, []int{1}},
		{"backlog into a log of the wrong type", func(key string) error {
			return rdb.Set(ctx, l.key("x", key), "not a stream", time.Minute).Err()
		}, []int{1, 2}, true, []int{1, 2}},
		{"delta already there, backlog beside it", func(key string) error {
			return l.appendBatches(ctx, []logBatch{{sid: "x", rid: key, entries: entries(1), expire: true}})[0].err
		}, []int{1}, false, []int{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rid := strings.ReplaceAll(tc.name, " ", "_")
			if err := tc.setup(rid); err != nil {
				t.Fatal(err)
			}
			res := l.appendBatches(ctx, []logBatch{
				{sid: "x", rid: rid, entries: entries(tc.bad...), expire: true},
				{sid: "y", rid: rid, entries: entries(tc.good...), expire: true},
			})
			if (res[0].err != nil) != tc.badErr {
				t.Fatalf("refused batch: have err %v; want failed=%v", res[0].err, tc.badErr)
			}
			es, err := l.readAfter(ctx, "y", rid, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res[1].err != nil || !res[1].open {
				t.Fatalf("the other batch landed (%d of %d deltas in its log) yet reports open=%v err=%v", len(es), len(tc.good), res[1].open, res[1].err)
			}
			if len(es) != len(tc.good) {
				t.Fatalf("the other log holds %d deltas; want %d", len(es), len(tc.good))
			}
		})
	}
}

// deltaChan is a deltaSink that passes each released delta on.
type deltaChan chan logEntry

func (c deltaChan) sendDelta(seq int, text string) { c <- logEntry{Seq: seq, Text: text} }

// orderSink records the deltas a queue releases.
type orderSink struct {
	mu   sync.Mutex
	seqs []int
}

func (s *orderSink) sendDelta(seq int, _ string) {
	s.mu.Lock()
	s.seqs = append(s.seqs, seq)
	s.mu.Unlock()
}

// TestLogReleaseOrderUnderPauses: forty turns push deltas at random paces
// while Redis keeps pausing its writes; every turn's deltas are released
// exactly once, in order, and all of them before settle returns.
func TestLogReleaseOrderUnderPauses(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	w := e.srv.logw
	r := rand.New(rand.NewPCG(3, 4))
	var rmu sync.Mutex
	intn := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return r.IntN(n)
	}
	stop := make(chan struct{})
	var pauser sync.WaitGroup
	pauser.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(intn(150)) * time.Millisecond):
			}
			_ = rs.Client().Do(context.Background(), "client", "pause", 30+intn(80), "write").Err()
		}
	})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			s := &orderSink{}
			q := w.queue("s_order", fmt.Sprint("r", i), s)
			defer w.end(q)
			n := 100 + intn(100)
			for seq := 1; seq <= n; seq++ {
				w.push(q, logEntry{Seq: seq, Text: fmt.Sprint(seq, " ")})
				if intn(4) == 0 {
					time.Sleep(time.Duration(intn(3000)) * time.Microsecond)
				}
			}
			w.settle(q)
			s.mu.Lock()
			got := slices.Clone(s.seqs)
			s.mu.Unlock()
			if len(got) != n {
				t.Errorf("turn %d: %d deltas released by settle; want %d", i, len(got), n)
			}
			for k, v := range got {
				if v != k+1 {
					t.Errorf("turn %d: release %d is seq %d", i, k, v)
					break
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pauser.Wait()
}

// failingGen is the fake engine whose reply ends in an engine failure
// after its last delta.
type failingGen struct{ *fakeGenerator }

type failingStream struct{ *fakeStream }

func (g failingGen) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	ev, err := g.fakeGenerator.Generate(ctx, r)
	if err != nil {
		return nil, err
	}
	return failingStream{ev.(*fakeStream)}, nil
}

func (s failingStream) Recv(ctx context.Context) (engine.Event, error) {
	if s.i == len(s.words) && !s.ended {
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishError, Err: errors.New("engine failed")}}, nil
	}
	return s.fakeStream.Recv(ctx)
}

// TestErrorFrameAfterLastDelta: an engine failure's error frame comes
// after every delta of the reply, though the log writer, not the turn,
// sends the deltas (PROTOCOL.md: nothing of a request follows its end).
func TestErrorFrameAfterLastDelta(t *testing.T) {
	rs := testredis.Start(t)
	e := newEnv(t, rs.Client(), "", nil)
	e.srv.o.Generator = failingGen{e.gen}
	c := e.login("alice")
	sid := c.createSession("")
	for i := range 20 {
		req := fmt.Sprint("r", i)
		content := strings.Repeat("w ", 30)
		c.send(map[string]any{"type": "chat", "session": sid, "request": req, "content": content})
		want := len(strings.SplitAfter(fakeReply(content), " "))
		seq, sawErr := 0, false
		for {
			f := c.read()
			if f.Type == TypeDelta {
				if sawErr {
					t.Fatalf("%s: delta %d after the error frame", req, f.Seq)
				}
				seq = f.Seq
				continue
			}
			if f.Type == TypeError {
				if seq != want {
					t.Fatalf("%s: error frame after delta %d of %d", req, seq, want)
				}
				sawErr = true
				continue
			}
			if f.Type == TypeDone {
				break
			}
		}
		if !sawErr {
			t.Fatalf("%s: no error frame", req)
		}
	}
}
