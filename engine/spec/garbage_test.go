package spec

import (
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// tableModel is a model whose next-token logits are a fixed function of
// the last token (no weights, no K/V read), on a real CPU backend: a
// forward pass that allocates nothing once warm, so that a test can count
// what a drafter itself allocates.
type tableModel struct {
	cfg  model.Config
	be   kernels.Backend
	host []float32
	out  map[int]kernels.Tensor // by row count
}

func newTableModel(tb testing.TB) *tableModel {
	return &tableModel{cfg: model.Config{Arch: "table", Layers: 1, Dim: 8, Heads: 1, KVHeads: 1, HeadDim: 8, Vocab: 64, Context: 512},
		be: openBackend(tb), out: map[int]kernels.Tensor{}}
}

func (m *tableModel) Config() model.Config     { return m.cfg }
func (m *tableModel) Backend() kernels.Backend { return m.be }
func (m *tableModel) Close() error             { return nil }

func (m *tableModel) Forward(kv kernels.KVCache, b *model.Batch) (kernels.Tensor, error) {
	rows, v := len(b.Logits), m.cfg.Vocab
	if rows == 0 {
		return nil, nil
	}
	if cap(m.host) < rows*v {
		m.host = make([]float32, rows*v)
	}
	h := m.host[:rows*v]
	for i, r := range b.Logits {
		tok := int(b.Tokens[r])
		for j := range v {
			// 17 is invertible mod 97: no two tokens tie.
			h[i*v+j] = float32((tok*31 + j*17) % 97)
		}
	}
	t, ok := m.out[rows]
	if !ok {
		t = m.be.Alloc(rows, v)
		m.out[rows] = t
	}
	m.be.Upload(t, h)
	return t, nil
}

// TestDraftModelNoGarbage: once warm, the draft model drafts a step
// without allocating, for greedy and sampled requests in static and
// dynamic shapes (the forward pass here allocates nothing of its own).
func TestDraftModelNoGarbage(t *testing.T) {
	d, err := NewDraftModel(newTableModel(t), 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []Shape{Chain(4), Wide, Bushy, Dynamic(8), Dynamic(16)} {
		ctxs := []Context{
			{Slot: 0, Tokens: []int32{1, 5, 9, 3}, Shape: sh},
			{Slot: 2, Tokens: []int32{7, 7, 2}, Shape: sh},
			{Slot: 3, Tokens: []int32{4, 8, 15, 16}, Shape: sh, Params: sample.Params{Temperature: 0.8, TopP: 0.9, Seed: 3}},
		}
		trees := []*Tree{{}, {}, {}}
		if err := d.Propose(ctxs, trees); err != nil {
			t.Fatal(err)
		}
		for i, tr := range trees {
			if tr.Len() < 2 {
				t.Fatalf("%s: context %d: a tree of %d nodes; want drafts", sh.Name, i, tr.Len())
			}
		}
		a := testing.AllocsPerRun(20, func() {
			if err := d.Propose(ctxs, trees); err != nil {
				t.Fatal(err)
			}
		})
		if a != 0 {
			t.Errorf("%s: %.1f allocations per Propose; want none", sh.Name, a)
		}
	}
}

// TestNGramNoGarbage: once warm, lookup drafts a step without allocating,
// in static and dynamic shapes, guided requests included (a node's
// context for the mask is built in reused storage).
func TestNGramNoGarbage(t *testing.T) {
	hist := []int32{1, 7, 8, 9, 10, 11, 12, 2, 7, 8, 9, 10, 11, 12, 3, 7, 8, 9, 13, 14}
	all := []uint64{^uint64(0)}
	g := &NGram{}
	for _, sh := range []Shape{Chain(4), Wide, Bushy, Dynamic(8), Dynamic(16)} {
		ctxs := []Context{
			{Slot: 0, Tokens: []int32{4, 5, 7, 8}, History: hist, Shape: sh},
			{Slot: 1, Tokens: []int32{3, 7, 8}, History: hist, Shape: sh, Mask: func([]int32) []uint64 { return all }},
		}
		trees := []*Tree{{}, {}}
		if err := g.Propose(ctxs, trees); err != nil {
			t.Fatal(err)
		}
		for i, tr := range trees {
			if tr.Len() == 0 {
				t.Fatalf("%s: context %d: no drafts", sh.Name, i)
			}
		}
		if a := testing.AllocsPerRun(20, func() { g.Propose(ctxs, trees) }); a != 0 {
			t.Errorf("%s: %.1f allocations per Propose; want none", sh.Name, a)
		}
	}
}
