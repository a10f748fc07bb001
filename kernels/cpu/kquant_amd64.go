//go:build amd64 && !noasm

package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/specgate/specgate/kernels"
)

//go:noescape
func dotQ2KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ3KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ4KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ5KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ6KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotIQ4XSRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ2KRows2AVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, bs *int16, bss, nb int, out *float32, os, nrows int)

//go:noescape
func dotIQ4XSRowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, nrows int, out *float32, os int)

//go:noescape
func dotQ4Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)

//go:noescape
func dotQ5Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)

//go:noescape
func dotQ6Kx4AVX(w *byte, grp *byte, nb int, out *[4]float32)

//go:noescape
func dotQ4KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ5KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)

//go:noescape
func dotQ6KX8AVX(w *byte, xq *int8, xs int, xd *float32, bs *int16, nb int, out *float32, os int, ngroups, na int)

// setKDotsAsm points the types with AVX2 kernels at them.
func setKDotsAsm() {
	kDots[kernels.Q2_K] = kRowsAsm(dotQ2KRowsAVX, q2KBytes)
	kDots[kernels.Q3_K] = kRowsAsm(dotQ3KRowsAVX, q3KBytes)
	kDots[kernels.Q4_K] = kRowsAsm(dotQ4KRowsAVX, q4KBytes)
	kDots[kernels.Q5_K] = kRowsAsm(dotQ5KRowsAVX, q5KBytes)
	kDots[kernels.Q6_K] = kRowsAsm(dotQ6KRowsAVX, q6KBytes)
	kDots[kernels.Q5_0] = kRows32Asm(dotQ5_0RowsAVX, q5_0Bytes, false)
	kDots[kernels.IQ4_NL] = kRows32Asm(dotIQ4NLRowsAVX, iq4NLBytes, false)
	kDots[kernels.Q4_1] = kRows32Asm(dotQ4_1RowsAVX, q4_1Bytes, true)
	kDots[kernels.Q5_1] = kRows32Asm(dotQ5_1RowsAVX, q5_1Bytes, true)
	setExpandAsm()
	kDotsN = map[kernels.DType]kRowsN{
		kernels.Q5_0:   kRows32NAsm(dotQ5_0RowsNAVX, kDots[kernels.Q5_0], q5_0Bytes),
		kernels.IQ4_NL: kRows32NAsm(dotIQ4NLRowsNAVX, kDots[kernels.IQ4_NL], iq4NLBytes),
	}
	kDotsN[kernels.Q2_K] = kRows2Asm(dotQ2KRows2AVX, kDots[kernels.Q2_K], q2KBytes)
	if cpu.X86.HasBMI2 { // PDEP unpacks the IQ4_XS scales
		kDots[kernels.IQ4_XS] = kRowsAsm(dotIQ4XSRowsAVX, iq4XSBytes)
		kDotsN[kernels.IQ4_XS] = kRowsKNAsm(dotIQ4XSRowsNAVX, kDots[kernels.IQ4_XS], iq4XSBytes)
	}
	kX4 = map[kernels.DType]func(w, g []byte, nb int, out *[4]float32){
		kernels.Q4_K: kX4Asm(dotQ4Kx4AVX, q4KBytes),
		kernels.Q5_K: kX4Asm(dotQ5Kx4AVX, q5KBytes),
		kernels.Q6_K: kX4Asm(dotQ6Kx4AVX, q6KBytes),
	}
	kX8 = map[kernels.DType]kX8Kernel{kernels.Q4_K: kX8Asm, kernels.Q5_K: kX8Asm, kernels.Q6_K: kX8Asm}
	kX8MaxRows = map[kernels.DType]int{kernels.Q4_K: 4, kernels.Q5_K: 4}
}

// kX8Asm runs the ×8 kernel of w's type over m rows: whole groups straight
// into out, a last partial group into the worker's scratch (its rows past
// m are padding or another slice's, read but not stored). The Q6_K kernel
// takes up to eight activation rows a call, the others four (kX8Rows):
// more rows are two calls, the second finding the weights in cache.
func kX8Asm(sc *workerScratch, dt kernels.DType, w []byte, m, nb int, act *kAct, a0, na int, out []float32, os int) {
	if m == 0 || na == 0 {
		return
	}
	if na > maxRowsN {
		panic("cpu: too many activation rows for one ×8 K-quant kernel call")
	}
	if n := kX8Rows(dt); na > n {
		kX8Asm(sc, dt, w, m, nb, act, a0, n, out, os)
		kX8Asm(sc, dt, w, m, nb, act, a0+n, na-n, out[n*os:], os)
		return
	}
	if nb == 0 {
		for a := range na {
			clear(out[a*os : a*os+m])
		}
		return
	}
	k := nb * superBlocks
	gb := nb * x8Rows * x8BlockBytes(dt)
	_, _, _ = w[x8Groups(m)*gb-1], act.q[(a0+na)*k-1], act.d[(a0+na)*nb-1]
	_, _ = act.bs[(a0+na)*nb*16-1], out[(na-1)*os+m-1]
	xq, xd, bs := &act.q[a0*k], &act.d[a0*nb], &act.bs[a0*nb*16]
	kern := dotQ4KX8AVX
	switch dt {
	case kernels.Q5_K:
		kern = dotQ5KX8AVX
	case kernels.Q6_K:
		kern = dotQ6KX8AVX
	}
	g := m / x8Rows
	if g > 0 {
		kern(&w[0], xq, k, xd, bs, nb, &out[0], 4*os, g, na)
	}
	t := m - x8Rows*g
	if t == 0 {
		return
	}
	o := &sc.kx8o
	kern(&w[g*gb], xq, k, xd, bs, nb, &o[0], 4*x8Rows, 1, na)
	for a := range na {
		copy(out[a*os+x8Rows*g:a*os+m], o[a*x8Rows:a*x8Rows+t])
	}
}

// kX4Asm wraps an x4 kernel, checking bounds once.
func kX4Asm(f func(w *byte, g *byte, nb int, out *[4]float32), blockBytes int) func(w, g []byte, nb int, out *[4]float32) {
	return func(w, g []byte, nb int, out *[4]float32) {
		if nb == 0 {
			*out = [4]float32{}
			return
		}
		_, _ = w[nb*blockBytes-1], g[nb*x4Record-1]
		f(&w[0], &g[0], nb, out)
	}
}

// kRowsAsm wraps a Q8_K rows kernel: it checks bounds once, so the
// assembly can trust its lengths.
func kRowsAsm(f func(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int), blockBytes int) kRows {
	return func(w []byte, rb int, a actRow, out []float32) {
		nb := len(a.d)
		if len(out) == 0 || nb == 0 {
			clear(out)
			return
		}
		if rb < 0 {
			panic("cpu: negative weight row stride")
		}
		_ = w[(len(out)-1)*rb+nb*blockBytes-1]
		_, _ = a.q[nb*superBlocks-1], a.bs[nb*16-1]
		f(&w[0], rb, &a.q[0], &a.d[0], &a.bs[0], nb, &out[0], len(out))
	}
}

// kRowsKNAsm wraps an N kernel of a Q8_K type that takes its weight rows
// one at a time: it checks bounds once, so the assembly can trust its
// lengths, and gives fewer than kRowsKNMin activation rows to the type's
// one-row kernel one, which computes them by the same steps.
func kRowsKNAsm(f func(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, nrows int, out *float32, os int), one kRows, blockBytes int) kRowsN {
	return func(w []byte, rb int, a *kAct, a0, na int, out []float32, os, m int) {
		checkRowsN(na, rb)
		if m == 0 {
			return
		}
		if na < kRowsKNMin {
			for i := range na {
				one(w, rb, a.row(a0+i), out[i*os:i*os+m])
			}
			return
		}
		k := a.k
		nb := k / superBlocks
		if nb == 0 {
			for i := range na {
				clear(out[i*os : i*os+m])
			}
			return
		}
		_ = w[(m-1)*rb+nb*blockBytes-1]
		_, _ = a.q[(a0+na)*k-1], a.d[(a0+na)*nb-1]
		_ = out[(na-1)*os+m-1]
		f(&w[0], rb, &a.q[a0*k], k, &a.d[a0*nb], 4*nb, nb, na, m, &out[0], 4*os)
	}
}

// kRowsKNMin is the fewest activation rows kRowsKNAsm's kernels take: the
// IQ4_XS one decodes a super-block to its frame once for all of them,
// which costs more than it saves for two rows (on a ~100M IQ4_XS model at
// one thread, 217-226 tokens/s against 247-251 for a 2-row batch), about
// breaks even at three and four, and gains a tenth from eight (318-323
// against 286-288).
const kRowsKNMin = 4

// kRows2Asm wraps a kernel of a Q8_K type that takes two activation rows a
// call, its weight rows one at a time: pairs of rows go to it, a last
// odd row to the type's one-row kernel one, which computes it by the same
// steps. It checks bounds once, so the assembly can trust its lengths.
func kRows2Asm(f func(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, bs *int16, bss, nb int, out *float32, os, nrows int), one kRows, blockBytes int) kRowsN {
	return func(w []byte, rb int, a *kAct, a0, na int, out []float32, os, m int) {
		checkRowsN(na, rb)
		if m == 0 {
			return
		}
		k := a.k
		nb := k / superBlocks
		i := 0
		if nb > 0 {
			_ = w[(m-1)*rb+nb*blockBytes-1]
			_, _, _ = a.q[(a0+na)*k-1], a.d[(a0+na)*nb-1], a.bs[(a0+na)*(k/16)-1]
			_ = out[(na-1)*os+m-1]
			for ; i+2 <= na; i += 2 {
				r := a0 + i
				f(&w[0], rb, &a.q[r*k], k, &a.d[r*nb], 4*nb, &a.bs[r*(k/16)], k/8, nb, &out[i*os], 4*os, m)
			}
		}
		for ; i < na; i++ {
			one(w, rb, a.row(a0+i), out[i*os:i*os+m])
		}
	}
}

// checkRowsN panics on the arguments no kRowsN kernel takes: the
// assembly trusts them.
func checkRowsN(na, rb int) {
	if na < 1 || na > kRowsNMax {
		panic("cpu: activation rows out of range for an N rows kernel")
	}
	if rb < 0 {
		panic("cpu: negative weight row stride")
	}
}
