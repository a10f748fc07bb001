package engine

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine/spec"
)

// queued returns the events s holds without waiting for more.
func queued(s *Stream) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.queue)
}

// checkPlan fails unless p's batch is exactly its placed chunks, in
// order, at their positions and through their block tables, with one
// logits row for each chunk that reaches its sequence's end.
func checkPlan(t *testing.T, e *Engine, p *stepPlan) {
	t.Helper()
	bs := int32(e.o.BlockSize)
	i, rows := 0, 0
	for _, pc := range p.placed {
		s, c := pc.s, pc.c
		for k := c.Start; k < c.Start+c.N; k++ {
			pos := int32(k)
			if p.batch.Tokens[i] != s.tokens[k] || p.batch.Pos[i] != pos {
				t.Fatalf("row %d: have token %d at %d; want %d at %d", i, p.batch.Tokens[i], p.batch.Pos[i], s.tokens[k], pos)
			}
			if want := s.table[pos/bs]*bs + pos%bs; p.batch.Slots[i] != want {
				t.Fatalf("row %d: have slot %d; want %d", i, p.batch.Slots[i], want)
			}
			i++
		}
		if c.Logits != (c.Start+c.N == len(s.tokens)) {
			t.Fatalf("%s: chunk %+v of %d tokens: logits %v", s.req.ID, c, len(s.tokens), c.Logits)
		}
		if c.Logits {
			if p.rows[rows] != s || int(p.batch.Logits[rows]) != i-1 {
				t.Fatalf("logits row %d: have %s at %d; want %s at %d", rows, p.rows[rows].req.ID, p.batch.Logits[rows], s.req.ID, i-1)
			}
			rows++
		}
	}
	if i != p.batch.Len() && e.spec == nil {
		t.Fatalf("have %d batch rows; want the %d planned", p.batch.Len(), i)
	}
}

// TestPlanAlone: plan builds the step's batch from the engine's state and
// nothing else: no forward pass, no event, no committed token. Prompts
// longer than the step's budget are chunked across plans.
func TestPlanAlone(t *testing.T) {
	m := newFakeModel(t)
	e, clk := testEngine(t, m, Options{BlockSize: 4, MaxBatchTokens: 8, Speculation: noSpec})
	rng := rand.New(rand.NewPCG(1, 2))
	var streams []*Stream
	for _, n := range []int{6, 13} {
		s, err := submitNow(e, Request{Prompt: prompt(rng, n), MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	p := e.plan(clk.Now())
	if len(p.failed) != 0 || p.batch.Len() == 0 || p.batch.Len() > 8 {
		t.Fatalf("have %d rows, %d failed; want 1 to 8 rows, none failed", p.batch.Len(), len(p.failed))
	}
	checkPlan(t, e, p)
	if len(m.batches) != 0 {
		t.Errorf("plan ran %d forward passes; want none", len(m.batches))
	}
	for _, st := range streams {
		if ev := queued(st); len(ev) != 0 {
			t.Errorf("plan emitted %v; want nothing", ev)
		}
	}
	for _, s := range e.seqs {
		if s.generated() != 0 || s.kv != 0 {
			t.Errorf("%s: plan committed: %d generated, %d in KV", s.req.ID, s.generated(), s.kv)
		}
	}
	// Run and commit that plan, then plan until both prompts are in:
	// every plan is its chunks, and a sequence decodes once its prompt
	// is done.
	for range 10 {
		if err := e.run(p); err != nil {
			t.Fatal(err)
		}
		e.commit(p, clk.Now())
		p = e.plan(clk.Now())
		checkPlan(t, e, p)
		if len(p.decodes) == 2 {
			break
		}
	}
	if len(p.decodes) != 2 || p.batch.Len() != 2 {
		t.Fatalf("have %d decodes in %d rows; want both sequences decoding", len(p.decodes), p.batch.Len())
	}
}

// TestCommitAlone: commit turns logits rows into tokens, events and
// finishes, whatever produced them: here logits written by hand, with no
// forward pass. A drafted tree is verified against them: its nodes are
// accepted up to the first one the logits disagree with, then the
// logits' own token follows.
func TestCommitAlone(t *testing.T) {
	m := newFakeModel(t)
	m.next = cycleNext
	e, clk := testEngine(t, m, Options{Speculation: Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}})
	rng := rand.New(rand.NewPCG(3, 4))
	// A prompt that repeats itself, so the n-gram drafter drafts.
	base := prompt(rng, 8)
	pr := slices.Concat(base, base[1:], base[1:])
	sa, err := submitNow(e, Request{ID: "a", Prompt: pr, MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := submitNow(e, Request{ID: "b", Prompt: prompt(rng, 5), MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.vocab
	oneHot := func(p *stepPlan, toks []int32) {
		l := make([]float32, len(p.batch.Logits)*vocab)
		for i, tok := range toks {
			l[i*vocab+int(tok)] = 1
		}
		e.logits.take(fakeBackend{}, &fakeTensor{rows: len(p.batch.Logits), cols: vocab, f32: l}, vocab)
	}
	// The prefill: by hand, "a" gets the token its prompt continues
	// with, "b" gets the end of generation.
	p := e.plan(clk.Now())
	if len(p.rows) != 2 {
		t.Fatalf("have %d logits rows; want both prompts' last", len(p.rows))
	}
	want := map[*sequence]int32{e.seqs["a"]: base[1], e.seqs["b"]: m.tok.EOS()}
	toks := []int32{want[p.rows[0]], want[p.rows[1]]}
	if err := e.run(p); err != nil { // the K/V the next pass reads
		t.Fatal(err)
	}
	oneHot(p, toks)
	e.commit(p, clk.Now())
	// The step's report, as publish would hand it to the observer.
	if r := &e.report; r.DecodeTokens != 2 || len(r.Drafts) != 0 {
		t.Errorf("have %d tokens committed, drafts %+v; want 2, none", r.DecodeTokens, r.Drafts)
	}
	e.report.reset()
	if ev := queued(sb); len(ev) != 1 || ev[0].Final == nil || ev[0].Final.FinishReason != FinishStop {
		t.Errorf("b: have events %+v; want one final, stopped", ev)
	}
	if ev := queued(sa); len(ev) != 1 || !slices.Equal(ev[0].Tokens, []int32{base[1]}) {
		t.Errorf("a: have events %+v; want one delta of %d", ev, base[1])
	}
	// The decode: "a" drafts a chain of 4 from its prompt. The logits
	// agree with the first two nodes and then pick another token.
	s := e.seqs["a"]
	p = e.plan(clk.Now())
	if !s.sp.Drafting() || s.sp.Tree().Len() != 4 {
		t.Fatalf("have drafting %v, tree %v; want a chain of 4", s.sp.Drafting(), s.sp.Tree().Tokens)
	}
	if p.batch.Len() != 5 || len(p.batch.Logits) != 5 {
		t.Fatalf("have %d rows, %d logits rows; want the root and 4 nodes", p.batch.Len(), len(p.batch.Logits))
	}
	draft := slices.Clone(s.sp.Tree().Tokens)
	other := int32(3)
	for other == draft[2] {
		other++
	}
	if err := e.run(p); err != nil {
		t.Fatal(err)
	}
	// Row 0 is the root's: the target's token after it is the first
	// node's; rows 1+i are node i's.
	oneHot(p, []int32{draft[0], draft[1], other, draft[3], 5})
	before := s.generated()
	e.commit(p, clk.Now())
	wantToks := []int32{draft[0], draft[1], other}
	if got := s.tokens[len(s.tokens)-3:]; s.generated() != before+3 || !slices.Equal(got, wantToks) {
		t.Errorf("have %d new tokens ending %v; want %v", s.generated()-before, got, wantToks)
	}
	wantDrafts := []DraftCount{{Drafter: "ngram", Drafts: 1, Drafted: 4, Accepted: 2}}
	if r := &e.report; r.DecodeTokens != 3 || !slices.Equal(r.Drafts, wantDrafts) {
		t.Errorf("have report of %d tokens, drafts %+v; want 3 tokens, drafts %+v", r.DecodeTokens, r.Drafts, wantDrafts)
	}
	if s.kv != len(s.tokens)-1 {
		t.Errorf("have %d tokens in KV of %d; want all but the last", s.kv, len(s.tokens))
	}
	if keep := e.blocks(s.kv); len(s.table) != keep {
		t.Errorf("have %d blocks after the step; want %d (the tree's spares back)", len(s.table), keep)
	}
	if ev := queued(sa); len(ev) != 1 || !slices.Equal(ev[0].Tokens, append([]int32{base[1]}, wantToks...)) {
		t.Errorf("a: have events %+v; want one delta of %v", ev, append([]int32{base[1]}, wantToks...))
	}
}
