package cpu

import (
	"fmt"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// The CPU backend's logits live in host memory already, so its Sampler op
// is the host reference (kernels/sample) run on the tensor's rows in place:
// nothing is copied, and the results are the reference's by construction. Rows are independent, so a batch of them is
// spread over the workers, each with a sampler of its own.

var _ kernels.Sampler = (*Backend)(nil)

// SampleRows is kernels.Sampler's draw: kernels/sample's Sampler on each
// row, in place.
func (b *Backend) SampleRows(out []int32, logits kernels.Tensor, rows []kernels.SampleRow) {
	lt := f32Tensor(logits, "SampleRows")
	if len(out) != len(rows) {
		panic(fmt.Sprintf("cpu: SampleRows: %d outputs for %d rows", len(out), len(rows)))
	}
	for _, r := range rows {
		checkRow(lt, r.Row, "SampleRows")
	}
	if len(b.samplers) < b.threads {
		b.samplers = make([]sample.Sampler, b.threads)
	}
	t := &b.samp
	t.out, t.lt, t.rows, t.samplers = out, lt, rows, b.samplers
	b.pool.run(t, len(rows), sampleGrain(rows))
	*t = sampleTask{}
}

// A greedy row without penalties is one pass over the row (or less, under
// a mask), too short to be worth handing to another core alone; a sampled
// or penalised row takes several (a copy, a NaN scan, the top-k pass, or
// top-p's weights over the whole row). Rows run in parallel once their cost
// reaches splitCost one-pass rows.
const (
	greedyCost  = 1
	sampledCost = 4
	splitCost   = 4
)

// sampleGrain is the chunk SampleRows hands the pool: every row on its own
// (claimed by whichever worker is free, so a few costly rows spread and
// many cheap ones balance), or all of them at once where the batch is
// cheaper than waking a helper. The split follows the rows' cost, not
// their count: two sampled rows are worth two cores, three greedy ones
// are not.
func sampleGrain(rows []kernels.SampleRow) int {
	cost := 0
	for i := range rows {
		p := &rows[i].Params
		if p.Greedy() && !p.Penalties(len(rows[i].History)) {
			cost += greedyCost
		} else {
			cost += sampledCost
		}
		if cost >= splitCost && i > 0 {
			return 1
		}
	}
	return max(len(rows), 1)
}

// sampleTask is SampleRows handed to the pool.
type sampleTask struct {
	out      []int32
	lt       *Tensor
	rows     []kernels.SampleRow
	samplers []sample.Sampler // one per worker
}

func (t *sampleTask) run(w, lo, hi int) {
	s := &t.samplers[w]
	for i := lo; i < hi; i++ {
		r := &t.rows[i]
		t.out[i] = s.SampleRow(t.lt.row(r.Row), *r)
	}
}

func checkRow(t *Tensor, r int, op string) int {
	if r < 0 || r >= t.rows {
		panic(fmt.Sprintf("cpu: %s: row %d of %d", op, r, t.rows))
	}
	return r
}
