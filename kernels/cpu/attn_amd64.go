//go:build amd64 && !noasm

package cpu

// The AVX2/F16C kernels of attn_amd64.s: the F16 cache's head loops over a
// run of positions and its conversion, and the softmax passes. The wrappers check bounds
// once, so the assembly can trust its lengths, and send shapes the assembly
// does not take (head widths or lengths that are not whole 8-lane vectors)
// to the Go kernels.

// setAttnAsm selects them; setAsm calls it, and haveAsm (AVX2, FMA, F16C)
// covers what they use.
func setAttnAsm() {
	dotsF16, axpysF16 = dotsF16Asm, axpysF16Asm
	f32ToF16Row = f32ToF16RowAsm
	colMax, expSub = colMaxAsm, expSubAsm
	ropeHalves, ropePairs = ropeHalvesAsm, ropePairsAsm
	groupedG2 = true
}

//go:noescape
func dotsF16AVX(q *float32, k *uint16, out *float32, hdb, nh, group, npos, strideb, ostride int)

//go:noescape
func axpysF16AVX(y, w *float32, v *uint16, hdb, nh, group, npos, strideb, wstride int)

//go:noescape
func dots8F16AVX(q *float32, k *uint16, out *float32, hdb, nh, group, npos, strideb, ostride int)

//go:noescape
func axpys8F16AVX(y, w *float32, v *uint16, hdb, nh, group, npos, strideb, wstride int)

//go:noescape
func f32ToF16AVX(dst *uint16, src *float32, n int)

//go:noescape
func colMaxAVX(s, m *float32, width, stretches int)

//go:noescape
func expSubAVX(s, p, sum *float32, width, stretches int)

//go:noescape
func colMaxRowsAVX(s, m *float32, width, stretches int)

//go:noescape
func expSubRowsAVX(s, p, sum *float32, width, stretches int)

// softmaxRowsWidth is the narrowest stretch (in floats: 8 positions of
// width/8 heads) the softmax passes take along the scores rather than down
// their columns; at 1 KiB and more a column's stride starts to fall in few
// L1 sets. Either way gives the same bits.
const softmaxRowsWidth = 256

func dotsF16Asm(q []float32, k []uint16, hd, group, stride int, out []float32) {
	if hd <= 0 || hd%8 != 0 || group <= 0 || stride < 0 || len(q) < hd {
		dotsF16Go(q, k, hd, group, stride, out)
		return
	}
	nh := len(q) / hd
	npos := len(out) / nh
	if npos == 0 {
		return
	}
	_, _ = k[(npos-1)*stride+((nh-1)/group+1)*hd-1], out[npos*nh-1]
	if hd == 8 && nh%group == 0 {
		dots8F16AVX(&q[0], &k[0], &out[0], 2*hd, nh, group, npos, 2*stride, 4*nh)
		return
	}
	dotsF16AVX(&q[0], &k[0], &out[0], 2*hd, nh, group, npos, 2*stride, 4*nh)
}

func axpysF16Asm(y, w []float32, v []uint16, hd, group, stride int) {
	if hd <= 0 || hd%8 != 0 || group <= 0 || stride < 0 || len(y) < hd {
		axpysF16Go(y, w, v, hd, group, stride)
		return
	}
	nh := len(y) / hd
	npos := len(w) / nh
	if npos == 0 {
		return
	}
	_, _ = v[(npos-1)*stride+((nh-1)/group+1)*hd-1], w[npos*nh-1]
	if hd == 8 && nh%group == 0 {
		axpys8F16AVX(&y[0], &w[0], &v[0], 2*hd, nh, group, npos, 2*stride, 4*nh)
		return
	}
	axpysF16AVX(&y[0], &w[0], &v[0], 2*hd, nh, group, npos, 2*stride, 4*nh)
}

func f32ToF16RowAsm(dst []uint16, src []float32) {
	n := len(dst)
	src = src[:n]
	m := n &^ 7
	if m > 0 {
		f32ToF16AVX(&dst[0], &src[0], m)
	}
	for i := m; i < n; i++ {
		dst[i] = f32ToF16(src[i])
	}
}

func colMaxAsm(s, m []float32) {
	w := len(m)
	if w == 0 || w%8 != 0 || len(s) == 0 || len(s)%w != 0 {
		colMaxGo(s, m)
		return
	}
	if w >= softmaxRowsWidth {
		colMaxRowsAVX(&s[0], &m[0], w, len(s)/w)
		return
	}
	colMaxAVX(&s[0], &m[0], w, len(s)/w)
}

func expSubAsm(s, p, sum []float32) {
	w := len(p)
	if w == 0 || w%8 != 0 || len(s) == 0 || len(s)%w != 0 {
		expSubGo(s, p, sum)
		return
	}
	_ = sum[w-1]
	if w >= softmaxRowsWidth {
		expSubRowsAVX(&s[0], &p[0], &sum[0], w, len(s)/w)
		return
	}
	expSubAVX(&s[0], &p[0], &sum[0], w, len(s)/w)
}

//go:noescape
func ropeHalvesAVX(v, c, s *float32, half int)

//go:noescape
func ropePairsAVX(v, c, s *float32, n int)

// ropeHalvesAsm and ropePairsAsm check bounds once; widths that are not
// whole 8-lane vectors take the Go loops.
func ropeHalvesAsm(v, c, s []float32) {
	half := len(c)
	if half == 0 || half%8 != 0 {
		ropeHalvesGo(v, c, s)
		return
	}
	_, _ = v[2*half-1], s[half-1]
	ropeHalvesAVX(&v[0], &c[0], &s[0], half)
}

func ropePairsAsm(v, c, s []float32) {
	n := len(v)
	if n == 0 || n%8 != 0 {
		ropePairsGo(v, c, s)
		return
	}
	_, _ = c[n-1], s[n-1]
	ropePairsAVX(&v[0], &c[0], &s[0], n)
}

//go:noescape
func spreadF16G2AVX(dst *float32, kv *uint16, slots *int32, npos, strideb int)

//go:noescape
func dotsG2AVX(kx, qt, s *float32, npos, nrows, qrowb, sposb, srowb int)

//go:noescape
func axpysG2AVX(vx, w, acc *float32, npos, nrows, wposb, wrowb int)

// spreadG2 converts, for each slot, the 4 kv heads of 8 halves at
// kv[slot·stride:] and spreads them over a block of 8 query heads into
// dst (64 floats a slot: vector i holds element i of kv heads 0 0 1 1 2 2
// 3 3), the layout dotsG2 and axpysG2 read.
func spreadG2(dst []float32, kv []uint16, slots []int32, stride int) {
	if len(slots) == 0 {
		return
	}
	_ = dst[len(slots)*64-1]
	for _, s := range slots {
		if s < 0 || int(s)*stride+32 > len(kv) {
			panic("cpu: spreadG2: slot out of range")
		}
	}
	spreadF16G2AVX(&dst[0], &kv[0], &slots[0], len(slots), 2*stride)
}

// dotsG2 sets s[r·srow+p·spos+l], for r < nrows and each position p of kx
// (spread keys), to the dot product of head l of row r's block of query
// heads (qt[r·qrow:], transposed: element i of head l at i·8+l) with the
// key it reads: each as dotsF16 forms it, so the bits are the same.
func dotsG2(kx, qt, s []float32, nrows, qrow, spos, srow int) {
	npos := len(kx) / 64
	if npos == 0 || nrows <= 0 {
		return
	}
	_, _ = qt[(nrows-1)*qrow+63], s[(nrows-1)*srow+(npos-1)*spos+7]
	dotsG2AVX(&kx[0], &qt[0], &s[0], npos, nrows, 4*qrow, 4*spos, 4*srow)
}

// axpysG2 adds to each row r's block of outputs (acc[r·64:], transposed:
// element i of head l at i·8+l), in order of position p of vx (spread
// values), w[r·wrow+p·wpos+l] times the value head l reads: the fused
// multiply-adds of axpysF16, so the bits are the same.
func axpysG2(vx, w, acc []float32, wpos, wrow int) {
	npos, nrows := len(vx)/64, len(acc)/64
	if npos == 0 || nrows == 0 {
		return
	}
	_ = w[(nrows-1)*wrow+(npos-1)*wpos+7]
	axpysG2AVX(&vx[0], &w[0], &acc[0], npos, nrows, 4*wpos, 4*wrow)
}

//go:noescape
func transpose8AVX(dst, src *float32, n, dstrideb, sstrideb int)

// transpose8 transposes n blocks of 8×8 floats, dst[k·dstride + j·8+i] =
// src[k·sstride + i·8+j]: the grouped kernels' queries and outputs.
func transpose8(dst, src []float32, n, dstride, sstride int) {
	if n <= 0 {
		return
	}
	_, _ = dst[(n-1)*dstride+63], src[(n-1)*sstride+63]
	transpose8AVX(&dst[0], &src[0], n, 4*dstride, 4*sstride)
}
