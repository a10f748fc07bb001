package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/specgate/specgate/kernels"
)

// Q8_0, Q4_0 and K-quant weights repacked at load: the ×8 layout.
//
// The kernels that take eight weight rows at a time (one per lane) spend
// most of a block's cycles, in GGML's row-major layout, on fixed work:
// eight separate rows loaded and transposed in registers, and eight F16
// scales gathered one by one. Weights are read many times and laid out once,
// so Weights lays Q8_0 and Q4_0 rows (and the K-quants', below) out the way
// those kernels read them:
//
//   - rows in groups of eight, the last group padded with zero rows (zero
//     scales, so their results are +0 and never read);
//   - for each group G and block b, 8·bb bytes at (G·nb + b)·8·bb (bb the
//     type's block size: x8Block = 272 for Q8_0, 144 for Q4_0): the eight
//     rows' F16 scales (row l at 2l), then the block's quants as 4-byte
//     groups g (eight for Q8_0, four for Q4_0), each 32 bytes holding rows
//     0-7's group g (row l at 16 + 32g + 4l).
//
// The K-quants Q4_K, Q5_K and Q6_K take the same rule (x8Segments): each piece
// of a GGML block, an F16 field or a four-byte word, of s bytes at offset
// o, lands for row l at 8·o + s·l of the group's block. Their kernels
// (kquantx8_amd64.s) then read a super-block's scales of eight rows from
// three or four vectors and its quants as words of eight rows, so one pass
// of a word serves eight rows where the row-major kernels spent it on one.
//
// One load is then 4-byte group g of all eight rows, lane l = row l (what
// the transposition built), one VCVTPH2PS the eight scales, and a pass over
// a run of groups reads one sequential stream. For Q4_0, group g's bytes
// hold values 4g to 4g+3 in their low nibbles and 4g+16 to 4g+19 in their
// high ones, so one load gives two groups of nibbles. It is a layout only:
// every kernel computes the same integers and the same roundings
// (canon.go), so results are bit for bit those of the row-major layout.
const (
	x8Rows  = 8           // weight rows per group
	x8Block = 8 * q8Bytes // bytes per group and block, Q8_0
	x4Block = 8 * q4Bytes // bytes per group and block, Q4_0
)

// x8Layout says whether Weights repacks the types of x8BlockBytes into the ×8
// layout. It is set by useAsm: on where the assembly multi-row kernels run;
// tests switch it with useX8Layout to cover both layouts on any kernel set.
var x8Layout bool

// q4X8VNNI says whether the ×8 Q4_0 kernel is the AVX-512 VNNI one (set by
// useAsm where the CPU has it; tests switch it to cover the AVX2 one too).
var q4X8VNNI bool

// x8Bias says whether Weights stores Q8_0 weights in the ×8 layout biased:
// each quant byte as w+128 (w XOR 0x80; w = −128 becomes 0), the form
// VPDPBUSD takes as its unsigned operand, with the activations as they are
// for its signed one (dotQ8X8BRowsN). useAsm sets it where that kernel
// is the AVX-512 VNNI one; AVX2's VPMADDUBSW would saturate on such bytes.
// It is a property of each tensor made under it (Tensor.x8b),
// read by every reader of its bytes, so kernel sets may change after.
var x8Bias bool

// useX8Bias sets x8Bias and returns the previous value; like useX8Layout
// it affects tensors made after it. Tests use it to make biased weights
// for the Go kernels on CPUs that would not bias them.
func useX8Bias(on bool) bool {
	old := x8Bias
	x8Bias = on
	return old
}

// x8Flip is what a Q8_0 quant byte of t's ×8 bytes is XORed with to give
// the signed value: 0x80 where they are biased.
func (t *Tensor) x8Flip() byte {
	if t.x8b {
		return 0x80
	}
	return 0
}

// biasX8 biases the Q8_0 quant bytes of the whole ×8 groups in p.
func biasX8(p []byte) {
	for len(p) >= x8Block {
		q := p[16:x8Block]
		for i := 0; i+8 <= len(q); i += 8 {
			binary.LittleEndian.PutUint64(q[i:], binary.LittleEndian.Uint64(q[i:])^0x8080808080808080)
		}
		p = p[x8Block:]
	}
}

// useX8Layout sets x8Layout and returns the previous value. Like useAsm it
// must not be called while a backend is running; it affects tensors made
// after it.
func useX8Layout(on bool) bool {
	old := x8Layout
	x8Layout = on
	return old
}

// x8Groups returns how many row groups rows rows take.
func x8Groups(rows int) int { return (rows + x8Rows - 1) / x8Rows }

// x8BlockBytes returns the block size of dt in GGML's layout, for the
// types the ×8 layout takes, and 0 for the others.
func x8BlockBytes(dt kernels.DType) int {
	switch dt {
	case kernels.Q8_0:
		return q8Bytes
	case kernels.Q4_0:
		return q4Bytes
	case kernels.Q4_K:
		return q4KBytes
	case kernels.Q5_K:
		return q5KBytes
	case kernels.Q6_K:
		return q6KBytes
	}
	return 0
}

// x8Segments calls f for each piece of a GGML block of dt, in order: the
// F16 fields (two bytes) and the four-byte words between them. A piece of
// s bytes at offset o of row l's block lands at 8·o + s·l of the group's
// block, so the eight rows' copies of a piece sit side by side: an F16
// field becomes eight scales for one VCVTPH2PS, a word one 32-byte vector,
// lane l = row l.
func x8Segments(dt kernels.DType, f func(o, s int)) {
	bb := x8BlockBytes(dt)
	var f16s []int // offsets of the F16 fields
	switch dt {
	case kernels.Q8_0, kernels.Q4_0:
		f16s = []int{0}
	case kernels.Q4_K, kernels.Q5_K:
		f16s = []int{0, 2}
	case kernels.Q6_K:
		f16s = []int{bb - 2}
	}
	for o := 0; o < bb; {
		if len(f16s) > 0 && f16s[0] == o {
			f(o, 2)
			o, f16s = o+2, f16s[1:]
			continue
		}
		f(o, 4)
		o += 4
	}
}

// x8BlockElems returns the number of values one block of dt holds.
func x8BlockElems(dt kernels.DType) int { return dt.BlockElems() }

// packX8 returns rows rows of nb blocks of dt each, row r in GGML's layout
// at row(r), in the ×8 layout, in a new allocation.
func packX8(dt kernels.DType, rows, nb int, row func(r int) []byte) []byte {
	out := make([]byte, x8Groups(rows)*nb*8*x8BlockBytes(dt))
	packX8Rows(out, dt, 0, rows, nb, row)
	return out
}

// packX8Rows lays rows [lo, hi) out into out, the whole tensor's ×8 bytes.
func packX8Rows(out []byte, dt kernels.DType, lo, hi, nb int, row func(r int) []byte) {
	bb := x8BlockBytes(dt)
	gb := 8 * bb
	var segs [64][2]int
	ns := 0
	x8Segments(dt, func(o, s int) { segs[ns] = [2]int{o, s}; ns++ })
	for r := lo; r < hi; r++ {
		src := row(r)[:nb*bb]
		g := out[r/x8Rows*nb*gb:]
		l := r % x8Rows
		for b := range nb {
			blk, dst := src[b*bb:(b+1)*bb], g[b*gb:(b+1)*gb]
			for _, sg := range segs[:ns] {
				o, s := sg[0], sg[1]
				copy(dst[8*o+s*l:8*o+s*l+s], blk[o:o+s])
			}
		}
	}
}

// x8PackTask lays a weight's rows out across the workers.
type x8PackTask struct {
	out  []byte
	t    *Tensor
	bias bool // Q8_0 quants stored as w+128 (x8Bias)
}

func (p *x8PackTask) run(_, lo, hi int) {
	nb := p.t.cols / x8BlockElems(p.t.dt)
	packX8Rows(p.out, p.t.dt, lo*x8Rows, min(hi*x8Rows, p.t.rows), nb, p.t.rawRow)
	if p.bias {
		gb := nb * x8Block
		biasX8(p.out[lo*gb : hi*gb])
	}
}

// unpackX8Row writes row r of the ×8 bytes p (nb blocks of dt a row) into
// dst in GGML's layout.
func unpackX8Row(dst, p []byte, dt kernels.DType, nb, r int) {
	bb := x8BlockBytes(dt)
	gb := 8 * bb
	g := p[r/x8Rows*nb*gb:]
	l := r % x8Rows
	for b := range nb {
		src, blk := g[b*gb:(b+1)*gb], dst[b*bb:(b+1)*bb]
		x8Segments(dt, func(o, s int) { copy(blk[o:o+s], src[8*o+s*l:8*o+s*l+s]) })
	}
}

// convertRowX8 decodes row r of the ×8 bytes p of type dt into dst, as
// convertRow decodes a row: the same products, so the same bits. Q8_0
// quant bytes are XORed with flip first (0x80 where they are biased).
func convertRowX8(dst []float32, dt kernels.DType, p []byte, r int, flip byte) {
	if dt != kernels.Q8_0 && dt != kernels.Q4_0 {
		convertRowX8K(dst, dt, p, r)
		return
	}
	nb := len(dst) / kernels.QK
	bb := x8BlockBytes(dt)
	gb := 8 * bb
	g := p[r/x8Rows*nb*gb:]
	l := r % x8Rows
	for b := range nb {
		src := g[b*gb : (b+1)*gb]
		d := f16(src[2*l:])
		out := dst[b*32 : b*32+32]
		for q := range (bb - 2) / 4 {
			for c := range 4 {
				v := src[16+32*q+4*l+c]
				if dt == kernels.Q8_0 {
					out[4*q+c] = d * float32(int8(v^flip))
					continue
				}
				out[4*q+c] = d * float32(int(v&15)-8)
				out[4*q+c+16] = d * float32(int(v>>4)-8)
			}
		}
	}
}

// convertRowX8K is convertRowX8 for the K-quants: each block is put back
// in GGML's layout and decoded as convertRow decodes it.
func convertRowX8K(dst []float32, dt kernels.DType, p []byte, r int) {
	var blk [q6KBytes]byte
	bb, be := x8BlockBytes(dt), x8BlockElems(dt)
	nb := len(dst) / be
	gb := 8 * bb
	g := p[r/x8Rows*nb*gb:]
	l := r % x8Rows
	for b := range nb {
		src := g[b*gb : (b+1)*gb]
		x8Segments(dt, func(o, s int) { copy(blk[o:o+s], src[8*o+s*l:8*o+s*l+s]) })
		// What convertRow does for these types, called here directly so
		// that blk stays on the stack.
		if err := kernels.Dequantize(dt, blk[:bb], dst[b*be:(b+1)*be]); err != nil {
			panic("cpu: cannot convert " + dt.String() + ": " + err.Error())
		}
	}
}

// packWeights lays the Q8_0, Q4_0 or K-quant tensor t out in the ×8 layout when
// x8Layout is on, group by group across the workers; its bytes become an
// allocation of its own, and the caller's are no longer referenced.
func (b *Backend) packWeights(t *Tensor) {
	if !x8Layout || x8BlockBytes(t.dt) == 0 || t.x8 || t.cols == 0 {
		return
	}
	groups := x8Groups(t.rows)
	bias := x8Bias && t.dt == kernels.Q8_0
	p := &x8PackTask{out: make([]byte, groups*t.rowBytes*x8Rows), t: t, bias: bias}
	if b.closed {
		p.run(0, 0, groups) // no workers left to share it
	} else {
		b.pool.run(p, groups, max(1, groups/(4*b.threads)))
	}
	t.raw, t.x8, t.x8b, t.owned = p.out, true, bias, true
}

// sliceX8 returns rows [r0, r1) of the ×8 tensor s: a view of its groups
// when r0 starts one, else the rows copied and packed anew (a weight sliced
// off a fused one, once at load).
func sliceX8(s *Tensor, r0, r1 int) *Tensor {
	v := *s
	v.rows = r1 - r0
	nb, bb := s.cols/x8BlockElems(s.dt), x8BlockBytes(s.dt)
	if r0%x8Rows == 0 {
		// The view keeps the whole last group: the kernels read groups
		// whole, and the rows past r1 are the parent's, never written.
		gb := nb * 8 * bb
		v.raw = s.raw[r0/x8Rows*gb : x8Groups(r1)*gb : x8Groups(r1)*gb]
		return &v
	}
	// Unpacking and packing move bytes without changing them, so biased
	// quants stay biased. The padding rows' quants are biased too, to the
	// bytes packWeights gives them: the same bytes as the tensor made
	// from these rows alone.
	row := make([]byte, s.rowBytes)
	v.raw = packX8(s.dt, v.rows, nb, func(r int) []byte {
		unpackX8Row(row, s.raw, s.dt, nb, r0+r)
		return row
	})
	if pad := v.rows % x8Rows; s.x8b && pad != 0 {
		last := v.raw[(x8Groups(v.rows)-1)*nb*x8Block:]
		for b := range nb {
			for g := range 8 {
				q := last[b*x8Block+16+32*g:]
				for i := 4 * pad; i < 32; i++ {
					q[i] = 0x80
				}
			}
		}
	}
	return &v
}

// groupBytes returns the ×8 bytes of weight rows [lo, hi) of t, lo a
// multiple of x8Rows: whole groups, the last one's rows past hi included.
func (t *Tensor) groupBytes(lo, hi int) []byte {
	if lo%x8Rows != 0 {
		panic(fmt.Sprintf("cpu: rows [%d, %d) of a ×8 tensor do not start a group", lo, hi))
	}
	gb := t.cols / x8BlockElems(t.dt) * 8 * x8BlockBytes(t.dt)
	return t.raw[lo/x8Rows*gb : x8Groups(hi)*gb]
}

// dotQ8X8Go returns the dot product of row l of the ×8 Q8_0 group g (nb
// blocks) with one quantized activation row: dotQ8Go's arithmetic.
func dotQ8X8Go(g []byte, l, nb int, xq []int8, xd []float32) float32 {
	return dotQ8X8FlipGo(g, l, nb, xq, xd, 0)
}

// dotQ8X8BGo is dotQ8X8Go for biased groups.
func dotQ8X8BGo(g []byte, l, nb int, xq []int8, xd []float32) float32 {
	return dotQ8X8FlipGo(g, l, nb, xq, xd, 0x80)
}

// dotQ8X8FlipGo is dotQ8X8Go on quant bytes XORed with flip.
func dotQ8X8FlipGo(g []byte, l, nb int, xq []int8, xd []float32, flip byte) float32 {
	var acc float32
	for b := range nb {
		blk := g[b*x8Block : (b+1)*x8Block]
		x := xq[b*32 : b*32+32]
		var s int32
		for q := range 8 {
			for c := range 4 {
				s += int32(int8(blk[16+32*q+4*l+c]^flip)) * int32(x[4*q+c])
			}
		}
		acc = qblock(acc, s, f16(blk[2*l:]), xd[b])
	}
	return acc
}

// dotQ4X8Go is dotQ8X8Go for a Q4_0 group: dotQ4Go's arithmetic.
func dotQ4X8Go(g []byte, l, nb int, xq []int8, xd []float32) float32 {
	var acc float32
	for b := range nb {
		blk := g[b*x4Block : (b+1)*x4Block]
		x := xq[b*32 : b*32+32]
		var s int32
		for q := range 4 {
			for c := range 4 {
				v := blk[16+32*q+4*l+c]
				s += (int32(v&15) - 8) * int32(x[4*q+c])
				s += (int32(v>>4) - 8) * int32(x[4*q+c+16])
			}
		}
		acc = qblock(acc, s, f16(blk[2*l:]), xd[b])
	}
	return acc
}

// dotQ8X8RowsN sets out[a*os+r] to the dot product of row r of the ×8
// Q8_0 groups w with activation row a (laid out as for dotQ8RowsN), for
// r < m and a < na ≤ maxRowsN. w holds the groups of the m rows, whole.
// dotQ4X8RowsN is the same for Q4_0 groups; it takes the rows' blockSums8
// xc as dotQ4RowsN does.
var (
	dotQ8X8RowsN func(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int)
	dotQ4X8RowsN func(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int)
	// dotQ8X8BRowsN is dotQ8X8RowsN for biased groups (x8Bias), xc
	// holding −128·Σx of each activation block (blockSumsB), laid out as
	// xd: what Σ(w+128)·x exceeds Σw·x by, taken off.
	dotQ8X8BRowsN func(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int)
)

func dotQ8X8RowsNGo(w []byte, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	rowsX8Go(dotQ8X8Go, x8Block, w, m, nb, na, xq, xd, out, os)
}

func dotQ8X8BRowsNGo(w []byte, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	rowsX8Go(dotQ8X8BGo, x8Block, w, m, nb, na, xq, xd, out, os)
}

func dotQ4X8RowsNGo(w []byte, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	rowsX8Go(dotQ4X8Go, x4Block, w, m, nb, na, xq, xd, out, os)
}

func rowsX8Go(dot func([]byte, int, int, []int8, []float32) float32, blockBytes int,
	w []byte, m, nb, na int, xq []int8, xd []float32, out []float32, os int) {
	for a := range na {
		x, d := xq[a*nb*32:(a+1)*nb*32], xd[a*nb:(a+1)*nb]
		for r := range m {
			out[a*os+r] = dot(w[r/x8Rows*nb*blockBytes:], r%x8Rows, nb, x, d)
		}
	}
}
