package cpu

import (
	"encoding/binary"

	"github.com/specgate/specgate/kernels"
)

// Q5_0 and IQ4_NL batches on the Q8_0 kernels.
//
// A Q5_0 or IQ4_NL block is 32 small integers and one F16 scale, computed
// against a Q8_0 activation block by the same rule as a Q8_0 weight block
// (canon.go): one exact integer sum, one fused step. Its values fit in
// int8 (Q5_0's −16..15; IQ4_NL's table, −127..113), so the block
// rewritten as Q8_0 (the values as bytes, the scale as it is) gives every
// output the same bits. For a batch, each chunk of weight rows is so
// rewritten once, in the ×8 layout (pack.go), into the worker's scratch,
// and the batch then runs on the ×8 Q8_0 multi-row kernels, the fastest
// the CPU has (VNNI on hosts that have it), instead of decoding every
// block again for each eight activation rows. The weights stay in their
// own type in memory: a chunk's rewrite is the size of a few dozen rows.
//
// legacyX8MinRows is the batch from which the rewrite pays; smaller
// batches (decode, a few streams) take the type's own kernels, which give
// the same bits. The rewrite costs 0.03-0.05 ns a weight on a Zen 5 core
// (BenchmarkExpandX8: 22-31 weights/ns, about 1 in Go), a pass over the
// weights the price of a few activation rows: on a ~100M
// Q5_0 model at one thread, 4 rows ran about even, 8 rows at 440-500
// tokens/s against 356 on the type's kernels, 128 rows at 1240 against 372.
var legacyX8MinRows = 6

// legacyX8 reports whether a batch of n rows against weights of type dt
// runs on the Q8_0 kernels.
func legacyX8(dt kernels.DType, n int) bool {
	return (dt == kernels.Q5_0 || dt == kernels.IQ4_NL) && n >= legacyX8MinRows
}

// runLegacyX8 is kMatTask.run for a batch that legacyX8 takes: weight
// rows [lo, hi), rewritten, against every activation row.
func (t *kMatTask) runLegacyX8(wk, lo, hi int) {
	n, m := t.dst.rows, t.dst.cols
	k := t.a.k
	nb := k / kernels.QK
	sc := &t.b.scratch[wk]
	size := x8Groups(hi-lo) * nb * x8Block
	if cap(sc.kx8) < size {
		sc.kx8 = make([]byte, size)
	}
	g := sc.kx8[:size]
	flip, rows := byte(0), dotQ8X8RowsN
	if x8Bias {
		flip, rows = 0x80, dotQ8X8BRowsN
	}
	expandRowsX8(g, t.w.dt, t.w.raw[lo*t.w.rowBytes:], t.w.rowBytes, hi-lo, nb, flip)
	out := t.dst.f32
	for r := 0; r < n; {
		na := rowsSplit(n - r)
		var xc []int32
		if x8Bias {
			xc = t.a.c[r*nb : (r+na)*nb]
		}
		rows(g, hi-lo, nb, na, t.a.q[r*k:(r+na)*k], t.a.d[r*nb:(r+na)*nb], xc, out[r*m+lo:], m)
		r += na
	}
}

// expandX8Groups holds, per type, where the CPU has one, a kernel that
// rewrites whole groups of eight rows as expandX8 does, c the four bytes
// it adds to Q5_0's values 0..31 (flip−16) or XORs with IQ4_NL's (flip).
var expandX8Groups map[kernels.DType]func(dst, w *byte, rb, nb, ngroups int, c uint32)

// expandRowsX8 is expandX8 by the type's kernel for the whole groups, where
// there is one.
func expandRowsX8(dst []byte, dt kernels.DType, w []byte, rb, m, nb int, flip byte) {
	f, g := expandX8Groups[dt], m/x8Rows
	if f == nil || g == 0 || nb == 0 {
		expandX8(dst, dt, w, rb, m, nb, flip)
		return
	}
	bb := q5_0Bytes
	c := flip - 16
	if dt == kernels.IQ4_NL {
		bb, c = iq4NLBytes, flip
	}
	if rb < nb*bb {
		panic("cpu: weight rows overlap")
	}
	_, _ = dst[g*nb*x8Block-1], w[(x8Rows*g-1)*rb+nb*bb-1]
	f(&dst[0], &w[0], rb, nb, g, uint32(c)*0x01010101)
	if m > x8Rows*g {
		expandX8(dst[g*nb*x8Block:], dt, w[x8Rows*g*rb:], rb, m-x8Rows*g, nb, flip)
	}
}

// expandX8 writes m weight rows of type dt (Q5_0 or IQ4_NL, GGML's layout,
// rb bytes apart from w on, nb blocks each) into dst as Q8_0 in the ×8
// layout, each quant byte XORed with flip (0x80 for biased groups,
// x8Bias). The rows that pad the last group are zeros, scale +0.
func expandX8(dst []byte, dt kernels.DType, w []byte, rb, m, nb int, flip byte) {
	f := uint32(flip) * 0x01010101
	for r := range m {
		src := w[r*rb:]
		grp := dst[r/x8Rows*nb*x8Block:]
		l := r % x8Rows
		for b := range nb {
			blk := grp[b*x8Block : (b+1)*x8Block]
			var q [8]uint32
			switch dt {
			case kernels.Q5_0:
				s := src[b*q5_0Bytes : (b+1)*q5_0Bytes]
				copy(blk[2*l:2*l+2], s[:2])
				q = q5_0Words(s)
			case kernels.IQ4_NL:
				s := src[b*iq4NLBytes : (b+1)*iq4NLBytes]
				copy(blk[2*l:2*l+2], s[:2])
				q = iq4NLWords(s)
			default:
				panic("cpu: expandX8 of " + dt.String())
			}
			for j, v := range q {
				binary.LittleEndian.PutUint32(blk[16+32*j+4*l:], v^f)
			}
		}
	}
	if pad := m % x8Rows; pad != 0 {
		grp := dst[m/x8Rows*nb*x8Block:]
		for b := range nb {
			blk := grp[b*x8Block : (b+1)*x8Block]
			clear(blk[2*pad : 16])
			for j := range 8 {
				q := blk[16+32*j : 16+32*j+32]
				for i := 4 * pad; i < 32; i++ {
					q[i] = flip
				}
			}
		}
	}
}

// q5_0Words returns a Q5_0 block's values v−16 as int8 bytes, four a word:
// word j holds values 4j to 4j+3.
func q5_0Words(blk []byte) [8]uint32 {
	h := binary.LittleEndian.Uint32(blk[2:6])
	qs := blk[6:22]
	var q [8]uint32
	for j := range 4 {
		nib := binary.LittleEndian.Uint32(qs[4*j:])
		for half := range 2 {
			v := nib >> (4 * half) & 0x0f0f0f0f
			v |= spreadBits[h>>(16*half+4*j)&15]
			// v−16 in each byte without borrows: the top bit set first,
			// so no byte goes below zero, then flipped back.
			q[4*half+j] = (v | 0x80808080) - 0x10101010 ^ 0x80808080
		}
	}
	return q
}

// spreadBits[b] holds bit i of b as bit 4 of byte i (Q5_0's fifth bits).
var spreadBits = func() (t [16]uint32) {
	for b := range t {
		for i := range 4 {
			if b>>i&1 != 0 {
				t[b] |= 0x10 << (8 * i)
			}
		}
	}
	return t
}()

// iq4NLWords returns an IQ4_NL block's values as int8 bytes, four a word,
// as q5_0Words.
func iq4NLWords(blk []byte) [8]uint32 {
	qs := blk[2:18]
	var q [8]uint32
	for j := range 4 {
		c := qs[4*j : 4*j+4]
		var lo, hi uint32
		for i := range 4 {
			lo |= uint32(uint8(kernels.IQ4NLValues[c[i]&15])) << (8 * i)
			hi |= uint32(uint8(kernels.IQ4NLValues[c[i]>>4])) << (8 * i)
		}
		q[j], q[4+j] = lo, hi
	}
	return q
}
