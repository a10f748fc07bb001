package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// Q8_0 weights repacked at load: the ×8 layout.
//
// The kernels that take eight weight rows at a time (one per lane) spend
// most of a block's cycles, in GGML's row-major layout, on fixed work:
// eight separate rows loaded and transposed in registers, and eight F16
// scales gathered one by one. Weights are read many times and laid out once,
// so Weights lays Q8_0 rows out the way those kernels read them:
//
//   - rows in groups of eight, the last group padded with zero rows (zero
//     scales, so their results are +0 and never read);
//   - for each group G and block b, x8Block = 272 bytes at (G·nb + b)·272:
//     the eight rows' F16 scales (row l at 2l), then the block's 32 values as
//     eight 4-byte groups g, each 32 bytes holding rows 0-7's group g (row l
//     at 16 + 32g + 4l).
//
// One load is then 4-byte group g of all eight rows, lane l = row l (what
// the transposition built), one VCVTPH2PS the eight scales, and a pass over
// a run of groups reads one sequential stream. It is a layout only: every
// kernel computes the same integers and the same roundings (canon.go), so
// results are bit for bit those of the row-major layout.
const (
	x8Rows  = 8           // weight rows per group
	x8Block = 8 * q8Bytes // bytes per group and block
)

// packQ8 says whether Weights repacks Q8_0 weights into the ×8 layout. It
// is set by useAsm: on where the AVX2 multi-row kernels run (VNNI machines
// keep GGML's layout, which their tile kernels read); tests switch it with
// usePackQ8 to cover both layouts on any kernel set.
var packQ8 bool

// usePackQ8 sets packQ8 and returns the previous value. Like useAsm it must
// not be called while a backend is running; it affects tensors made after
// it.
func usePackQ8(on bool) bool {
	old := packQ8
	packQ8 = on
	return old
}

// x8Groups returns how many row groups rows rows take.
func x8Groups(rows int) int { return (rows + x8Rows - 1) / x8Rows }

// packX8 returns rows rows of nb Q8_0 blocks each, row r in GGML's layout
// at row(r), in the ×8 layout, in a new allocation.
func packX8(rows, nb int, row func(r int) []byte) []byte {
	out := make([]byte, x8Groups(rows)*nb*x8Block)
	packX8Rows(out, 0, rows, nb, row)
	return out
}

// packX8Rows lays rows [lo, hi) out into out, the whole tensor's ×8 bytes.
func packX8Rows(out []byte, lo, hi, nb int, row func(r int) []byte) {
	for r := lo; r < hi; r++ {
		src := row(r)[:nb*q8Bytes]
		g := out[r/x8Rows*nb*x8Block:]
		l := r % x8Rows
		for b := range nb {
			blk, dst := src[b*q8Bytes:(b+1)*q8Bytes], g[b*x8Block:(b+1)*x8Block]
			dst[2*l], dst[2*l+1] = blk[0], blk[1]
			for q := range 8 {
				binary.LittleEndian.PutUint32(dst[16+32*q+4*l:], binary.LittleEndian.Uint32(blk[2+4*q:]))
			}
		}
	}
}

// x8PackTask lays a weight's rows out across the workers.
type x8PackTask struct {
	out []byte
	t   *Tensor
}

func (p *x8PackTask) run(_, lo, hi int) {
	packX8Rows(p.out, lo*x8Rows, min(hi*x8Rows, p.t.rows), p.t.cols/kernels.QK, p.t.rawRow)
}

// unpackX8Row writes row r of the ×8 bytes p (nb blocks a row) into dst in
// GGML's layout.
func unpackX8Row(dst, p []byte, nb, r int) {
	g := p[r/x8Rows*nb*x8Block:]
	l := r % x8Rows
	for b := range nb {
		src, blk := g[b*x8Block:(b+1)*x8Block], dst[b*q8Bytes:(b+1)*q8Bytes]
		blk[0], blk[1] = src[2*l], src[2*l+1]
		for q := range 8 {
			copy(blk[2+4*q:2+4*q+4], src[16+32*q+4*l:16+32*q+4*l+4])
		}
	}
}

// convertRowX8 decodes row r of the ×8 bytes p into dst, as convertRow
// decodes a Q8_0 row: the same products, so the same bits.
func convertRowX8(dst []float32, p []byte, r int) {
	nb := len(dst) / kernels.QK
	g := p[r/x8Rows*nb*x8Block:]
	l := r % x8Rows
	for b := range nb {
		src := g[b*x8Block : (b+1)*x8Block]
		d := f16(src[2*l:])
		out := dst[b*32 : b*32+32]
		for q := range 8 {
			for c := range 4 {
				out[4*q+c] = d * float32(int8(src[16+32*q+4*l+c]))
			}
		}
	}
}

// packWeights lays the Q8_0 tensor t out in the ×8 layout when packQ8 is
// on, group by group across the workers; its bytes become an allocation of
// its own, and the caller's are no longer referenced.
func (b *Backend) packWeights(t *Tensor) {
	if !packQ8 || t.dt != kernels.Q8_0 || t.x8 || t.cols == 0 {
		return
	}
	groups := x8Groups(t.rows)
	p := &x8PackTask{out: make([]byte, groups*t.rowBytes*x8Rows), t: t}
	if b.closed {
		p.run(0, 0, groups) // no workers left to share it
	} else {
		b.pool.run(p, groups, max(1, groups/(4*b.threads)))
	}
	t.raw, t.x8 = p.out, true
}

// sliceX8 returns rows [r0, r1) of the ×8 tensor s: a view of its groups
// when r0 starts one, else the rows copied and packed anew (a weight sliced
// off a fused one, once at load).
func sliceX8(s *Tensor, r0, r1 int) *Tensor {
	v := *s
	v.rows = r1 - r0
	nb := s.cols / kernels.QK
	if r0%x8Rows == 0 {
		// The view keeps the whole last group: the kernels read groups
		// whole, and the rows past r1 are the parent's, never written.
		v.raw = s.raw[r0/x8Rows*nb*x8Block : x8Groups(r1)*nb*x8Block : x8Groups(r1)*nb*x8Block]
		return &v
	}
	row := make([]byte, s.rowBytes)
	v.raw = packX8(v.rows, nb, func(r int) []byte {
		unpackX8Row(row, s.raw, nb, r0+r)
		return row
	})
	return &v
}

// groupBytes returns the ×8 bytes of weight rows [lo, hi) of t, lo a
// multiple of x8Rows: whole groups, the last one's rows past hi included.
func (t *Tensor) groupBytes(lo, hi int) []byte {
	if lo%x8Rows != 0 {
		panic(fmt.Sprintf("cpu: rows [%d, %d) of a ×8 tensor do not start a group", lo, hi))
	}
	gb := t.cols / kernels.QK * x8Block
	return t.raw[lo/x8Rows*gb : x8Groups(hi)*gb]
}

// dotQ8X8Go returns the dot product of row l of the ×8 group g (nb blocks)
// with one quantized activation row: dotQ8Go's arithmetic.
func dotQ8X8Go(g []byte, l, nb int, xq []int8, xd []float32) float32 {
	var acc float32
	for b := range nb {
		blk := g[b*x8Block : (b+1)*x8Block]
		x := xq[b*32 : b*32+32]
		var s int32
		for q := range 8 {
			for c := range 4 {
				s += int32(int8(blk[16+32*q+4*l+c])) * int32(x[4*q+c])
			}
		}
		acc = qblock(acc, s, f16(blk[2*l:]), xd[b])
	}
	return acc
}

// dotQ8X8RowsN sets out[a*os+r] to the dot product of row r of the ×8
// groups w with activation row a (laid out as for dotQ8RowsN), for r < m
// and a < na ≤ maxRowsN. w holds the groups of the m rows, whole.
var dotQ8X8RowsN func(w []byte, m, nb, na int, xq []int8, xd []float32, out []float32, os int)

func dotQ8X8RowsNGo(w []byte, m, nb, na int, xq []int8, xd []float32, out []float32, os int) {
	for a := range na {
		x, d := xq[a*nb*32:(a+1)*nb*32], xd[a*nb:(a+1)*nb]
		for r := range m {
			out[a*os+r] = dotQ8X8Go(w[r/x8Rows*nb*x8Block:], r%x8Rows, nb, x, d)
		}
	}
}
