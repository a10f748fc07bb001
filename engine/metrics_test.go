package engine

import (
	"context"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/spec"
)

// reports adds up the step reports an engine hands over.
type reports struct {
	mu          sync.Mutex
	steps       int
	first       []FirstToken
	gaps        int
	finished    []FinishedRequest
	prefill     int
	decode      int
	tenants     map[string][2]int // prefill, decode
	preemptions int
	peakDevice  int
	lookups     map[string][3]int // device, host, miss
	last        *Snapshot
	bad         []string // inconsistencies seen in a report
}

func newReports() *reports {
	return &reports{tenants: map[string][2]int{}, lookups: map[string][3]int{}}
}

func (r *reports) ObserveStep(s *StepReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps++
	r.first = append(r.first, s.FirstTokens...)
	r.gaps += len(s.TokenGaps)
	r.finished = append(r.finished, s.Finished...)
	r.prefill += s.PrefillTokens
	r.decode += s.DecodeTokens
	p, d := 0, 0
	for _, t := range s.Tenants {
		w := r.tenants[t.Tenant]
		r.tenants[t.Tenant] = [2]int{w[0] + t.PrefillTokens, w[1] + t.DecodeTokens}
		p, d = p+t.PrefillTokens, d+t.DecodeTokens
	}
	if p != s.PrefillTokens || d != s.DecodeTokens {
		r.bad = append(r.bad, "tenant split does not add up")
	}
	r.preemptions += len(s.Preemptions)
	for _, l := range s.PrefixLookups {
		w := r.lookups[l.Tenant]
		r.lookups[l.Tenant] = [3]int{w[0] + l.Device, w[1] + l.Host, w[2] + l.Miss}
	}
	if s.Snapshot == nil || !s.Snapshot.At.Equal(s.At) {
		r.bad = append(r.bad, "snapshot missing or of another time")
		return
	}
	r.peakDevice = max(r.peakDevice, s.Snapshot.Device.Used)
	r.last = s.Snapshot
}

// TestObserverSeesStart: an observer gets the starting state from New,
// before any step, so an idle engine's KV and queues can be read (a
// scrape of a fresh server saw no KV gauges at all).
func TestObserverSeesStart(t *testing.T) {
	rep := newReports()
	testEngine(t, newFakeModel(t), Options{Observer: rep, BlockSize: 4, KVBlocks: 10})
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if rep.steps != 1 || len(rep.bad) != 0 {
		t.Fatalf("have %d reports (%v) before any step; want the starting one", rep.steps, rep.bad)
	}
	if s := rep.last; s == nil || s.Steps != 0 || s.Device.Used != 0 || s.Device.Free != 10 {
		t.Errorf("starting snapshot %+v; want step 0 with 10 free device blocks and none used", s)
	}
}

func TestStepReports(t *testing.T) {
	m := newFakeModel(t)
	rep := newReports()
	e, clk := testEngine(t, m, Options{Observer: rep, BlockSize: 4, KVBlocks: 10})
	var streams []*Stream
	for i := range 3 {
		s, err := submitNow(e, Request{Tenant: "t" + string(rune('a'+i%2)), Prompt: []int32{1, 5, 6, 7}, MaxTokens: 10 + i})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	steps := drive(t, e, clk, time.Millisecond, 1000)
	if len(rep.bad) > 0 {
		t.Fatalf("inconsistent reports: %v", rep.bad)
	}
	if rep.steps != steps+1 || len(rep.first) != 3 || rep.gaps != 9+10+11 || rep.decode != 33 || rep.prefill != 12 {
		t.Errorf("have %d reports of %d steps, %d first tokens, %d gaps, %d decode and %d prefill tokens; want one a step and the starting one, 3, 30, 33 and 12",
			rep.steps, steps, len(rep.first), rep.gaps, rep.decode, rep.prefill)
	}
	if want := map[string][2]int{"ta": {8, 10 + 12}, "tb": {4, 11}}; !maps.Equal(rep.tenants, want) {
		t.Errorf("have tokens by tenant %v; want %v", rep.tenants, want)
	}
	if rep.preemptions == 0 || rep.peakDevice < 8 || rep.peakDevice > 10 {
		t.Errorf("have %d preemptions, peak %d device blocks; want some, 8 to 10", rep.preemptions, rep.peakDevice)
	}
	// Each finished request is reported as its stream's final says.
	if len(rep.finished) != 3 {
		t.Fatalf("have %d finished; want 3", len(rep.finished))
	}
	for _, s := range streams {
		f := collect(t, s).final
		var fr *FinishedRequest
		for i := range rep.finished {
			if rep.finished[i].ID == s.ID() {
				fr = &rep.finished[i]
			}
		}
		if fr == nil || fr.Reason != f.FinishReason || fr.Usage != f.Usage || fr.Stats.Total != f.Stats.Total ||
			fr.Stats.TTFT != f.Stats.TTFT || fr.Stats.Queue != f.Stats.Queue || !fr.Scheduled {
			t.Errorf("%s: have report %+v; want its final %+v", s.ID(), fr, f)
		}
	}
	if l := rep.last; l.Running != 0 || l.Queue.Total() != 0 || l.Steps != int64(steps) || l.Device.Used+l.Device.Free != 10 {
		t.Errorf("have last snapshot %+v; want nothing running or waiting after %d steps, 10 device blocks", l, steps)
	}
	if have := e.Snapshot(); have != *rep.last {
		t.Errorf("have Snapshot %+v; want the last report's %+v", have, *rep.last)
	}
}

func TestPrefixReports(t *testing.T) {
	rep := newReports()
	e, clk := testEngine(t, newFakeModel(t), Options{BlockSize: 4, KVBlocks: 16, HostKVBlocks: 32, Observer: rep})
	rng := rand.New(rand.NewPCG(15, 16))
	p := prompt(rng, 21)
	run(t, e, clk, Request{Tenant: "a", Prompt: p, MaxTokens: 4, SharedPrefix: 8})
	// b's 51 computed tokens take 13 of the 16 blocks: 2 of the 5 cached
	// for a (its deepest) go to the host.
	run(t, e, clk, Request{Tenant: "b", Prompt: prompt(rng, 44), MaxTokens: 8})
	run(t, e, clk, Request{Tenant: "a", Prompt: p, MaxTokens: 1})
	e.step(clk.Now()) // idle: the cache's state is read
	// a: 21 missed, then 20 of 21 hit: 3 blocks on the device, 2
	// promoted from the host.
	want := map[string][3]int{"a": {12, 8, 22}, "b": {0, 0, 44}}
	if !maps.Equal(rep.lookups, want) {
		t.Errorf("have device, host, miss tokens %v; want %v", rep.lookups, want)
	}
	ps := e.Snapshot().Prefix
	if ps == nil {
		t.Fatal("have no prefix state in the snapshot")
	}
	if ps.Promotions != 2 || ps.Demotions < 2 {
		t.Errorf("have %d promoted, %d demoted blocks; want 2, at least 2", ps.Promotions, ps.Demotions)
	}
	blocks := map[string]NamespaceBlocks{}
	for _, n := range ps.Namespaces {
		blocks[n.Namespace] = n
	}
	if sh := blocks[SharedNamespace]; sh.Device+sh.Host != 2 || blocks["a"].Device == 0 {
		t.Errorf("have blocks %+v; want 2 shared, some of a's on the device", ps.Namespaces)
	}
}

// loadGate holds the step goroutine at the first report of a loaded
// engine until the test has read the snapshot from its own goroutine.
type loadGate struct {
	once sync.Once
	seen chan Snapshot
	ack  chan struct{}
}

func (g *loadGate) ObserveStep(r *StepReport) {
	if r.Snapshot.Load() == 0 {
		return
	}
	g.once.Do(func() {
		g.seen <- *r.Snapshot
		<-g.ack
	})
}

// TestSnapshotConcurrent reads snapshots from other goroutines while the
// engine's own runs requests (run it with -race): each is whole, steps
// only go forward, a loaded step's snapshot is what other goroutines read,
// and once the requests are done one shows the engine empty.
func TestSnapshotConcurrent(t *testing.T) {
	gate := &loadGate{seen: make(chan Snapshot, 1), ack: make(chan struct{})}
	e, err := New(newFakeModel(t), Options{BlockSize: 4, KVBlocks: 64, Observer: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if s := e.Snapshot(); s.Device.Free != 64 || s.Load() != 0 {
		t.Errorf("have %+v before any request; want 64 free blocks, nothing loaded", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var last int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := e.Snapshot()
				if s.Steps < last || s.Device.Used+s.Device.Free != s.Device.Cap || s.Load() > 8 {
					t.Errorf("have snapshot %+v after step %d; want steps going forward, whole tiers, at most 8 requests", s, last)
					return
				}
				last = s.Steps
			}
		}()
	}
	// The gate is answered while submissions go on: Submit waits for
	// the step goroutine.
	gated := make(chan struct{})
	go func() {
		defer close(gated)
		select {
		case want := <-gate.seen:
			if have := e.Snapshot(); have != want || have.Load() == 0 || have.Steps == 0 {
				t.Errorf("have %+v from another goroutine; want the loaded step's %+v", have, want)
			}
			close(gate.ack)
		case <-ctx.Done():
			t.Error("no step reported a loaded engine")
		}
	}()
	var streams []*Stream
	for i := range 8 {
		s, err := e.Submit(ctx, Request{Prompt: []int32{1, int32(5 + i)}, MaxTokens: 40})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	<-gated
	for _, s := range streams {
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Final != nil {
				break
			}
		}
	}
	// The snapshot is published at the end of the step that ended the
	// last request, just after its final event went out.
	for s := e.Snapshot(); s.Load() != 0; s = e.Snapshot() {
		if ctx.Err() != nil {
			t.Fatalf("have %+v after every request ended; want an empty engine", s)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	readers.Wait()
}

// TestShutdownReported: requests ended by Close reach the observer.
func TestShutdownReported(t *testing.T) {
	rep := newReports()
	e, clk := testEngine(t, newFakeModel(t), Options{Observer: rep})
	if _, err := submitNow(e, Request{Prompt: []int32{1, 5}, MaxTokens: 100}); err != nil {
		t.Fatal(err)
	}
	e.step(clk.Now())
	e.Close()
	if len(rep.finished) != 1 || rep.finished[0].Reason != FinishError || rep.last.Load() != 0 {
		t.Errorf("have finished %+v, last snapshot %+v; want one error, an empty engine", rep.finished, rep.last)
	}
}

// draftTotals adds up a run's speculation by drafter.
type draftTotals struct {
	reports
	drafts map[string]DraftCount
}

func (d *draftTotals) ObserveStep(s *StepReport) {
	d.reports.ObserveStep(s)
	for _, c := range s.Drafts {
		w := d.drafts[c.Drafter]
		d.drafts[c.Drafter] = DraftCount{Drafter: c.Drafter, Drafts: w.Drafts + c.Drafts, Drafted: w.Drafted + c.Drafted, Accepted: w.Accepted + c.Accepted}
	}
}

func TestDraftReports(t *testing.T) {
	m := newFakeModel(t)
	m.next = cycleNext // n-gram drafts mostly right
	dt := &draftTotals{reports: *newReports(), drafts: map[string]DraftCount{}}
	e, clk := testEngine(t, m, Options{Observer: dt, Speculation: Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}})
	rng := rand.New(rand.NewPCG(3, 4))
	var streams []*Stream
	for range 3 {
		s, err := submitNow(e, Request{Prompt: prompt(rng, 20), MaxTokens: 40})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	drive(t, e, clk, time.Millisecond, 1000)
	completion, drafted, accepted := 0, 0, 0
	for _, s := range streams {
		f := collect(t, s).final
		completion += f.Usage.CompletionTokens
		drafted += f.Stats.Drafted
		accepted += f.Stats.Accepted
	}
	d := dt.drafts["ngram"]
	// The requests' own counts (done.stats, the OpenAI usage) are the
	// reports' (the metrics), the step that ends a request included.
	if drafted != d.Drafted || accepted != d.Accepted {
		t.Errorf("have %d drafted, %d accepted in the finals; the step reports say %d and %d", drafted, accepted, d.Drafted, d.Accepted)
	}
	if len(dt.drafts) != 1 || d.Drafts == 0 || d.Accepted == 0 || d.Accepted > d.Drafted || d.Drafted > 4*d.Drafts {
		t.Errorf("have drafts %+v; want n-gram drafts of at most 4 tokens, some accepted", dt.drafts)
	}
	// Every committed token is a decode: accepted drafts, plus the
	// target's own token each step.
	if dt.decode != completion || dt.decode < d.Accepted+d.Drafts {
		t.Errorf("have %d decode tokens, drafts %+v; want the %d completion tokens, at least accepted plus one per draft", dt.decode, d, completion)
	}
}
