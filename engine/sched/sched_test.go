package sched

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(tb testing.TB, c Config) *Scheduler {
	tb.Helper()
	s, err := New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestConfigDefaults(t *testing.T) {
	s := mustNew(t, Config{})
	c := s.Config()
	if c.BlockSize != 16 || c.MaxRunning != 64 || c.MaxQueued != 1024 || c.AgingAfter != 5*time.Second || c.Quantum != 256 || c.Defaults.Weight != 1 {
		t.Errorf("have %+v; want documented defaults", c)
	}
	if _, err := New(Config{BlockSize: -1}); err == nil {
		t.Error("have nil error for negative BlockSize; want an error")
	}
}

func TestEnqueueRefusals(t *testing.T) {
	type sub struct {
		at  time.Duration
		r   Request
		err error
	}
	req := func(id, tenant string, tokens int, l Limits) Request {
		return Request{ID: id, Tenant: tenant, Tokens: tokens, Charge: tokens, Limits: l}
	}
	tests := []struct {
		name string
		cfg  Config
		subs []sub
	}{
		{"global queue cap", Config{MaxQueued: 2}, []sub{
			{0, req("a", "t1", 1, Limits{}), nil},
			{0, req("b", "t2", 1, Limits{}), nil},
			{0, req("c", "t3", 1, Limits{}), ErrQueueFull},
		}},
		{"tenant queue cap", Config{}, []sub{
			{0, req("a", "t1", 1, Limits{MaxQueued: 1}), nil},
			{0, req("b", "t1", 1, Limits{MaxQueued: 1}), ErrOverQuota},
			{0, req("c", "t2", 1, Limits{MaxQueued: 1}), nil},
		}},
		{"tenant queue cap from defaults", Config{Defaults: Limits{MaxQueued: 1}}, []sub{
			{0, req("a", "t1", 1, Limits{}), nil},
			{0, req("b", "t1", 1, Limits{}), ErrOverQuota},
		}},
		{"tokens per minute", Config{}, []sub{
			{0, req("a", "t1", 60, Limits{TokensPerMinute: 100}), nil},
			{10 * time.Second, req("b", "t1", 50, Limits{TokensPerMinute: 100}), ErrOverQuota},
			{10 * time.Second, req("c", "t1", 40, Limits{TokensPerMinute: 100}), nil},
			{20 * time.Second, req("d", "t2", 100, Limits{TokensPerMinute: 100}), nil},
			// a minute after "a", its 60 tokens have left the window
			{61 * time.Second, req("e", "t1", 50, Limits{TokensPerMinute: 100}), nil},
		}},
		{"request larger than tokens per minute", Config{}, []sub{
			{0, req("a", "t1", 101, Limits{TokensPerMinute: 100}), ErrOverQuota},
		}},
		{"duplicate id", Config{}, []sub{
			{0, req("a", "t1", 1, Limits{}), nil},
			{0, req("a", "t2", 1, Limits{}), ErrDuplicate},
		}},
		{"invalid", Config{}, []sub{
			{0, req("", "t1", 1, Limits{}), ErrInvalid},
			{0, req("a", "t1", 0, Limits{}), ErrInvalid},
			{0, Request{ID: "b", Tokens: 1, Class: 7}, ErrInvalid},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.cfg)
			for _, sb := range tt.subs {
				err := s.Enqueue(t0.Add(sb.at), sb.r)
				if !errors.Is(err, sb.err) || (sb.err == nil) != (err == nil) {
					t.Errorf("Enqueue(%s) at %v: have %v; want %v", sb.r.ID, sb.at, err, sb.err)
				}
			}
		})
	}
}

func TestRemoveWaitingFreesQueueSlot(t *testing.T) {
	s := mustNew(t, Config{MaxQueued: 1})
	if err := s.Enqueue(t0, Request{ID: "a", Tokens: 1}); err != nil {
		t.Fatal(err)
	}
	if !s.Remove("a") {
		t.Fatal("have Remove(a) = false; want true")
	}
	if s.Remove("a") {
		t.Error("have second Remove(a) = true; want false")
	}
	if err := s.Enqueue(t0, Request{ID: "b", Tokens: 1}); err != nil {
		t.Errorf("have %v after the queue emptied; want nil", err)
	}
}

// sim drives a Scheduler the way the engine does, with a fake pool of
// blocks, and checks the plan's invariants on every step.
type sim struct {
	t        testing.TB
	s        *Scheduler
	now      time.Time
	dt       time.Duration
	budget   int
	free     int
	hostFree int
	seqs     map[string]*simSeq
	// served counts every token run per tenant (prefill and decode).
	served map[string]int
	// done lists finished request ids in order.
	done []string
	// firstRun records the step a request first ran.
	firstRun map[string]int
	step     int
	admits   []string // ids in the order they first ran
	// target is Resources.Target of every step.
	target int
	// efficient is Resources.Efficient of every step.
	efficient int
	debug     bool
	// engineBudget sets Tokens as the engine does: the target, but never
	// less than the decodes plus one.
	engineBudget bool
	// trace has a line per step: who ran how many tokens, who was
	// preempted.
	trace []string
}

type simSeq struct {
	id, tenant  string
	prompt      int
	want        int // tokens to generate
	gen         int // generated so far
	kv          int // tokens the sim believes are cached
	held        int // device blocks
	host        int // host blocks
	preemptions int
}

func newSim(tb testing.TB, c Config, blocks, hostBlocks, budget int) *sim {
	return &sim{t: tb, s: mustNew(tb, c), now: t0, dt: 10 * time.Millisecond, budget: budget,
		free: blocks, hostFree: hostBlocks, seqs: map[string]*simSeq{}, served: map[string]int{}, firstRun: map[string]int{}}
}

func (m *sim) submit(id, tenant string, class Class, prompt, want int, l Limits) error {
	err := m.s.Enqueue(m.now, Request{ID: id, Tenant: tenant, Class: class, Tokens: prompt, Charge: prompt, Limits: l})
	if err == nil {
		m.seqs[id] = &simSeq{id: id, tenant: tenant, prompt: prompt, want: want}
	}
	return err
}

func (m *sim) run() Plan {
	m.t.Helper()
	bs := m.s.cfg.BlockSize
	tokens := m.budget
	if m.engineBudget {
		decodes := 0
		for _, q := range m.s.running {
			if q.total-q.kv == 1 {
				decodes++
			}
		}
		tokens = min(m.budget, max(m.target, decodes+1))
	}
	p := m.s.Schedule(m.now, Resources{Tokens: tokens, Target: m.target, Efficient: m.efficient, FreeBlocks: m.free, FreeHostBlocks: m.hostFree})
	line := fmt.Sprintf("%3d:", m.step)
	for _, c := range p.Run {
		line += fmt.Sprintf(" %s+%d", c.ID, c.N)
	}
	for _, pr := range p.Preempt {
		line += " !" + pr.ID
	}
	if m.debug {
		ra, rb, wa, wb := 0, 0, 0, 0
		for _, q := range m.s.running {
			if q.t.name == "a" {
				ra++
			} else {
				rb++
			}
		}
		for _, q := range m.s.seqs {
			if !q.running {
				if q.t.name == "a" {
					wa++
				} else {
					wb++
				}
			}
		}
		line += fmt.Sprintf("   [run a%d b%d wait a%d b%d]", ra, rb, wa, wb)
		m.t.Log(line)
	}
	m.trace = append(m.trace, line)
	for _, pr := range p.Preempt {
		q := m.seqs[pr.ID]
		if pr.Blocks != q.held {
			m.t.Fatalf("step %d: preempt %s: have %d blocks; sim holds %d", m.step, pr.ID, pr.Blocks, q.held)
		}
		m.free += q.held
		q.held = 0
		q.preemptions++
		if pr.Swap {
			if m.hostFree < pr.Blocks {
				m.t.Fatalf("step %d: swap %s: %d blocks, %d host blocks free", m.step, pr.ID, pr.Blocks, m.hostFree)
			}
			m.hostFree -= pr.Blocks
			q.host = pr.Blocks
		} else {
			q.kv = 0
		}
	}
	total := 0
	for _, c := range p.Run {
		q := m.seqs[c.ID]
		if c.Resume {
			if q.host == 0 {
				m.t.Fatalf("step %d: resume %s which is not swapped", m.step, c.ID)
			}
			m.hostFree += q.host
			q.held, q.host = 0, 0
		}
		if c.Start != q.kv {
			m.t.Fatalf("step %d: %s chunk starts at %d; sim has %d cached (a token would be lost or repeated)", m.step, c.ID, c.Start, q.kv)
		}
		if want := (c.Start + c.N + bs - 1) / bs; c.Blocks != want {
			m.t.Fatalf("step %d: %s: have Blocks %d; want %d", m.step, c.ID, c.Blocks, want)
		}
		m.free -= c.Blocks - q.held
		q.held = c.Blocks
		if m.free < 0 {
			m.t.Fatalf("step %d: pool overdrawn by %d", m.step, -m.free)
		}
		q.kv += c.N
		known := q.prompt + q.gen
		if c.Logits != (q.kv == known) {
			m.t.Fatalf("step %d: %s: Logits %v at %d of %d known", m.step, c.ID, c.Logits, q.kv, known)
		}
		total += c.N
		m.served[q.tenant] += c.N
		if _, ok := m.firstRun[c.ID]; !ok {
			m.firstRun[c.ID] = m.step
			m.admits = append(m.admits, c.ID)
		}
	}
	if total > tokens {
		m.t.Fatalf("step %d: %d tokens over budget %d", m.step, total, m.budget)
	}
	for _, c := range p.Run {
		q := m.seqs[c.ID]
		if !c.Logits {
			continue
		}
		q.gen++
		if q.gen >= q.want {
			m.s.Remove(c.ID)
			m.free += q.held
			delete(m.seqs, c.ID)
			m.done = append(m.done, c.ID)
		} else {
			m.s.Append(m.now, c.ID, 1)
		}
	}
	m.now = m.now.Add(m.dt)
	m.step++
	return p
}

func TestChunkedPrefillDoesNotStallDecodes(t *testing.T) {
	m := newSim(t, Config{}, 1000, 0, 64)
	for i := range 4 {
		if err := m.submit(fmt.Sprint("d", i), "t", Standard, 4, 100, Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	m.run() // prefill all four
	if err := m.submit("long", "t", Standard, 200, 1, Limits{}); err != nil {
		t.Fatal(err)
	}
	var chunks []int
	for range 5 {
		p := m.run()
		decodes := 0
		for _, c := range p.Run {
			if c.ID == "long" {
				chunks = append(chunks, c.N)
			} else if c.N == 1 {
				decodes++
			}
		}
		if decodes != 4 {
			t.Fatalf("step %d: have %d decodes; want 4 every step", m.step, decodes)
		}
	}
	if want := []int{60, 60, 60, 20}; fmt.Sprint(chunks) != fmt.Sprint(want) {
		t.Errorf("have prefill chunks %v; want %v", chunks, want)
	}
}

func TestStrictPriority(t *testing.T) {
	m := newSim(t, Config{MaxRunning: 1}, 100, 0, 64)
	m.submit("b", "t", Batch, 4, 1, Limits{})
	m.submit("s", "t", Standard, 4, 1, Limits{})
	m.submit("i", "t", Interactive, 4, 1, Limits{})
	for range 3 {
		m.run()
	}
	if want := "[i s b]"; fmt.Sprint(m.admits) != want {
		t.Errorf("have admission order %v; want %s", m.admits, want)
	}
}

func TestMaxConcurrentPerTenant(t *testing.T) {
	m := newSim(t, Config{}, 1000, 0, 512)
	for i := range 5 {
		m.submit(fmt.Sprint("a", i), "a", Standard, 4, 10, Limits{MaxConcurrent: 2})
	}
	m.submit("b0", "b", Standard, 4, 10, Limits{})
	m.run()
	if have := m.s.Stats().Running; have != 3 {
		t.Errorf("have %d running; want 3 (2 for capped tenant a, 1 for b)", have)
	}
}

func TestStarvationAging(t *testing.T) {
	// An interactive flood keeps the single running slot busy; a batch
	// request must still run once it has aged past the flood.
	const aging = 100 * time.Millisecond
	m := newSim(t, Config{MaxRunning: 1, MaxQueued: 8, AgingAfter: aging}, 1000, 0, 64)
	if err := m.submit("batch", "b", Batch, 4, 2, Limits{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for m.step < 1000 {
		for range 2 { // two arrivals a step; the slot serves fewer
			m.submit(fmt.Sprint("i", n), "i", Interactive, 4, 2, Limits{})
			n++
		}
		m.run()
		if _, ok := m.firstRun["batch"]; ok {
			break
		}
	}
	at, ok := m.firstRun["batch"]
	if !ok {
		t.Fatalf("batch request never ran in %d steps under the flood", m.step)
	}
	waited := time.Duration(at) * m.dt
	if waited < 2*aging {
		t.Errorf("batch ran after %v; want no earlier than 2×AgingAfter = %v (strict priority)", waited, 2*aging)
	}
	if waited > 4*aging {
		t.Errorf("batch ran after %v; want within 4×AgingAfter = %v", waited, 4*aging)
	}
}

// saturate runs tenants with endless backlogs and returns the tokens each
// was served after a warm-up.
func saturate(t *testing.T, weights map[string]float64, prompt, gen map[string]int, steps int) map[string]int {
	t.Helper()
	m := newSim(t, Config{MaxRunning: 16, Quantum: 64}, 10000, 0, 128)
	n := 0
	names := []string{}
	for name := range weights {
		names = append(names, name)
	}
	refill := func() {
		for _, name := range names {
			for m.s.tenants[name] == nil || m.s.tenants[name].queued < 8 {
				if err := m.submit(fmt.Sprint(name, n), name, Standard, prompt[name], gen[name], Limits{Weight: weights[name]}); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	for range steps / 5 {
		refill()
		m.run()
	}
	m.served = map[string]int{}
	for range steps {
		refill()
		m.run()
	}
	return m.served
}

func TestFairnessWeights(t *testing.T) {
	served := saturate(t, map[string]float64{"a": 1, "b": 3},
		map[string]int{"a": 20, "b": 20}, map[string]int{"a": 30, "b": 30}, 3000)
	ratio := float64(served["b"]) / float64(served["a"])
	if ratio < 3*0.9 || ratio > 3*1.1 {
		t.Errorf("have tokens b/a = %d/%d = %.3f; want 3 within 10%%", served["b"], served["a"], ratio)
	}
}

func TestFairnessJain(t *testing.T) {
	// Equal weights, very different request shapes.
	served := saturate(t, map[string]float64{"a": 1, "b": 1, "c": 1},
		map[string]int{"a": 8, "b": 100, "c": 40}, map[string]int{"a": 8, "b": 60, "c": 4}, 3000)
	var sum, sq float64
	for _, v := range served {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	jain := sum * sum / (float64(len(served)) * sq)
	if jain < 0.95 {
		t.Errorf("have Jain index %.3f over %v; want ≥ 0.95", jain, served)
	}
}

func TestPreemptionAndResume(t *testing.T) {
	for _, tt := range []struct {
		name string
		host int
		swap bool
	}{
		{"swap to host", 100, true},
		{"drop and recompute", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// 6 blocks of 4 tokens; two sequences of prompt 8 grow
			// until they cannot both fit.
			m := newSim(t, Config{BlockSize: 4}, 6, tt.host, 64)
			m.submit("old", "t", Standard, 8, 12, Limits{})
			m.run()
			m.submit("new", "t", Standard, 8, 12, Limits{})
			var pre []Preemption
			for range 100 {
				p := m.run()
				pre = append(pre, p.Preempt...)
				if len(m.seqs) == 0 {
					break
				}
			}
			if len(m.seqs) != 0 {
				t.Fatalf("have %d unfinished sequences; want all done", len(m.seqs))
			}
			if len(pre) == 0 {
				t.Fatal("have no preemption; want the pool to run out")
			}
			if pre[0].ID != "new" || pre[0].Swap != tt.swap {
				t.Errorf("have first preemption %+v; want the most recently started sequence, swap %v", pre[0], tt.swap)
			}
			if want := "[old new]"; fmt.Sprint(m.done) != want {
				t.Errorf("have completion order %v; want %s", m.done, want)
			}
			if m.free != 6 || m.hostFree != tt.host {
				t.Errorf("have %d device and %d host blocks free at the end; want 6 and %d", m.free, m.hostFree, tt.host)
			}
		})
	}
}

func TestPreemptLowestClassFirst(t *testing.T) {
	m := newSim(t, Config{BlockSize: 4}, 6, 0, 64)
	m.submit("batch", "t", Batch, 8, 12, Limits{})
	m.run()
	m.submit("inter", "t", Interactive, 8, 12, Limits{})
	var pre []string
	for range 100 {
		p := m.run()
		for _, x := range p.Preempt {
			pre = append(pre, x.ID)
		}
		if len(m.seqs) == 0 {
			break
		}
	}
	if len(pre) == 0 || pre[0] != "batch" {
		t.Errorf("have preemptions %v; want the batch sequence first even though it started first", pre)
	}
	if len(m.done) != 2 || m.done[0] != "inter" {
		t.Errorf("have completion order %v; want inter first", m.done)
	}
}

func TestHigherClassPreemptsForRunningSlot(t *testing.T) {
	m := newSim(t, Config{MaxRunning: 2}, 100, 100, 64)
	m.submit("b1", "t", Batch, 4, 50, Limits{})
	m.submit("b2", "t", Batch, 4, 50, Limits{})
	m.run()
	m.submit("i", "u", Interactive, 4, 3, Limits{})
	p := m.run()
	if len(p.Preempt) != 1 || p.Preempt[0].ID != "b2" {
		t.Fatalf("have preemptions %+v; want b2 (most recently started batch)", p.Preempt)
	}
	if _, ok := m.firstRun["i"]; !ok {
		t.Error("interactive request did not start in the step that freed a slot")
	}
	for range 200 {
		m.run()
	}
	if len(m.seqs) != 0 {
		t.Errorf("have %d unfinished; want 0", len(m.seqs))
	}
	if st := m.s.Stats(); st != (Stats{}) {
		t.Errorf("have stats %+v at the end; want zero", st)
	}
}

func TestRandomWorkloadInvariants(t *testing.T) {
	// A random mix under a small pool: the sim checks continuity, the
	// budget and the pool on every step; at the end everything is done
	// and every block is back.
	m := newSim(t, Config{BlockSize: 4, MaxRunning: 8, AgingAfter: 50 * time.Millisecond}, 24, 10, 32)
	rng := uint64(1)
	rnd := func(n int) int {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int(rng>>33) % n
	}
	n := 0
	for step := 0; step < 2000; step++ {
		if step < 1500 && rnd(3) == 0 {
			id := fmt.Sprint("r", n)
			n++
			if err := m.submit(id, fmt.Sprint("t", rnd(3)), Classes[rnd(3)], 1+rnd(30), 1+rnd(20), Limits{}); err != nil {
				t.Fatal(err)
			}
		}
		if step < 1500 && rnd(20) == 0 && len(m.seqs) > 0 {
			// cancel a random live request
			for id, q := range m.seqs {
				m.s.Remove(id)
				m.free += q.held
				m.hostFree += q.host
				delete(m.seqs, id)
				break
			}
		}
		m.run()
	}
	if len(m.seqs) != 0 {
		t.Fatalf("have %d unfinished sequences; want 0", len(m.seqs))
	}
	if m.free != 24 || m.hostFree != 10 {
		t.Errorf("have %d/%d blocks free; want 24/10", m.free, m.hostFree)
	}
}

func TestSetKV(t *testing.T) {
	tests := []struct {
		name   string
		kv     int
		ok     bool
		wantKV int
		next   Chunk // the next step's chunk for "a"
	}{
		// A cache hit covered 32 of the 40 prompt tokens the step planned
		// as [0, 16): the rest is one chunk that samples.
		{"grow to a cache hit", 32, true, 32, Chunk{ID: "a", Start: 32, N: 8, Logits: true, Blocks: 3}},
		// The device gave no block: the chunk ran nothing.
		{"shrink to nothing", 0, true, 0, Chunk{ID: "a", Start: 0, N: 16, Blocks: 1}},
		{"clamped to the known tokens", 99, true, 40, Chunk{}},
		{"clamped at zero", -5, true, 0, Chunk{ID: "a", Start: 0, N: 16, Blocks: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, Config{})
			if err := s.Enqueue(t0, Request{ID: "a", Tokens: 40}); err != nil {
				t.Fatal(err)
			}
			if ok := s.SetKV("a", 8); ok {
				t.Error("have SetKV true for a waiting sequence; want false")
			}
			s.Schedule(t0, Resources{Tokens: 16, FreeBlocks: 100})
			if ok := s.SetKV("a", tt.kv); ok != tt.ok {
				t.Fatalf("have SetKV %v; want %v", ok, tt.ok)
			}
			if _, kv, _ := s.Len("a"); kv != tt.wantKV {
				t.Errorf("have kv %d; want %d", kv, tt.wantKV)
			}
			p := s.Schedule(t0, Resources{Tokens: 16, FreeBlocks: 100})
			var have Chunk
			if len(p.Run) > 0 {
				have = p.Run[0]
			}
			if have != tt.next {
				t.Errorf("have next chunk %+v; want %+v", have, tt.next)
			}
		})
	}
	s := mustNew(t, Config{})
	if s.SetKV("nobody", 1) {
		t.Error("have SetKV true for an unknown ID; want false")
	}
}

func TestInteractiveFirst(t *testing.T) {
	tests := []struct {
		name  string
		first bool
		want  []Chunk
	}{
		// Decodes first: the interactive prompt gets what they leave.
		{"decodes first", false, []Chunk{
			{ID: "b0", Start: 4, N: 1, Logits: true, Blocks: 1},
			{ID: "b1", Start: 4, N: 1, Logits: true, Blocks: 1},
			{ID: "b2", Start: 4, N: 1, Logits: true, Blocks: 1},
			{ID: "chat", Start: 0, N: 7, Blocks: 1},
		}},
		// The interactive prompt first: the batch decodes wait a step.
		{"interactive first", true, []Chunk{
			{ID: "chat", Start: 0, N: 10, Logits: true, Blocks: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, Config{})
			for i := range 3 {
				if err := s.Enqueue(t0, Request{ID: fmt.Sprint("b", i), Class: Batch, Tokens: 4}); err != nil {
					t.Fatal(err)
				}
			}
			s.Schedule(t0, Resources{Tokens: 100, FreeBlocks: 100})
			for i := range 3 {
				s.Append(t0, fmt.Sprint("b", i), 1)
			}
			if err := s.Enqueue(t0, Request{ID: "chat", Class: Interactive, Tokens: 10}); err != nil {
				t.Fatal(err)
			}
			p := s.Schedule(t0, Resources{Tokens: 10, FreeBlocks: 100, InteractiveFirst: tt.first})
			if fmt.Sprint(p.Run) != fmt.Sprint(tt.want) {
				t.Errorf("have chunks %+v; want %+v", p.Run, tt.want)
			}
		})
	}
}

// hints is a prefix cache that holds the given leading tokens of
// requests, and claims the given free blocks for them.
type hints map[string][2]int

func (h hints) Cached(id string) (int, int) { return h[id][0], h[id][1] }

// TestAdmitBudgetsComputedTokens: a request the prefix cache mostly holds
// is budgeted and planned only the tokens it computes, from where the
// cache's tokens end, so one step starts several; a hint past the last
// token still leaves that token to compute, and one that is wrong is
// corrected by SetKV without breaking the accounting.
func TestAdmitBudgetsComputedTokens(t *testing.T) {
	s := mustNew(t, Config{BlockSize: 4})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := s.Enqueue(t0, Request{ID: id, Tenant: "t", Tokens: 30, Charge: 30}); err != nil {
			t.Fatal(err)
		}
	}
	// d is wholly cached as far as the hint goes: it still computes its
	// last token. e is not cached: it takes what is left.
	h := hints{"a": {28, 0}, "b": {28, 0}, "c": {24, 0}, "d": {40, 0}}
	p := s.Schedule(t0, Resources{Tokens: 20, FreeBlocks: 100, Cache: h})
	want := []Chunk{
		{ID: "a", Start: 28, N: 2, Logits: true, Blocks: 8},
		{ID: "b", Start: 28, N: 2, Logits: true, Blocks: 8},
		{ID: "c", Start: 24, N: 6, Logits: true, Blocks: 8},
		{ID: "d", Start: 29, N: 1, Logits: true, Blocks: 8},
		{ID: "e", Start: 0, N: 9, Blocks: 3},
	}
	if fmt.Sprint(p.Run) != fmt.Sprint(want) {
		t.Fatalf("have chunks %+v; want %+v", p.Run, want)
	}
	// The lookup found less for c (blocks evicted since): it ran 6
	// tokens from 16, and the scheduler is told.
	if !s.SetKV("c", 22) {
		t.Fatal("SetKV(c) refused")
	}
	if _, kv, _ := s.Len("c"); kv != 22 {
		t.Errorf("have c's KV %d; want 22", kv)
	}
	p = s.Schedule(t0.Add(time.Millisecond), Resources{Tokens: 20, FreeBlocks: 100, Cache: h})
	var c Chunk
	for _, ch := range p.Run {
		if ch.ID == "c" {
			c = ch
		}
	}
	if c.Start != 22 || c.N != 8 {
		t.Errorf("have c's next chunk %+v; want [22, 30)", c)
	}
}

// TestAdmitCountsClaimedBlocks: the cached blocks a match takes from the
// free ones count against the pool at admission; a claim that does not
// fit at all is planned from the start instead, as without the cache.
func TestAdmitCountsClaimedBlocks(t *testing.T) {
	s := mustNew(t, Config{BlockSize: 4})
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Enqueue(t0, Request{ID: id, Tenant: "t", Tokens: 30, Charge: 30}); err != nil {
			t.Fatal(err)
		}
	}
	// 10 free blocks: a claims 7 and needs 1 more; b would claim 7:
	// only 2 are left, so b plans from the start, 2 blocks' worth.
	h := hints{"a": {28, 7}, "b": {28, 7}, "c": {28, 0}}
	p := s.Schedule(t0, Resources{Tokens: 20, FreeBlocks: 10, Cache: h})
	want := []Chunk{
		{ID: "a", Start: 28, N: 2, Logits: true, Blocks: 8},
		{ID: "b", Start: 0, N: 8, Blocks: 2},
	}
	if fmt.Sprint(p.Run) != fmt.Sprint(want) {
		t.Fatalf("have chunks %+v; want %+v", p.Run, want)
	}
}
