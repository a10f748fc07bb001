package engine

import (
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// passLogits is one forward pass's logits as the engine reads them. They
// stay where the backend computed them: where it has the kernels.Sampler
// ops, every row (guided masks, penalties and seeded draws included, for
// plain decodes and for speculative verification alike) becomes a token
// there and only ids reach the host; a row is copied out only for a request
// that asked for log-probabilities. A backend without those ops has the
// whole pass copied to the host once and sampled by the reference
// (kernels/sample), which the ops equal token for token.
type passLogits struct {
	t   kernels.Tensor  // the pass's logits; nil when it had no rows
	be  kernels.Backend // that owns t
	smp kernels.Sampler // be's ops; nil: host rows
	// vocab is a row's width.
	vocab int
	// host holds the pass's rows when smp is nil; row one row copied
	// out for log-probabilities otherwise.
	host, row []float32
	// ref is the host path's sampler, re-aimed at each row's settings.
	ref sample.Sampler
	// reqs and out are a batch of draws, their buffers reused.
	reqs []kernels.SampleRow
	out  []int32
}

// take adopts a pass's logits tensor t (nil for a pass without rows).
func (l *passLogits) take(be kernels.Backend, t kernels.Tensor, vocab int) {
	l.t, l.be, l.vocab = t, be, vocab
	l.smp, _ = be.(kernels.Sampler)
	if t == nil || l.smp != nil {
		return
	}
	rows, _ := t.Dims()
	l.host = grow(l.host, rows*vocab)
	be.Download(l.host, t)
}

// hostRow returns row i on the host. With the Sampler ops the slice is
// reused by the next call.
func (l *passLogits) hostRow(i int) []float32 {
	if l.smp == nil {
		return l.host[i*l.vocab : (i+1)*l.vocab]
	}
	l.row = grow(l.row, l.vocab)
	l.be.Download(l.row, l.be.Slice(l.t, i, i+1))
	return l.row
}

// sample draws the token of every request in reqs, in one call of the
// backend's ops where it has them. The result is reused by the next call.
func (l *passLogits) sample(reqs []kernels.SampleRow) []int32 {
	l.out = grow(l.out, len(reqs))
	if len(reqs) == 0 {
		return l.out
	}
	if l.smp != nil {
		l.smp.SampleRows(l.out, l.t, reqs)
		return l.out
	}
	for i, r := range reqs {
		l.out[i] = l.ref.SampleRow(l.host[r.Row*l.vocab:(r.Row+1)*l.vocab], r)
	}
	return l.out
}

// sampleOne draws one token: row's, with settings p, under mask (nil: no
// mask), after history.
func (l *passLogits) sampleOne(row int, p sample.Params, mask []uint64, history []int32) int32 {
	l.reqs = append(l.reqs[:0], kernels.SampleRow{Row: row, Params: p, Mask: mask, History: history})
	tok := l.sample(l.reqs)[0]
	l.reqs[0] = kernels.SampleRow{} // drop the borrowed slices
	return tok
}

// grow returns b with length n, reusing its storage when large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
