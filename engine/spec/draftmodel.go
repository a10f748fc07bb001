package spec

import (
	"fmt"
	"math"
	"slices"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/sample"
	"github.com/specgate/specgate/kernels"
)

// DraftModel drafts with a smaller model of the same vocabulary: a small
// sibling model, or the target's own weights quantized to Q4_0 (a
// "self-draft"). It keeps its own paged KV per slot and runs all slots'
// drafting steps as one batch per depth.
//
// The draft model runs along the shape's main (rank-0) chain: at each depth
// it feeds the best candidate and reads the next distribution; siblings off
// the main chain are the runner-up candidates there, and nodes below them
// are left out (they would need the draft model to run every branch). For
// greedy requests candidates are the draft's top tokens (point masses); for
// sampled ones the first is the draft's draw from its processed
// distribution q with the request's uniform for that position (the one
// the target draws with, so when q is close to the target's distribution
// the guess is the target's token), which the tree carries with q, and
// the others the draft's next most likely tokens (point masses).
//
// Rewinding is implicit as well as explicit: before drafting, the KV of a
// slot is kept only as far as it matches the committed tokens, so rejected
// drafts are simply overwritten.
type DraftModel struct {
	m      model.Model
	kv     kernels.KVCache
	bs     int
	vocab  int
	tables [][]int32
	fed    [][]int32 // tokens whose KV the slot holds, in order
	samp   []*sample.Sampler
	seeds  []uint64

	// Temperature, when above zero, replaces the request's temperature
	// for sampled drafting (a hotter draft explores more; the verifier
	// keeps the output lossless whatever q is).
	Temperature float32

	batch  model.Batch
	logits []float32
	work   []float32
}

var _ Drafter = (*DraftModel)(nil)

// NewDraftModel allocates the draft model's KV for slots sequences of up to
// ctx tokens each (plus room for a draft chain).
func NewDraftModel(m model.Model, slots, ctx int) (*DraftModel, error) {
	const bs = 16
	if slots <= 0 || ctx <= 0 {
		return nil, fmt.Errorf("spec: draft model for %d slots of %d tokens", slots, ctx)
	}
	per := (ctx + 64 + bs - 1) / bs
	kv, err := m.NewKV(slots*per, bs)
	if err != nil {
		return nil, fmt.Errorf("spec: draft KV: %w", err)
	}
	d := &DraftModel{m: m, kv: kv, bs: bs, vocab: m.Config().Vocab,
		tables: make([][]int32, slots), fed: make([][]int32, slots),
		samp: make([]*sample.Sampler, slots), seeds: make([]uint64, slots)}
	for i := range d.tables {
		d.tables[i] = make([]int32, per)
		for j := range d.tables[i] {
			d.tables[i][j] = int32(i*per + j)
		}
	}
	return d, nil
}

// Name returns "draft".
func (d *DraftModel) Name() string { return "draft" }

// Model returns the draft model.
func (d *DraftModel) Model() model.Model { return d.m }

// Rewind keeps the KV of slot's first n tokens; n = 0 frees the slot.
func (d *DraftModel) Rewind(slot, n int) {
	if slot < 0 || slot >= len(d.fed) {
		return
	}
	if n < len(d.fed[slot]) {
		d.fed[slot] = d.fed[slot][:max(n, 0)]
	}
	if n <= 0 {
		d.samp[slot] = nil
	}
}

// draftSeq is one slot's drafting state within a Propose call.
type draftSeq struct {
	ci    int
	chain []int32 // main-chain tokens fed so far (after the root)
	want  []int   // candidates needed after depth d (d = 0: the root)
	toks  [][]int32
	qs    [][][]float32
	row   int // logits row of the last forward, -1 when not in it
}

// Propose drafts for every context in one batched forward per depth.
func (d *DraftModel) Propose(ctxs []Context, trees []*Tree) error {
	var seqs []*draftSeq
	for i, c := range ctxs {
		trees[i].Reset()
		if c.Slot < 0 || c.Slot >= len(d.tables) || len(c.Tokens) == 0 || c.Shape.Off() {
			continue
		}
		// Children wanted after each main-chain depth: the main chain is
		// nodes 0, 1, … while Rank is 0 and Depth increases.
		s := c.Shape
		var want []int
		for j := 0; j < s.Len(); j++ {
			dep := int(s.Depth[j])
			if dep-1 > len(want) {
				continue
			}
			onChain := s.Parent[j] == int32(dep-2) // parent is the main-chain node one up
			if dep == 1 {
				onChain = true
			}
			if !onChain {
				continue
			}
			for len(want) < dep {
				want = append(want, 0)
			}
			want[dep-1] = max(want[dep-1], int(s.Rank[j])+1)
		}
		if need := len(c.Tokens) + len(want); need > len(d.tables[c.Slot])*d.bs {
			continue // no room: no drafts for this one
		}
		d.startSlot(c)
		seqs = append(seqs, &draftSeq{ci: i, want: want, row: -1})
	}
	if len(seqs) == 0 {
		return nil
	}
	for depth := 0; ; depth++ {
		b := &d.batch
		b.Reset()
		for _, s := range seqs {
			s.row = -1
			c := ctxs[s.ci]
			if depth >= len(s.want) || (depth > 0 && len(s.chain) < depth) {
				continue
			}
			var feed []int32
			if depth == 0 {
				// Catch up: keep the KV as far as it matches the committed
				// tokens, and feed at least the root for its logits.
				fed := d.fed[c.Slot]
				common := 0
				for common < len(fed) && common < len(c.Tokens) && fed[common] == c.Tokens[common] {
					common++
				}
				common = min(common, len(c.Tokens)-1)
				d.fed[c.Slot] = fed[:common]
				feed = c.Tokens[common:]
			} else {
				feed = s.chain[depth-1 : depth]
			}
			tab := d.tables[c.Slot]
			for j, t := range feed {
				pos := int32(len(d.fed[c.Slot]))
				slot := tab[int(pos)/d.bs]*int32(d.bs) + pos%int32(d.bs)
				if j == len(feed)-1 {
					s.row = len(b.Logits)
				}
				b.Add(t, pos, slot, tab, j == len(feed)-1)
				d.fed[c.Slot] = append(d.fed[c.Slot], t)
			}
		}
		if b.Len() == 0 {
			break
		}
		if need := len(b.Logits) * d.vocab; cap(d.logits) < need {
			d.logits = make([]float32, need)
		}
		if err := d.m.Forward(d.kv, b, d.logits[:len(b.Logits)*d.vocab]); err != nil {
			for _, s := range seqs {
				d.Rewind(ctxs[s.ci].Slot, 0) // KV state unknown: start over
				trees[s.ci].Reset()
			}
			return fmt.Errorf("spec: draft forward: %w", err)
		}
		for _, s := range seqs {
			if s.row < 0 {
				continue
			}
			c := ctxs[s.ci]
			logits := d.logits[s.row*d.vocab : (s.row+1)*d.vocab]
			toks, qs := d.candidates(c, s.chain, logits, s.want[depth])
			s.toks, s.qs = append(s.toks, toks), append(s.qs, qs)
			if len(toks) > 0 && depth+1 < len(s.want) {
				s.chain = append(s.chain, toks[0])
			}
		}
	}
	for _, s := range seqs {
		c := ctxs[s.ci]
		fill(trees[s.ci], c.Shape, func(path []int32, k int) ([]int32, [][]float32) {
			dep := len(path)
			if dep >= len(s.toks) || !slices.Equal(path, s.chain[:dep]) {
				return nil, nil // off the main chain: not drafted
			}
			toks, qs := s.toks[dep], s.qs[dep]
			return toks[:min(k, len(toks))], qs
		})
	}
	return nil
}

// startSlot sets up the slot's sampler for the request.
func (d *DraftModel) startSlot(c Context) {
	p := c.Params
	if p.Temperature > 0 && d.Temperature > 0 {
		p.Temperature = d.Temperature
	}
	if s := d.samp[c.Slot]; s == nil || s.Params() != p {
		d.samp[c.Slot] = sample.New(p)
	}
}

// candidates returns k candidates after ctx.Tokens + chain from the draft's
// logits: the top k for greedy requests (q nil), k independent draws from
// the processed draft distribution for sampled ones.
func (d *DraftModel) candidates(c Context, chain []int32, logits []float32, k int) ([]int32, [][]float32) {
	if k <= 0 {
		return nil, nil
	}
	var hist []int32
	if c.Mask != nil || c.Params.Temperature > 0 || c.Params.RepeatPenalty > 0 || c.Params.PresencePenalty != 0 || c.Params.FrequencyPenalty != 0 {
		hist = append(slices.Clip(c.Tokens), chain...)
	}
	if c.Mask != nil {
		if m := c.Mask(hist); m != nil {
			d.work = append(d.work[:0], logits...)
			kernels.MaskLogitsRef(d.work, m)
			logits = d.work
		}
	}
	if c.Params.Temperature <= 0 {
		// Greedy: rank by the draft's raw (masked) logits. The target
		// applies the request's penalties when it verifies; drafts need
		// only be likely, not exact.
		return topK(slices.Clone(logits), k), nil
	}
	samp := d.samp[c.Slot]
	q := make([]float32, len(logits))
	samp.Probs(logits, hist, q)
	first := samp.Draw(q, len(hist))
	if q[first] <= 0 {
		return nil, nil
	}
	toks, qs := []int32{first}, [][]float32{q}
	if k > 1 {
		w := slices.Clone(q)
		w[first] = float32(math.Inf(-1))
		for _, t := range topK(w, k-1) {
			if q[t] <= 0 {
				break
			}
			toks = append(toks, t)
			qs = append(qs, nil)
		}
	}
	return toks, qs
}

// topK returns the indices of the k largest values of l, best first
// (lower index on ties), skipping -Inf (masked) and NaN. l is scratch and
// is overwritten.
func topK(l []float32, k int) []int32 {
	negInf := float32(math.Inf(-1))
	out := make([]int32, 0, k)
	for range k {
		best := int32(-1)
		for i, v := range l {
			if v > negInf && (best < 0 || v > l[best]) {
				best = int32(i)
			}
		}
		if best < 0 {
			break
		}
		out = append(out, best)
		l[best] = negInf
	}
	return out
}
