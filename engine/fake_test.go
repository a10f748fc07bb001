package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/tokenizer"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/prefixcache"
)

// fakeKV stores, per slot, the token and position written there, so the
// fake model can read a sequence back through its block table and notice a
// wrong table, a lost swap or a stale block.
type fakeKV struct {
	spec kernels.KVSpec
	tok  []int32
	pos  []int32
}

func (k *fakeKV) Spec() kernels.KVSpec { return k.spec }

// fakeBackend implements only the ops the engine calls: NewKV and
// CopyBlocks, and Slice and Download of the fake model's logits. It has no
// kernels.Sampler, so the engine samples on the host, by the reference.
type fakeBackend struct{ kernels.Backend }

func (fakeBackend) Name() string { return "fake" }

// fakeTensor is logits on the host.
type fakeTensor struct {
	rows, cols int
	f32        []float32
}

func (t *fakeTensor) DType() kernels.DType   { return kernels.F32 }
func (t *fakeTensor) Dims() (rows, cols int) { return t.rows, t.cols }

func (fakeBackend) Slice(t kernels.Tensor, r0, r1 int) kernels.Tensor {
	f := t.(*fakeTensor)
	return &fakeTensor{rows: r1 - r0, cols: f.cols, f32: f.f32[r0*f.cols : r1*f.cols]}
}

func (fakeBackend) Download(dst []float32, src kernels.Tensor) {
	f := src.(*fakeTensor)
	if len(dst) != len(f.f32) {
		panic(fmt.Sprintf("fake: Download of %d×%d into %d values", f.rows, f.cols, len(dst)))
	}
	copy(dst, f.f32)
}

func (fakeBackend) CopyBlocks(dst, src kernels.KVCache, moves []kernels.BlockCopy) {
	d, s := dst.(*fakeKV), src.(*fakeKV)
	bs := int32(s.spec.BlockSize)
	for _, m := range moves {
		copy(d.tok[m.Dst*bs:(m.Dst+1)*bs], s.tok[m.Src*bs:(m.Src+1)*bs])
		copy(d.pos[m.Dst*bs:(m.Dst+1)*bs], s.pos[m.Src*bs:(m.Src+1)*bs])
	}
}

// fakeModel predicts the next token from the whole sequence it reads back
// through the KV cache: next(history). Its logits are one-hot.
type fakeModel struct {
	tok   *tokenizer.Tokenizer
	vocab int
	next  func(history []int32) int32
	// fail, when set, makes Forward return it.
	fail error
	// batches records the size of every forward pass (tokens, logits rows).
	batches [][2]int
	// clock, when set, moves by stepCost plus tokenCost per token in each
	// pass: a device of known speed, for the step-latency target.
	clock               *FakeClock
	stepCost, tokenCost time.Duration
	// load, when set, multiplies each pass's time by its factors in turn:
	// a machine shared with other work, whose passes stretch and stall
	// whatever their size.
	load []float64
	// kvType is what SetKVType was given (F32 until then: the fake
	// backend stores nothing else).
	kvType kernels.DType
}

var _ model.Model = (*fakeModel)(nil)

// fakeVocab: <unk> <s> </s>, the letters a..z, the digits, then words.
func fakeVocab() []string {
	v := []string{"<unk>", "<s>", "</s>"}
	for c := 'a'; c <= 'z'; c++ {
		v = append(v, string(c))
	}
	for c := '0'; c <= '9'; c++ {
		v = append(v, string(c))
	}
	v = append(v, " ", ".")
	for i := len(v); i < 64; i++ {
		v = append(v, fmt.Sprintf("▁w%d", i))
	}
	return v
}

// tokID returns the id of a single-character token of fakeVocab.
func tokID(c byte) int32 {
	switch {
	case c >= 'a' && c <= 'z':
		return 3 + int32(c-'a')
	case c >= '0' && c <= '9':
		return 29 + int32(c-'0')
	case c == ' ':
		return 39
	case c == '.':
		return 40
	}
	panic("no token for " + string(c))
}

func newFakeModel(tb testing.TB) *fakeModel {
	tb.Helper()
	tok, err := tokenizer.New(tokenizer.Spec{Model: "llama", Tokens: fakeVocab(), BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, AddBOS: true, AddSpacePrefix: true})
	if err != nil {
		tb.Fatal(err)
	}
	return &fakeModel{tok: tok, vocab: 64, next: hashNext}
}

// hashNext is a deterministic function of the whole history that never
// picks a special token.
func hashNext(h []int32) int32 {
	f := fnv.New32a()
	for _, t := range h {
		f.Write([]byte{byte(t), byte(t >> 8)})
	}
	return 3 + int32(f.Sum32()%61)
}

func (m *fakeModel) Config() model.Config {
	return model.Config{Arch: "fake", Layers: 1, Dim: 1, Heads: 1, KVHeads: 1, HeadDim: 1, Vocab: m.vocab, Context: 4096}
}
func (m *fakeModel) Tokenizer() *tokenizer.Tokenizer { return m.tok }
func (m *fakeModel) ChatTemplate() string            { return "" }
func (m *fakeModel) Backend() kernels.Backend        { return fakeBackend{} }
func (m *fakeModel) Close() error                    { return nil }

func (m *fakeModel) KVType() kernels.DType { return m.kvType }

func (m *fakeModel) SetKVType(dt kernels.DType) error {
	if !kernels.SupportsKV(m.Backend(), dt) {
		return fmt.Errorf("fake: no %v KV cache", dt)
	}
	m.kvType = dt
	return nil
}

func (m *fakeModel) NewKV(blocks, blockSize int) (kernels.KVCache, error) {
	return fakeBackend{}.NewKV(m.Config().KVSpec(blocks, blockSize, m.kvType))
}

// NewKV makes the cache the fake model reads its sequences back from.
func (fakeBackend) NewKV(s kernels.KVSpec) (kernels.KVCache, error) {
	n := s.Blocks * s.BlockSize
	kv := &fakeKV{spec: s, tok: make([]int32, n), pos: make([]int32, n)}
	for i := range kv.pos {
		kv.pos[i] = -1
	}
	return kv, nil
}

func (m *fakeModel) Forward(c kernels.KVCache, b *model.Batch) (kernels.Tensor, error) {
	if m.fail != nil {
		return nil, m.fail
	}
	kv := c.(*fakeKV)
	bs := int32(kv.spec.BlockSize)
	m.batches = append(m.batches, [2]int{b.Len(), len(b.Logits)})
	if m.clock != nil {
		d := m.stepCost + time.Duration(b.Len())*m.tokenCost
		if len(m.load) > 0 {
			d = time.Duration(float64(d) * m.load[(len(m.batches)-1)%len(m.load)])
		}
		m.clock.Advance(d)
	}
	for i := range b.Tokens {
		kv.tok[b.Slots[i]] = b.Tokens[i]
		kv.pos[b.Slots[i]] = b.Pos[i]
	}
	if len(b.Logits) == 0 {
		return nil, nil
	}
	out := make([]float32, len(b.Logits)*m.vocab)
	for j, idx := range b.Logits {
		row := b.Attn[idx]
		if row.Len != b.Pos[idx]+1 {
			return nil, fmt.Errorf("fake: row %d attends to %d at position %d", idx, row.Len, b.Pos[idx])
		}
		h := make([]int32, row.Len)
		for p := int32(0); p < row.Len; p++ {
			slot := row.Table[p/bs]*bs + p%bs
			if kv.pos[slot] != p {
				return nil, fmt.Errorf("fake: position %d reads slot %d holding position %d: KV corrupted", p, slot, kv.pos[slot])
			}
			h[p] = kv.tok[slot]
		}
		out[j*m.vocab+int(m.next(h))] = 1
	}
	return &fakeTensor{rows: len(b.Logits), cols: m.vocab, f32: out}, nil
}

// testEngine builds an engine on a fake model without its goroutine.
func testEngine(tb testing.TB, m *fakeModel, o Options) (*Engine, *FakeClock) {
	tb.Helper()
	clk := NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	o.Clock = clk
	e, err := newEngine(m, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e, clk
}

// submitNow does what the loop does for a submission, on the test's
// goroutine.
func submitNow(e *Engine, r Request) (*Stream, error) {
	sub, err := e.prepare(r)
	if err != nil {
		return nil, err
	}
	if err := e.enqueue(e.clock.Now(), sub); err != nil {
		return nil, err
	}
	return sub.stream, nil
}

// drive steps the engine, advancing the clock by dt per step, until no
// request is live or maxSteps pass. It returns the steps taken.
func drive(tb testing.TB, e *Engine, clk *FakeClock, dt time.Duration, maxSteps int) int {
	tb.Helper()
	for i := 0; i < maxSteps; i++ {
		if len(e.seqs) == 0 {
			return i
		}
		e.step(clk.Now())
		clk.Advance(dt)
	}
	tb.Fatalf("%d requests still live after %d steps", len(e.seqs), maxSteps)
	return maxSteps
}

type result struct {
	tokens []int32
	text   string
	seqs   []int
	final  *Final
	deltas int
}

// collect reads a finished stream to its end without blocking.
func collect(tb testing.TB, s *Stream) result {
	tb.Helper()
	var r result
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if r.final == nil {
				tb.Fatal("stream ended without a final event")
			}
			return r
		}
		if err != nil {
			tb.Fatalf("Recv: %v", err)
		}
		if r.final != nil {
			tb.Fatal("event after the final")
		}
		if ev.Final != nil {
			r.final = ev.Final
			continue
		}
		r.deltas++
		r.tokens = append(r.tokens, ev.Tokens...)
		r.text += ev.Text
		r.seqs = append(r.seqs, ev.Seq)
	}
}

// checkWhole fails unless every block is free or owned exactly once by the
// prefix cache, flushing the cache gives every block back to its pool, and
// the scheduler holds nothing.
func checkWhole(tb testing.TB, e *Engine) {
	tb.Helper()
	if e.cache != nil {
		dev, host := e.cache.Blocks()
		for _, tier := range []struct {
			name   string
			pool   blockAllocator
			cached int
		}{{"device", e.dev, dev}, {"host", e.host, host}} {
			p, ok := tier.pool.(*prefixcache.Pool)
			if !ok {
				continue // no host tier
			}
			if p.Used() != tier.cached {
				tb.Errorf("have %d %s blocks in use, %d cached; want every used block cached (leak)", p.Used(), tier.name, tier.cached)
			}
			for b := range int32(p.Cap()) {
				if r := p.Refs(b); r > 1 {
					tb.Errorf("have %d refs on %s block %d; want at most the cache's one", r, tier.name, b)
				}
			}
		}
		if len(e.shared) != 0 {
			tb.Errorf("have shared blocks %v with no sequence live; want none", e.shared)
		}
		// Host blocks go first, then device blocks move there: repeat
		// until the cache is empty.
		for range 100 {
			dev, host := e.cache.Blocks()
			if dev == 0 && host == 0 {
				break
			}
			e.cache.EvictHost(host)
			e.cache.EvictDevice(dev)
		}
	}
	if e.dev.Free() != e.dev.Cap() {
		tb.Errorf("have %d of %d device blocks free; want all (leak)", e.dev.Free(), e.dev.Cap())
	}
	if e.host != nil && e.host.Free() != e.host.Cap() {
		tb.Errorf("have %d of %d host blocks free; want all (leak)", e.host.Free(), e.host.Cap())
	}
	if st := e.sched.Stats(); st.Running != 0 || st.Waiting != [3]int{} {
		tb.Errorf("have scheduler stats %+v; want empty", st)
	}
	if len(e.seqs) != 0 {
		tb.Errorf("have %d live sequences; want 0", len(e.seqs))
	}
}
