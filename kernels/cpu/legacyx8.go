package cpu

import (
	"encoding/binary"

	"github.com/specgate/specgate/kernels"
)

// Q5_0, IQ4_NL, Q4_1 and Q5_1 batches on the Q8_0 kernels.
//
// A block of these types is 32 small integers, one F16 scale and, for Q4_1
// and Q5_1, an F16 minimum, computed against a Q8_0 (Q8_1) activation block
// by the same rule as a Q8_0 weight block (canon.go): one exact integer
// sum, one fused step; the minimum's term in a sum of its own, added last.
// The values fit in int8 (Q5_0's −16..15; IQ4_NL's table, −127..113;
// Q4_1's and Q5_1's 0..31), so the block rewritten as Q8_0 (the values as
// bytes, the scale as it is) gives every output the same bits. For a
// batch, each chunk of weight rows is so rewritten once, in the ×8 layout
// (pack.go), into the worker's scratch, and the batch then runs on the ×8
// Q8_0 multi-row kernels, the fastest the CPU has (VNNI on hosts that have
// it), instead of decoding every block again for each activation row or
// eight. The minimums go to a scratch of their own, and their sums are
// added to the kernel's results (addMinsX8). The weights stay in their
// own type in memory: a chunk's rewrite is the size of a few dozen rows.
//
// The batches from which the rewrite pays; smaller ones (decode, a few
// streams) take the types' own kernels, which give the same bits. The
// rewrite costs 0.02-0.05 ns a weight on a Zen 5 core (BenchmarkExpandX8:
// 20-50 weights/ns, 0.6-1 in Go), a pass over the weights the price of a
// few activation rows. On ~100M models at one thread, tokens/s: Q5_0,
// whose own kernel takes eight activation rows a pass (as IQ4_NL's does),
// 4 rows about even, 8 rows 440-500 against 356, 128 rows 1240 against
// 372; Q4_1 and Q5_1, whose own kernels take one, 2 rows about even, 3
// rows 269-288 against 189-234, 128 rows 1029-1081 against 209-280.
const (
	legacyX8MinRowsN = 6 // Q5_0, IQ4_NL
	legacyX8MinRows1 = 3 // Q4_1, Q5_1
)

// legacyX8 reports whether a batch of n rows against weights of type dt
// runs on the Q8_0 kernels.
func legacyX8(dt kernels.DType, n int) bool {
	switch dt {
	case kernels.Q5_0, kernels.IQ4_NL:
		return n >= legacyX8MinRowsN
	case kernels.Q4_1, kernels.Q5_1:
		return n >= legacyX8MinRows1
	}
	return false
}

// legacyX8Act reports whether a batch of n rows quantized in format f runs
// on the Q8_0 kernels (legacyX8 of the types of f).
func legacyX8Act(f actFormat, n int) bool {
	return f == actQ8_0 && legacyX8(kernels.Q5_0, n) || f == actQ8_1 && legacyX8(kernels.Q4_1, n)
}

// hasMins reports whether dt's blocks have a minimum (Q4_1, Q5_1).
func hasMins(dt kernels.DType) bool { return dt == kernels.Q4_1 || dt == kernels.Q5_1 }

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
	var mins []float32
	if hasMins(t.w.dt) {
		mins = sc.floats(x8Groups(hi-lo) * nb * x8Rows)
	}
	flip, rows := byte(0), dotQ8X8RowsN
	if x8Bias {
		flip, rows = 0x80, dotQ8X8BRowsN
	}
	expandRowsX8(g, mins, t.w.dt, t.w.raw[lo*t.w.rowBytes:], t.w.rowBytes, hi-lo, nb, flip)
	out := t.dst.f32
	for r := 0; r < n; {
		na := rowsSplit(n - r)
		var xc []int32
		if x8Bias {
			xc = t.a.c[r*nb : (r+na)*nb]
		}
		rows(g, hi-lo, nb, na, t.a.q[r*k:(r+na)*k], t.a.d[r*nb:(r+na)*nb], xc, out[r*m+lo:], m)
		if mins != nil {
			addMinsX8(mins, nb, t.a.s[r*nb:(r+na)*nb], na, out[r*m+lo:], m, hi-lo)
		}
		r += na
	}
}

// addMinsX8Groups, where the CPU has it, is addMinsX8 for whole groups of
// eight rows (addMinsX8AVX), strides in bytes.
var addMinsX8Groups func(mins *float32, nb int, s *float32, ss, na int, out *float32, os, ngroups int)

// addMinsX8 adds to out[a·os + r] the minimums' sum of weight row r (of m,
// its minimums as expandX8 wrote them) against activation row a (its
// blocks' d·Σq at s[a·nb:]), for a < na: Σ m·s_x over the blocks in order
// from +0, each product rounded, then added, as the references keep it.
func addMinsX8(mins []float32, nb int, s []float32, na int, out []float32, os, m int) {
	g := m / x8Rows
	if f := addMinsX8Groups; f != nil && g > 0 && nb > 0 {
		_, _, _ = mins[g*nb*x8Rows-1], s[na*nb-1], out[(na-1)*os+x8Rows*g-1]
		f(&mins[0], nb, &s[0], 4*nb, na, &out[0], 4*os, g)
	} else {
		g = 0
	}
	for r := x8Rows * g; r < m; r++ {
		mr := mins[r/x8Rows*nb*x8Rows+r%x8Rows:]
		for a := range na {
			var summ float32
			for b, sx := range s[a*nb : (a+1)*nb] {
				summ += float32(mr[b*x8Rows] * sx)
			}
			out[a*os+r] += summ
		}
	}
}

// expandKernel rewrites whole groups of eight rows as expandX8 does: c
// is the four bytes it adds to the values (flip−16 for Q5_0, whose values
// it takes as 0..31; flip for Q4_1 and Q5_1) or XORs with IQ4_NL's (flip),
// mins where the minimums go (nil for types without).
type expandKernel func(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)

// expandX8Groups holds, per type, the kernel of expandKernel where the
// CPU has one.
var expandX8Groups map[kernels.DType]expandKernel

// expandRowsX8 is expandX8 by the type's kernel for the whole groups, where
// there is one.
func expandRowsX8(dst []byte, mins []float32, dt kernels.DType, w []byte, rb, m, nb int, flip byte) {
	f, g := expandX8Groups[dt], m/x8Rows
	if f == nil || g == 0 || nb == 0 {
		expandX8(dst, mins, dt, w, rb, m, nb, flip)
		return
	}
	bb, c := dt.BlockBytes(), flip
	if dt == kernels.Q5_0 {
		c = flip - 16
	}
	if rb < nb*bb {
		panic("cpu: weight rows overlap")
	}
	_, _ = dst[g*nb*x8Block-1], w[(x8Rows*g-1)*rb+nb*bb-1]
	var mp *float32
	if hasMins(dt) {
		_ = mins[g*nb*x8Rows-1]
		mp = &mins[0]
	}
	f(&dst[0], &w[0], rb, nb, g, uint32(c)*0x01010101, mp)
	if m > x8Rows*g {
		if mins != nil {
			mins = mins[g*nb*x8Rows:]
		}
		expandX8(dst[g*nb*x8Block:], mins, dt, w[x8Rows*g*rb:], rb, m-x8Rows*g, nb, flip)
	}
}

// expandX8 writes m weight rows of type dt (a type of legacyX8, GGML's
// layout, rb bytes apart from w on, nb blocks each) into dst as Q8_0 in
// the ×8 layout, each quant byte XORed with flip (0x80 for biased groups,
// x8Bias), and for Q4_1 and Q5_1 their minimums into mins as floats, row r
// of block b of group G at (G·nb + b)·8 + r mod 8. The rows that pad the
// last group are zeros, scale and minimum +0.
func expandX8(dst []byte, mins []float32, dt kernels.DType, w []byte, rb, m, nb int, flip byte) {
	bb := dt.BlockBytes()
	for r := range m {
		src := w[r*rb:]
		grp := dst[r/x8Rows*nb*x8Block:]
		l := r % x8Rows
		for b := range nb {
			blk := grp[b*x8Block : (b+1)*x8Block]
			s := src[b*bb : (b+1)*bb]
			copy(blk[2*l:2*l+2], s[:2])
			if hasMins(dt) {
				mins[(r/x8Rows*nb+b)*x8Rows+l] = kernels.F16ToF32(binary.LittleEndian.Uint16(s[2:]))
			}
			// The values as the Go references decode them.
			var v [32]byte
			switch dt {
			case kernels.Q5_0:
				h := binary.LittleEndian.Uint32(s[2:])
				for j := range v {
					v[j] = byte(q5(s[6:22], h, j) - 16)
				}
			case kernels.IQ4_NL:
				for j, c := range s[2:18] {
					v[j], v[j+16] = byte(kernels.IQ4NLValues[c&15]), byte(kernels.IQ4NLValues[c>>4])
				}
			case kernels.Q4_1:
				for j, c := range s[4:20] {
					v[j], v[j+16] = c&15, c>>4
				}
			case kernels.Q5_1:
				h := binary.LittleEndian.Uint32(s[4:])
				for j := range v {
					v[j] = byte(q5(s[8:24], h, j))
				}
			default:
				panic("cpu: expandX8 of " + dt.String())
			}
			for j := range 8 {
				q := blk[16+32*j+4*l : 16+32*j+4*l+4]
				for i := range q {
					q[i] = v[4*j+i] ^ flip
				}
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
			if hasMins(dt) {
				clear(mins[(m/x8Rows*nb+b)*x8Rows+pad : (m/x8Rows*nb+b+1)*x8Rows])
			}
		}
	}
}
