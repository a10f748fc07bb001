package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/kernels/sample"
)

func prompt(rng *rand.Rand, n int) []int32 {
	p := []int32{1}
	for len(p) < n {
		p = append(p, 3+rng.Int32N(61))
	}
	return p
}

func TestOptionsDefaults(t *testing.T) {
	m := newFakeModel(t)
	e, _ := testEngine(t, m, Options{})
	o := e.Options()
	if o.BlockSize != 16 || o.MaxBatchTokens != 512 || o.MaxRunning != 64 || o.MaxQueued != 1024 || o.MaxContext != 4096 || o.AgingAfter != 5*time.Second ||
		o.MaxStepLatency != 50*time.Millisecond || o.NoPrefixCache || o.PrefixTenantCap != 0 {
		t.Errorf("have %+v; want the documented defaults", o)
	}
	// 64 sequences × 4096 tokens / 16 = 16384 blocks; 256 MiB of 128-byte
	// blocks is more, so the context bound wins.
	if o.KVBlocks != 16384 {
		t.Errorf("have %d device blocks; want 16384", o.KVBlocks)
	}
	if e.host != nil {
		t.Error("have a host tier by default; want none")
	}
	if e.cache == nil {
		t.Error("have no prefix cache by default; want one")
	}
	if _, err := newEngine(m, Options{BlockSize: -1}); err == nil {
		t.Error("have nil error for a negative block size; want one")
	}
}

func TestRefusals(t *testing.T) {
	m := newFakeModel(t)
	tests := []struct {
		name string
		o    Options
		pre  []Request // submitted first, all must succeed
		r    Request
		code string
		// reason is the Error's Reason; over_quota refusals need one.
		reason string
	}{
		{"empty", Options{}, nil, Request{ID: "x"}, CodeBadRequest, ""},
		{"token outside vocab", Options{}, nil, Request{Prompt: []int32{1, 64}}, CodeBadRequest, ""},
		{"negative max tokens", Options{}, nil, Request{Prompt: []int32{1}, MaxTokens: -1}, CodeBadRequest, ""},
		{"negative shared prefix", Options{}, nil, Request{Prompt: []int32{1}, SharedPrefix: -1}, CodeBadRequest, ""},
		{"bad priority", Options{}, nil, Request{Prompt: []int32{1}, Priority: 9}, CodeBadRequest, ""},
		{"unsupported schema", Options{}, nil, Request{Prompt: []int32{1}, Guided: &Guided{Schema: []byte(`{"type":"array","uniqueItems":true}`)}}, CodeBadRequest, ""},
		{"bad regex", Options{}, nil, Request{Prompt: []int32{1}, Guided: &Guided{Regex: "a("}}, CodeBadRequest, ""},
		{"two constraints", Options{}, nil, Request{Prompt: []int32{1}, Guided: &Guided{Regex: "a", JSON: true}}, CodeBadRequest, ""},
		{"context too long", Options{MaxContext: 10}, nil, Request{Prompt: make([]int32, 8), MaxTokens: 3}, CodeContextTooLong, ""},
		{"prompt fills context", Options{MaxContext: 10}, nil, Request{Prompt: make([]int32, 10)}, CodeContextTooLong, ""},
		{"tenant max context", Options{}, nil, Request{Prompt: make([]int32, 8), MaxTokens: 3, Limits: TenantLimits{MaxContext: 10}}, CodeContextTooLong, ""},
		{"bigger than the pool", Options{KVBlocks: 2, BlockSize: 4}, nil, Request{Prompt: make([]int32, 8), MaxTokens: 1}, CodeContextTooLong, ""},
		{"duplicate id", Options{}, []Request{{ID: "a", Prompt: []int32{1}}}, Request{ID: "a", Prompt: []int32{1}}, CodeBadRequest, ""},
		{"queue full", Options{MaxQueued: 1}, []Request{{Prompt: []int32{1}}}, Request{Prompt: []int32{1}}, CodeQueueFull, ""},
		{"tenant queue cap", Options{}, []Request{{Tenant: "t", Prompt: []int32{1}, Limits: TenantLimits{MaxQueued: 1}}},
			Request{Tenant: "t", Prompt: []int32{1}, Limits: TenantLimits{MaxQueued: 1}}, CodeOverQuota, ReasonQueue},
		{"tokens per minute", Options{Limits: TenantLimits{TokensPerMinute: 10}}, []Request{{Tenant: "t", Prompt: make([]int32, 8), MaxTokens: 1}},
			Request{Tenant: "t", Prompt: make([]int32, 3), MaxTokens: 1}, CodeOverQuota, ReasonTokensPerMinute},
		// The first request's max_tokens are reserved at admission: the
		// second's prompt no longer fits.
		{"tokens per minute reserves max tokens", Options{Limits: TenantLimits{TokensPerMinute: 20}}, []Request{{Tenant: "t", Prompt: make([]int32, 2), MaxTokens: 16}},
			Request{Tenant: "t", Prompt: make([]int32, 3), MaxTokens: 1}, CodeOverQuota, ReasonTokensPerMinute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := testEngine(t, m, tt.o)
			for _, r := range tt.pre {
				if _, err := submitNow(e, r); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			_, err := submitNow(e, tt.r)
			var ee *Error
			if !errors.As(err, &ee) || ee.Code != tt.code {
				t.Fatalf("have %v; want *Error with code %s", err, tt.code)
			}
			if temp := tt.code == CodeQueueFull || tt.code == CodeOverQuota; ee.Temporary != temp {
				t.Errorf("have Temporary %v; want %v", ee.Temporary, temp)
			}
			if ee.Reason != tt.reason {
				t.Errorf("have reason %q; want %q", ee.Reason, tt.reason)
			}
			// The message is the client's: no scheduler or tenant names.
			for _, leak := range []string{"sched", `"t"`, "tenant \""} {
				if strings.Contains(ee.Message, leak) {
					t.Errorf("have message %q; want no %s in it", ee.Message, leak)
				}
			}
		})
	}
}

func TestOneForwardPerStepWithAllDecodes(t *testing.T) {
	m := newFakeModel(t)
	// Drafts would add rows: this is about plain decoding's batches.
	e, clk := testEngine(t, m, Options{MaxBatchTokens: 64, Speculation: noSpec})
	rng := rand.New(rand.NewPCG(1, 2))
	var streams []*Stream
	for i := range 8 {
		s, err := submitNow(e, Request{ID: fmt.Sprint(i), Prompt: prompt(rng, 20), MaxTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	steps := drive(t, e, clk, time.Millisecond, 100)
	if steps != len(m.batches) {
		t.Errorf("have %d forward passes in %d steps; want one per step", len(m.batches), steps)
	}
	// 160 prompt tokens at 64 a step: the prefill takes 3 steps (the last
	// already with decodes), then every step decodes all 8 together.
	decodeSteps := 0
	for _, b := range m.batches {
		if b == [2]int{8, 8} {
			decodeSteps++
		}
	}
	if decodeSteps < 7 {
		t.Errorf("have %d steps that decode all 8 sequences (batches %v); want ≥ 7", decodeSteps, m.batches)
	}
	for _, s := range streams {
		r := collect(t, s)
		if len(r.tokens) != 10 || r.final.FinishReason != FinishLength {
			t.Errorf("%s: have %d tokens, finish %q; want 10, length", s.ID(), len(r.tokens), r.final.FinishReason)
		}
	}
	checkWhole(t, e)
}

func TestLongPromptDoesNotStallDecodes(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{MaxBatchTokens: 32})
	rng := rand.New(rand.NewPCG(1, 2))
	a, _ := submitNow(e, Request{ID: "a", Prompt: prompt(rng, 4), MaxTokens: 40})
	e.step(clk.Now())
	if _, err := submitNow(e, Request{ID: "long", Prompt: prompt(rng, 400), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		e.step(clk.Now())
		clk.Advance(time.Millisecond)
	}
	// "a" got a token in each of the 11 steps while "long" prefilled in
	// chunks beside it.
	if have := a.queueLen(); have != 11 {
		t.Errorf("have %d tokens for the decoding stream after 11 steps; want 11", have)
	}
	if _, kv, _ := e.sched.Len("long"); kv != 310 {
		t.Errorf("have %d of 400 prompt tokens prefilled; want 310 (31 a step)", kv)
	}
	e.Cancel("a")
	e.Cancel("long")
	e.drain(clk.Now())
	checkWhole(t, e)
}

// queueLen counts the tokens queued on a stream (test helper).
func (s *Stream) queueLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ev := range s.queue {
		n += len(ev.Tokens)
	}
	return n
}

// noSpec turns speculation off, for tests that compare sampled outputs
// token for token: speculative sampling keeps the distribution, not the
// draws.
var noSpec = Speculation{Drafter: DraftOff}

// runSolo generates for each request alone on a fresh engine, without
// speculation.
func runSolo(t *testing.T, reqs []Request) [][]int32 {
	t.Helper()
	var out [][]int32
	for _, r := range reqs {
		m := newFakeModel(t)
		e, clk := testEngine(t, m, Options{Speculation: noSpec})
		s, err := submitNow(e, r)
		if err != nil {
			t.Fatal(err)
		}
		drive(t, e, clk, time.Millisecond, 10000)
		out = append(out, collect(t, s).tokens)
	}
	return out
}

func TestConcurrentMatchesSolo(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []Request
	for i := range 16 {
		reqs = append(reqs, Request{
			ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", i%3), Priority: []Priority{Interactive, Standard, Batch}[i%3],
			Prompt: prompt(rng, 5+rng.IntN(60)), MaxTokens: 20 + rng.IntN(40),
			Sample: sample.Params{Temperature: 0.8, Seed: uint64(i)},
		})
	}
	want := runSolo(t, reqs)
	for _, tt := range []struct {
		name string
		o    Options
	}{
		{"roomy", Options{}},
		{"tight pool, swap", Options{BlockSize: 4, KVBlocks: 40, HostKVBlocks: 200, MaxBatchTokens: 48}},
		{"tight pool, recompute", Options{BlockSize: 4, KVBlocks: 40, MaxBatchTokens: 48}},
		{"tight pool, small host tier", Options{BlockSize: 4, KVBlocks: 40, HostKVBlocks: 12, MaxBatchTokens: 48}},
		{"no prefix cache, tight pool, swap", Options{BlockSize: 4, KVBlocks: 40, HostKVBlocks: 200, MaxBatchTokens: 48, NoPrefixCache: true}},
		{"no prefix cache, tight pool, recompute", Options{BlockSize: 4, KVBlocks: 40, MaxBatchTokens: 48, NoPrefixCache: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeModel(t)
			tt.o.Speculation = noSpec
			e, clk := testEngine(t, m, tt.o)
			var streams []*Stream
			for _, r := range reqs {
				s, err := submitNow(e, r)
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, s)
			}
			drive(t, e, clk, time.Millisecond, 10000)
			pre := 0
			for i, s := range streams {
				r := collect(t, s)
				// Sampling may draw EOS: stop or length, never error.
				if f := r.final.FinishReason; f != FinishLength && f != FinishStop {
					t.Errorf("%s: have finish %q (%v); want length or stop", s.ID(), f, r.final.Err)
				}
				if !slices.Equal(r.tokens, want[i]) {
					t.Errorf("%s: have tokens %v; want %v (alone)", s.ID(), r.tokens, want[i])
				}
				for j, q := range r.seqs {
					if j > 0 && q <= r.seqs[j-1] {
						t.Errorf("%s: delta seqs %v not increasing", s.ID(), r.seqs)
						break
					}
				}
				pre += r.final.Stats.Preemptions
			}
			if tight := tt.o.KVBlocks != 0; tight && pre == 0 {
				t.Error("have no preemptions under a tight pool; want some")
			}
			checkWhole(t, e)
		})
	}
}

// TestLeakUnderRandomWorkload runs random requests with cancels, deadlines
// and preemptions; prompts share prefixes so that the prefix cache hits,
// some marked shared, some in sessions going live and idle. At the end
// every block is free or held exactly once by the cache.
func TestLeakUnderRandomWorkload(t *testing.T) {
	base := Options{BlockSize: 4, KVBlocks: 48, MaxBatchTokens: 40, MaxRunning: 12, AgingAfter: 20 * time.Millisecond}
	with := func(f func(*Options)) Options { o := base; f(&o); return o }
	for _, tt := range []struct {
		name string
		o    Options
	}{
		{"cache, host tier", with(func(o *Options) { o.HostKVBlocks = 16 })},
		{"cache, no host tier", base},
		{"cache, tenant cap", with(func(o *Options) { o.HostKVBlocks = 16; o.PrefixTenantCap = 6 })},
		{"no cache, swap", with(func(o *Options) { o.HostKVBlocks = 16; o.NoPrefixCache = true })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeModel(t)
			e, clk := testEngine(t, m, tt.o)
			rng := rand.New(rand.NewPCG(5, 6))
			var bases [][]int32
			for range 4 {
				bases = append(bases, prompt(rng, 30))
			}
			var streams []*Stream
			n := 0
			for step := 0; step < 1500; step++ {
				if rng.IntN(3) == 0 {
					p := prompt(rng, 1+rng.IntN(50))
					if rng.IntN(2) == 0 {
						p = append(slices.Clone(bases[rng.IntN(len(bases))][:1+rng.IntN(30)]), p[1:]...)
					}
					r := Request{
						ID: fmt.Sprint("r", n), Tenant: fmt.Sprint("t", rng.IntN(4)), Priority: []Priority{Interactive, Standard, Batch}[rng.IntN(3)],
						Session: fmt.Sprint("s", rng.IntN(6)), Prompt: p, MaxTokens: 1 + rng.IntN(40), Stop: []string{"qq"},
					}
					if rng.IntN(4) == 0 {
						r.SharedPrefix = rng.IntN(20)
					}
					if rng.IntN(10) == 0 {
						r.Deadline = clk.Now().Add(time.Duration(rng.IntN(30)) * time.Millisecond)
					}
					n++
					s, err := submitNow(e, r)
					if err != nil {
						t.Fatal(err)
					}
					streams = append(streams, s)
				}
				if rng.IntN(15) == 0 && len(streams) > 0 {
					e.Cancel(streams[rng.IntN(len(streams))].ID())
				}
				if rng.IntN(10) == 0 {
					e.SetSessionLive(fmt.Sprint("s", rng.IntN(6)), rng.IntN(2) == 0)
				}
				e.drain(clk.Now())
				e.step(clk.Now())
				clk.Advance(time.Millisecond)
			}
			drive(t, e, clk, time.Millisecond, 100000)
			reasons := map[string]int{}
			pre := 0
			for _, s := range streams {
				r := collect(t, s)
				reasons[r.final.FinishReason]++
				pre += r.final.Stats.Preemptions
				if r.final.FinishReason == FinishError {
					t.Errorf("%s: failed: %v", s.ID(), r.final.Err)
				}
			}
			if reasons[FinishCancelled] == 0 || reasons[FinishLength] == 0 || pre == 0 {
				t.Errorf("have finish reasons %v and %d preemptions; want a mix with cancellations and preemptions", reasons, pre)
			}
			if c := e.counters(); !tt.o.NoPrefixCache && c.CachedTokens == 0 {
				t.Errorf("have no cached tokens served (cache %+v); want hits", c.Cache)
			}
			checkWhole(t, e)
		})
	}
}

// A stream's cancel (its Cancel, its context's) can arrive after its
// request ended: it must not stop a later request that reuses the ID, as
// a client cancelling a finished call's context just as it sends the next
// one under the same ID did (a greedy bench stream came back empty).
func TestStaleCancelSparesReusedID(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{MaxRunning: 1})
	first, err := submitNow(e, Request{ID: "a", Prompt: []int32{1, 5, 6}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; e.seqs["a"] != nil && i < 10; i++ {
		e.step(clk.Now())
		clk.Advance(time.Millisecond)
	}
	if got := collect(t, first); got.final.FinishReason != FinishLength {
		t.Fatalf("first request: have finish %q; want length", got.final.FinishReason)
	}
	second, err := submitNow(e, Request{ID: "a", Prompt: []int32{1, 5, 6}, MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	e.step(clk.Now())
	first.Cancel()
	for range 3 {
		e.drain(clk.Now())
		e.step(clk.Now())
		clk.Advance(time.Millisecond)
	}
	if s := e.seqs["a"]; s == nil || s.stream != second {
		t.Fatal("the first stream's late cancel stopped the second request")
	}
	second.Cancel()
	e.drain(clk.Now())
	if got := collect(t, second); got.final.FinishReason != FinishCancelled {
		t.Errorf("second request: have finish %q; want cancelled", got.final.FinishReason)
	}
	checkWhole(t, e)
}

func TestCancelAndDeadline(t *testing.T) {
	m := newFakeModel(t)
	for _, tt := range []string{"cancel running", "cancel waiting", "deadline", "context"} {
		t.Run(tt, func(t *testing.T) {
			e, clk := testEngine(t, m, Options{MaxRunning: 1})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := Request{ID: "a", Prompt: []int32{1, 5, 6}, MaxTokens: 100}
			if tt == "deadline" {
				r.Deadline = clk.Now().Add(5 * time.Millisecond)
			}
			s, err := submitNow(e, r)
			if err != nil {
				t.Fatal(err)
			}
			s.watch(ctx)
			other, _ := submitNow(e, Request{ID: "b", Prompt: []int32{1, 5}, MaxTokens: 100})
			target := s
			if tt == "cancel waiting" {
				target = other
			}
			for range 3 {
				e.step(clk.Now())
				clk.Advance(time.Millisecond)
			}
			switch tt {
			case "cancel running", "cancel waiting":
				target.Cancel()
			case "context":
				cancel()
			}
			// The cancel arrives through the inbox; give the steps
			// room for a 5ms deadline.
			for range 3 {
				e.drain(clk.Now())
				e.step(clk.Now())
				clk.Advance(time.Millisecond)
			}
			if tt == "context" {
				// AfterFunc runs on its own goroutine: wait for it.
				deadline := time.Now().Add(5 * time.Second)
				for e.seqs["a"] != nil && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
					e.drain(clk.Now())
				}
			}
			if e.seqs[target.ID()] != nil {
				t.Fatalf("%s still live", target.ID())
			}
			got := collect(t, target)
			if got.final.FinishReason != FinishCancelled {
				t.Errorf("have finish %q; want cancelled", got.final.FinishReason)
			}
			e.Cancel(other.ID())
			e.Cancel(s.ID())
			e.drain(clk.Now())
			checkWhole(t, e)
		})
	}
}

// scripted makes the fake model write text: after the prompt it emits the
// given tokens in order, then EOS.
func scripted(promptLen int, out []int32) func([]int32) int32 {
	return func(h []int32) int32 {
		i := len(h) - promptLen
		if i < len(out) {
			return out[i]
		}
		return 2
	}
}

func ids(s string) []int32 {
	var out []int32
	for i := range len(s) {
		out = append(out, tokID(s[i]))
	}
	return out
}

func TestStopConditions(t *testing.T) {
	tests := []struct {
		name      string
		gen       string
		stop      []string
		stopToks  []int32
		maxTokens int
		text      string
		reason    string
	}{
		{"eos", "hello", nil, nil, 100, "hello", FinishStop},
		{"length", "hello", nil, nil, 3, "hel", FinishLength},
		{"stop string", "hello world", []string{"o w"}, nil, 100, "hell", FinishStop},
		{"stop string at start", "hello", []string{"he"}, nil, 100, "", FinishStop},
		{"earliest of two", "abcdef", []string{"de", "bc"}, nil, 100, "a", FinishStop},
		{"prefix then mismatch", "abab.x", []string{"abx"}, nil, 100, "abab.x", FinishStop},
		{"held prefix released at length", "hello wo", []string{"world"}, nil, 8, "hello wo", FinishLength},
		{"stop token", "hello", nil, []int32{tokID('l')}, 100, "he", FinishStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeModel(t)
			p := []int32{1, 5}
			m.next = scripted(len(p), ids(tt.gen))
			e, clk := testEngine(t, m, Options{})
			s, err := submitNow(e, Request{Prompt: p, MaxTokens: tt.maxTokens, Stop: tt.stop, StopTokens: tt.stopToks})
			if err != nil {
				t.Fatal(err)
			}
			done, cancel := context.WithCancel(context.Background())
			cancel() // Recv returns at once when nothing is queued
			// Read as we go, so deltas do not coalesce and the text
			// held back for a possible stop string is visible.
			var text string
			var final *Final
			for range 200 {
				if len(e.seqs) > 0 {
					e.step(clk.Now())
				}
				for {
					ev, err := s.Recv(done)
					if err != nil {
						break
					}
					if ev.Final != nil {
						final = ev.Final
						continue
					}
					text += ev.Text
					if tt.stop != nil {
						for _, st := range tt.stop {
							if strings.Contains(text, st) {
								t.Fatalf("emitted %q containing stop %q", text, st)
							}
						}
					}
				}
				if final != nil {
					break
				}
			}
			if final == nil {
				t.Fatal("no final event")
			}
			if text != tt.text || final.FinishReason != tt.reason {
				t.Errorf("have %q, %s; want %q, %s", text, final.FinishReason, tt.text, tt.reason)
			}
			checkWhole(t, e)
		})
	}
}

func TestStopMatch(t *testing.T) {
	tests := []struct {
		text     string
		stops    []string
		at, hold int
	}{
		{"hello", []string{"lo"}, 3, 0},
		{"hello", []string{"low"}, -1, 2},
		{"hello", []string{"x"}, -1, 0},
		{"hello", []string{"ox", "llox"}, -1, 3},
		{"hel", []string{"hello"}, -1, 3},
		{"", []string{"a"}, -1, 0},
		{"abc", []string{""}, -1, 0},
	}
	for _, tt := range tests {
		at, hold := stopMatch(tt.text, tt.stops)
		if at != tt.at || hold != tt.hold {
			t.Errorf("stopMatch(%q, %q): have %d, %d; want %d, %d", tt.text, tt.stops, at, hold, tt.at, tt.hold)
		}
	}
}

func TestSlowReaderCoalesces(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{})
	s, _ := submitNow(e, Request{Prompt: []int32{1, 5, 6}, MaxTokens: 20})
	drive(t, e, clk, time.Millisecond, 100)
	r := collect(t, s)
	if r.deltas != 1 || len(r.tokens) != 20 {
		t.Errorf("have %d deltas with %d tokens; want 1 delta of 20 for a reader that never kept up", r.deltas, len(r.tokens))
	}
	if r.seqs[0] != 20 {
		t.Errorf("have Seq %d; want 20 (the last token's number)", r.seqs[0])
	}
}

func TestTimingsWithFakeClock(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{MaxRunning: 1})
	a, _ := submitNow(e, Request{Prompt: []int32{1, 5}, MaxTokens: 5})
	b, _ := submitNow(e, Request{Prompt: []int32{1, 6}, MaxTokens: 5})
	drive(t, e, clk, 10*time.Millisecond, 100)
	fa, fb := collect(t, a).final.Stats, collect(t, b).final.Stats
	if fa.Queue != 0 || fa.TTFT != 0 || len(fa.InterToken) != 4 || fa.InterToken[0] != 10*time.Millisecond {
		t.Errorf("a: have %+v; want no queueing, TTFT 0, 4 gaps of 10ms", fa)
	}
	// b waits for a's 5 steps.
	if fb.Queue != 50*time.Millisecond || fb.TTFT != 50*time.Millisecond {
		t.Errorf("b: have queue %v, TTFT %v; want 50ms, 50ms", fb.Queue, fb.TTFT)
	}
	if fa.TokensPerSecond != 100 {
		t.Errorf("a: have %v tokens/s; want 100", fa.TokensPerSecond)
	}
}

func TestForwardErrorFailsBatch(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{})
	s, _ := submitNow(e, Request{Prompt: []int32{1, 5}, MaxTokens: 5})
	m.fail = errors.New("device lost")
	e.step(clk.Now())
	r := collect(t, s)
	var ee *Error
	if r.final.FinishReason != FinishError || !errors.As(r.final.Err, &ee) || ee.Code != CodeInternal {
		t.Errorf("have %q, %v; want error with an internal *Error", r.final.FinishReason, r.final.Err)
	}
	checkWhole(t, e)
}

func TestGeneratedContinuesNumbering(t *testing.T) {
	m := newFakeModel(t)
	p := []int32{1, 5}
	m.next = scripted(len(p), ids("abcdef"))
	e, clk := testEngine(t, m, Options{})
	s, err := submitNow(e, Request{Prompt: p, Generated: ids("ab"), MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, e, clk, time.Millisecond, 100)
	r := collect(t, s)
	if r.text != "cd" || r.seqs[len(r.seqs)-1] != 4 || r.final.Usage.CompletionTokens != 2 {
		t.Errorf("have %q, seqs %v, usage %+v; want \"cd\" ending at seq 4, 2 new tokens", r.text, r.seqs, r.final.Usage)
	}
}

func TestMessagesUseTemplate(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{})
	s, err := submitNow(e, Request{Messages: []Message{{Role: "user", Content: "abc"}}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, e, clk, time.Millisecond, 100)
	if r := collect(t, s); r.final.Usage.PromptTokens == 0 {
		t.Errorf("have usage %+v; want a rendered prompt", r.final.Usage)
	}
}

func TestRunLoop(t *testing.T) {
	m := newFakeModel(t)
	e, err := New(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Submit(ctx, Request{Prompt: []int32{1, int32(5 + i)}, MaxTokens: 30})
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for {
				ev, err := s.Recv(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				n += len(ev.Tokens)
			}
			if n != 30 {
				t.Errorf("have %d tokens; want 30", n)
			}
		}()
	}
	wg.Wait()
	e.SetSessionLive("conv", true)
	if c, err := e.Counters(ctx); err != nil || c.Steps == 0 || c.ForwardTokens < 8*30 {
		t.Errorf("have counters %+v, %v; want steps and at least 240 tokens", c, err)
	}
	// A request still running at Close ends with ErrClosed.
	s, err := e.Submit(ctx, Request{Prompt: []int32{1, 5}, MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	var final *Final
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			break
		}
		if ev.Final != nil {
			final = ev.Final
		}
	}
	if final == nil || !errors.Is(final.Err, ErrClosed) {
		t.Errorf("have final %+v; want error ErrClosed", final)
	}
	if _, err := e.Submit(ctx, Request{Prompt: []int32{1}}); !errors.Is(err, ErrClosed) {
		t.Errorf("have %v after Close; want ErrClosed", err)
	}
	if _, err := e.Counters(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("have %v from Counters after Close; want ErrClosed", err)
	}
	e.SetSessionLive("conv", false) // ignored, and does not block
	checkWhole(t, e)
}
