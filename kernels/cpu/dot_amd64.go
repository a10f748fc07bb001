//go:build amd64 && !noasm

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveAsm reports whether this CPU runs the AVX2 kernels in dot_amd64.s.
var haveAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

func setAsm() {
	dotF32, gemmF32 = dotF32Asm, gemmF32Asm
	if haveF32Z {
		gemmF32Groups = gemmF32GroupsAsm
	}
	dotQ8, dotQ8Rows, dotQ8RowsN = dotQ8Asm, dotQ8RowsAsm, dotQ8RowsNAsm
	dotQ4, dotQ4Rows, dotQ4RowsN = dotQ4Asm, dotQ4RowsAsm, dotQ4RowsNAsm
	dotQ8X8RowsN, dotQ4X8RowsN = dotQ8X8RowsNAsm, dotQ4X8RowsNAsm
	// The ×8 layout on every CPU with these kernels, VNNI ones included.
	// There the multi-row kernel (then one on activations as x+128) cost
	// less than the tiles in GGML's layout (and their one-row kernel) at
	// the batches decoding and speculative verification run: on a Zen 5
	// host, one thread, a ~100M Q8_0 model's matrix products, 1 row took
	// 35% less time, 2 to 6 rows 46-60% less, 8 rows 27% less; on biased
	// weights (dotQ8X8BRowsNAsm) it costs less than any tiles at every
	// batch (tileKernel).
	// The Q4_0 one (dotQ4X8VNNI) against the AVX2 one, on the same host,
	// one thread, a ~100M Q4_0 model's matrix products, both prefetching
	// 4 blocks ahead: 1 row the same, 2 rows 3-7% less time, 3 to 64
	// rows 9-12% less; its deeper prefetch then took 1 row 20-25% less
	// time again (q4x8_vnni_amd64.s). Q4_0 and the K-quants in the ×8
	// layout against GGML's on these CPUs, one thread, 2816×1024 in
	// cache, ×8 time over GGML's at 1 / 4 / 16 / 64 rows: Q4_0 0.46 /
	// 0.26 / 1.02 / 0.94, Q4_K 0.61 / 0.75 / 0.72 / 0.69; a ~100M Q4_K_M
	// model decoded 20-50% faster and prefilled 30-40% faster.
	x8Layout, q4X8VNNI = true, haveVNNI
	if haveVNNI {
		x8Bias, dotQ8X8BRowsN = true, dotQ8X8BRowsNAsm
	}
	axpy, f16Row = axpyAsm, f16RowAsm
	dotsF32, axpysF32 = dotsF32Asm, axpysF32Asm
	setAttnAsm()
}

//go:noescape
func dotsF32AVX(q, k *float32, hd, nh, group int, out *float32)

//go:noescape
func axpysF32AVX(y, w, v *float32, hd, nh, group int)

// dotsF32Asm and axpysF32Asm check bounds once; head widths that are not
// a whole number of 8-lane vectors take the Go loops.
func dotsF32Asm(q, k []float32, hd, group int, out []float32) {
	nh := len(out)
	if nh == 0 || hd == 0 || hd%8 != 0 {
		dotsF32Go(q, k, hd, group, out)
		return
	}
	_, _ = q[nh*hd-1], k[((nh-1)/group+1)*hd-1]
	dotsF32AVX(&q[0], &k[0], hd, nh, group, &out[0])
}

func axpysF32Asm(y, w, v []float32, hd, group int) {
	nh := len(w)
	if nh == 0 || hd == 0 || hd%8 != 0 {
		axpysF32Go(y, w, v, hd, group)
		return
	}
	_, _ = y[nh*hd-1], v[((nh-1)/group+1)*hd-1]
	axpysF32AVX(&y[0], &w[0], &v[0], hd, nh, group)
}

//go:noescape
func dotQ8R8AVX(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int)

//go:noescape
func dotQ4R8AVX(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int, xc *int32)

//go:noescape
func dotQ8TAVX(w *byte, rb int, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ4TAVX(w *byte, rb int, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int, xc *int32)

//go:noescape
func dotQ8X8AVX(w *byte, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ4X8AVX(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ4X8VNNI(w *byte, xq *int8, xs int, xd *float32, xc *int32, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func axpyAVX(y *float32, a float32, x *float32, n int)

//go:noescape
func f16RowAVX(dst *float32, src *byte, n int)

// The wrappers check bounds once, so the assembly can trust its lengths, and
// finish float tails shorter than one 8-lane vector.

func dotQ8Asm(w []byte, xq []int8, xd []float32) float32 {
	var out [1]float32
	dotQ8RowsAsm(w, 0, xq, xd, out[:])
	return out[0]
}

func dotQ8RowsAsm(w []byte, rb int, xq []int8, xd []float32, out []float32) {
	rowsR8(rowKern{}, q8Bytes, w, rb, xq, xd, out)
}

func dotQ4Asm(w []byte, xq []int8, xd []float32) float32 {
	var out [1]float32
	dotQ4RowsAsm(w, 0, xq, xd, out[:])
	return out[0]
}

// dotQ4RowsAsm computes the activation row's blockSums8 itself; MatMul
// has them already and calls dotQ4RowsNAsm.
func dotQ4RowsAsm(w []byte, rb int, xq []int8, xd []float32, out []float32) {
	xc := make([]int32, len(xd))
	blockSums8(xc, xq)
	dotQ4RowsNAsm(w, rb, len(out), len(xd), 1, xq, xd, xc, out, len(out))
}

// rowKern picks the row-major kernels of one weight type: Q4_0's, with
// the activations' corrections xc (checked by the caller), when xc is
// set, else Q8_0's. A struct with methods, not a function value, so that
// the scratch rowsR8 and rowsT pass to a kernel does not escape to the
// heap on every call.
type rowKern struct{ xc *int32 }

func (k rowKern) r8(w *byte, rb int, xq *int8, xd *float32, nb int, out *float32, ngroups int) {
	if k.xc != nil {
		dotQ4R8AVX(w, rb, xq, xd, nb, out, ngroups, k.xc)
		return
	}
	dotQ8R8AVX(w, rb, xq, xd, nb, out, ngroups)
}

func (k rowKern) t(w *byte, rb int, xq *int8, xs int, xd *float32, nb int, out *float32, os int, ngroups, na int) {
	if k.xc != nil {
		dotQ4TAVX(w, rb, xq, xs, xd, nb, out, os, ngroups, na, k.xc)
		return
	}
	dotQ8TAVX(w, rb, xq, xs, xd, nb, out, os, ngroups, na)
}

// rowsR8 runs an eight-row kernel over len(out) weight rows: whole groups
// of eight in one call; a last partial group as the eight rows ending at
// the last (results kept for the new ones), or, with fewer than eight rows
// in all, each row alone as all eight lanes (stride 0). Lanes never mix,
// so a row's result is the same in any of these.
func rowsR8(k rowKern, blockBytes int, w []byte, rb int, xq []int8, xd []float32, out []float32) {
	n, nb := len(out), len(xd)
	if n == 0 {
		return
	}
	if nb == 0 {
		clear(out)
		return
	}
	_, _ = w[(n-1)*rb+nb*blockBytes-1], xq[nb*32-1]
	g := n / 8
	if g > 0 {
		k.r8(&w[0], rb, &xq[0], &xd[0], nb, &out[0], g)
	}
	t := n - 8*g
	if t == 0 {
		return
	}
	var o [8]float32
	if g > 0 {
		k.r8(&w[(n-8)*rb], rb, &xq[0], &xd[0], nb, &o[0], 1)
		copy(out[8*g:], o[8-t:])
		return
	}
	for r := range n {
		k.r8(&w[r*rb], 0, &xq[0], &xd[0], nb, &o[0], 1)
		out[r] = o[0]
	}
}

func dotQ8RowsNAsm(w []byte, rb, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	if na == 1 {
		rowsR8(rowKern{}, q8Bytes, w, rb, xq[:nb*32], xd[:nb], out[:m])
		return
	}
	rowsT(rowKern{}, q8Bytes, w, rb, m, nb, na, xq, xd, out, os)
}

func dotQ4RowsNAsm(w []byte, rb, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int) {
	if m == 0 || na == 0 || nb == 0 {
		rowsT(rowKern{}, q4Bytes, w, rb, m, nb, na, xq, xd, out, os) // nothing to run, or zeros to store
		return
	}
	_ = xc[na*nb-1]
	k := rowKern{xc: &xc[0]}
	if na == 1 {
		rowsR8(k, q4Bytes, w, rb, xq[:nb*32], xd[:nb], out[:m])
		return
	}
	rowsT(k, q4Bytes, w, rb, m, nb, na, xq, xd, out, os)
}

// rowsT runs a transposed multi-row kernel over m weight rows and na
// activation rows, splitting the weight rows as rowsR8 does. One
// activation row takes the eight-row kernel instead: the transposition
// costs more than it saves when only one row shares it.
func rowsT(k rowKern, blockBytes int, w []byte, rb, m, nb, na int, xq []int8, xd []float32, out []float32, os int) {
	if m == 0 || na == 0 {
		return
	}
	if na > maxRowsN {
		panic("cpu: too many activation rows for one multi-row kernel call")
	}
	if nb == 0 {
		for a := range na {
			clear(out[a*os : a*os+m])
		}
		return
	}
	_, _, _, _ = w[(m-1)*rb+nb*blockBytes-1], xq[na*nb*32-1], xd[na*nb-1], out[(na-1)*os+m-1]
	g := m / 8
	if g > 0 {
		k.t(&w[0], rb, &xq[0], nb*32, &xd[0], nb, &out[0], 4*os, g, na)
	}
	t := m - 8*g
	if t == 0 {
		return
	}
	var o [maxRowsN * 8]float32
	if g > 0 {
		k.t(&w[(m-8)*rb], rb, &xq[0], nb*32, &xd[0], nb, &o[0], 32, 1, na)
		for a := range na {
			copy(out[a*os+8*g:a*os+m], o[a*8+8-t:a*8+8])
		}
		return
	}
	for r := range m {
		k.t(&w[r*rb], 0, &xq[0], nb*32, &xd[0], nb, &o[0], 32, 1, na)
		for a := range na {
			out[a*os+r] = o[a*8]
		}
	}
}

// dotQ8X8RowsNAsm runs dotQ8X8AVX over m rows (runX8); VNNI CPUs store
// Q8_0 weights biased, for dotQ8X8BRowsNAsm.
func dotQ8X8RowsNAsm(w []byte, m, nb, na int, xq []int8, xd []float32, _ []int32, out []float32, os int) {
	if !x8Check(w, x8Block, m, nb, na, len(xq), xd, nil, out, os) {
		return
	}
	c := x8Call{xq: &xq[0], xd: &xd[0], nb: nb, na: na}
	runX8(&c, w, x8Block, m, out, os)
}

// dotQ8X8BRowsNAsm runs dotQ8X8BVNNI over m rows (runX8).
func dotQ8X8BRowsNAsm(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int) {
	if !x8Check(w, x8Block, m, nb, na, len(xq), xd, xc, out, os) {
		return
	}
	c := x8Call{xq: &xq[0], xd: &xd[0], xc: &xc[0], nb: nb, na: na, bias: true}
	runX8(&c, w, x8Block, m, out, os)
}

// dotQ4X8RowsNAsm runs dotQ4X8AVX or dotQ4X8VNNI over m rows (runX8).
func dotQ4X8RowsNAsm(w []byte, m, nb, na int, xq []int8, xd []float32, xc []int32, out []float32, os int) {
	if !x8Check(w, x4Block, m, nb, na, len(xq), xd, xc, out, os) {
		return
	}
	c := x8Call{xq: &xq[0], xd: &xd[0], xc: &xc[0], nb: nb, na: na}
	runX8(&c, w, x4Block, m, out, os)
}

// x8Check checks the bounds the ×8 kernels trust, and reports whether there
// is anything to compute (with no blocks the results are zeros, stored).
func x8Check(w []byte, blockBytes, m, nb, na, nx int, xd []float32, xc []int32, out []float32, os int) bool {
	if m == 0 || na == 0 {
		return false
	}
	if na > maxRowsN {
		panic("cpu: too many activation rows for one multi-row kernel call")
	}
	if nb == 0 {
		for a := range na {
			clear(out[a*os : a*os+m])
		}
		return false
	}
	if nx < na*nb*32 {
		panic("cpu: ×8 kernel: activation rows too short")
	}
	_, _, _ = w[x8Groups(m)*nb*blockBytes-1], xd[na*nb-1], out[(na-1)*os+m-1]
	if xc != nil {
		_ = xc[na*nb-1]
	}
	return true
}

// x8PairRows is the fewest activation rows for which the ×8 Q8_0 kernel on
// biased weights takes two groups a pass (dotQ8X8B2VNNI): below, a pass
// waits on memory and one stream of groups asks less of it. Against the
// kernel on x+128 activations it replaced, on a Zen 5 host, one thread, the
// matrix products of a ~100M Q8_0 model (101 MB), three runs, the one-group
// kernel took 1 row 0.99-1.05 of the time and the two-group one 1.01-1.13,
// 2 rows 0.92-1.00 and 0.97-1.00, 4 rows 0.98-1.05 and 0.85-1.02, 5 rows
// 0.93-1.06 and 0.84-0.97, 8 rows 0.97-1.01 and 0.66-0.72.
const x8PairRows = 4

// x8Call is one ×8 kernel's activation rows: biased Q8_0 weights' when
// bias is set, else Q4_0's when xc is set, else Q8_0's. A struct with a
// method, not a closure, so that runX8's scratch does not escape to the
// heap on every call.
type x8Call struct {
	xq     *int8
	xd     *float32
	xc     *int32
	nb, na int
	bias   bool
}

// kern runs the kernel over ngroups groups from w, results at out,
// activation rows os bytes apart.
func (c *x8Call) kern(w *byte, out *float32, os, ngroups int) {
	if c.bias {
		// From x8PairRows rows, pairs of groups in 512-bit registers (a
		// last odd one in 256); below, where the pass waits on memory,
		// one stream of groups.
		if c.na < x8PairRows {
			dotQ8X8BVNNI(w, c.xq, c.nb*32, c.xd, c.xc, c.nb, out, os, ngroups, c.na)
			return
		}
		if p := ngroups / 2; p > 0 {
			dotQ8X8B2VNNI(w, c.xq, c.nb*32, c.xd, c.xc, c.nb, out, os, p, c.na)
		}
		if g := ngroups - 1; g%2 == 0 {
			w, out = (*byte)(unsafe.Add(unsafe.Pointer(w), g*c.nb*x8Block)), (*float32)(unsafe.Add(unsafe.Pointer(out), 4*x8Rows*g))
			dotQ8X8BVNNI(w, c.xq, c.nb*32, c.xd, c.xc, c.nb, out, os, 1, c.na)
		}
		return
	}
	if c.xc != nil {
		if q4X8VNNI {
			dotQ4X8VNNI(w, c.xq, c.nb*32, c.xd, c.xc, c.nb, out, os, ngroups, c.na)
			return
		}
		dotQ4X8AVX(w, c.xq, c.nb*32, c.xd, c.xc, c.nb, out, os, ngroups, c.na)
		return
	}
	dotQ8X8AVX(w, c.xq, c.nb*32, c.xd, c.nb, out, os, ngroups, c.na)
}

// runX8 runs c's kernel over m rows: whole groups straight into out, a
// last partial group into scratch (its rows past m are padding or another
// slice's, read but not stored).
func runX8(c *x8Call, w []byte, blockBytes, m int, out []float32, os int) {
	g := m / x8Rows
	if g > 0 {
		c.kern(&w[0], &out[0], 4*os, g)
	}
	t := m - x8Rows*g
	if t == 0 {
		return
	}
	var o [maxRowsN * x8Rows]float32
	c.kern(&w[g*c.nb*blockBytes], &o[0], 4*x8Rows, 1)
	for a := range c.na {
		copy(out[a*os+x8Rows*g:a*os+m], o[a*x8Rows:a*x8Rows+t])
	}
}

func axpyAsm(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	m := n &^ 7
	if m > 0 {
		axpyAVX(&y[0], a, &x[0], m)
	}
	for i := m; i < n; i++ {
		y[i] += a * x[i]
	}
}

func f16RowAsm(dst []float32, src []byte) {
	n := len(dst)
	src = src[:2*n]
	m := n &^ 7
	if m > 0 {
		f16RowAVX(&dst[0], &src[0], m)
	}
	for i := m; i < n; i++ {
		dst[i] = f16Table[uint16(src[2*i])|uint16(src[2*i+1])<<8]
	}
}
