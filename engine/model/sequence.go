package model

import (
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// Sequences runs a fixed set of sequences, each with its own contiguous run
// of KV blocks: the plainest way to drive a model. `specgate generate` and
// the benchmarks use it, and it is the reference the batching engine is
// tested against. Not safe for concurrent use.
type Sequences struct {
	m      Model
	kv     kernels.KVCache
	bs     int
	tables [][]int32
	lens   []int
	batch  Batch
	logits []float32
}

// NewSequences allocates KV for n sequences of up to ctx tokens each.
func NewSequences(m Model, n, ctx int) (*Sequences, error) {
	const bs = 16
	per := (ctx + bs - 1) / bs
	kv, err := NewKV(m, n*per, bs)
	if err != nil {
		return nil, fmt.Errorf("model: KV for %d × %d tokens: %w", n, ctx, err)
	}
	s := &Sequences{m: m, kv: kv, bs: bs, tables: make([][]int32, n), lens: make([]int, n)}
	for i := range s.tables {
		s.tables[i] = make([]int32, per)
		for j := range s.tables[i] {
			s.tables[i][j] = int32(i*per + j)
		}
	}
	return s, nil
}

// Len returns how many tokens sequence i holds.
func (s *Sequences) Len(i int) int { return s.lens[i] }

// Reset empties sequence i.
func (s *Sequences) Reset(i int) { s.lens[i] = 0 }

// Step appends tokens[i] (possibly empty) to each sequence i in one forward
// pass and returns the logits after the last token of every sequence that
// got tokens, in sequence order, Vocab floats each. The slice is reused by
// the next call.
func (s *Sequences) Step(tokens [][]int32) ([]float32, error) {
	if len(tokens) != len(s.tables) {
		return nil, fmt.Errorf("model: %d token lists for %d sequences", len(tokens), len(s.tables))
	}
	b := &s.batch
	b.Reset()
	for i, toks := range tokens {
		if s.lens[i]+len(toks) > len(s.tables[i])*s.bs {
			return nil, fmt.Errorf("model: sequence %d would hold %d tokens, room for %d", i, s.lens[i]+len(toks), len(s.tables[i])*s.bs)
		}
		for j, t := range toks {
			pos := int32(s.lens[i] + j)
			slot := s.tables[i][int(pos)/s.bs]*int32(s.bs) + pos%int32(s.bs)
			b.Add(t, pos, slot, s.tables[i], j == len(toks)-1)
		}
	}
	if b.Len() == 0 {
		return nil, nil
	}
	v := s.m.Config().Vocab
	if need := len(b.Logits) * v; cap(s.logits) < need {
		s.logits = make([]float32, need)
	}
	s.logits = s.logits[:len(b.Logits)*v]
	if err := ForwardHost(s.m, s.kv, b, s.logits); err != nil {
		return nil, err
	}
	for i, toks := range tokens {
		s.lens[i] += len(toks)
	}
	return s.logits, nil
}
