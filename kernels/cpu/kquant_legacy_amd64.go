//go:build amd64 && !noasm

package cpu

import "github.com/specgate/specgate/kernels"

//go:noescape
func dotQ5_0RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)

//go:noescape
func dotQ4_1RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)

//go:noescape
func dotQ5_1RowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)

//go:noescape
func dotIQ4NLRowsAVX(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int)

// kRows32Asm wraps a rows kernel of a type whose activations come in
// blocks of 32 values (Q8_0, or Q8_1 when withS: the kernel also reads
// the blocks' d·Σq): it checks bounds once, so the assembly can trust its
// lengths.
func kRows32Asm(f func(w *byte, rb int, xq *int8, xd, xs *float32, nb int, out *float32, nrows int), blockBytes int, withS bool) kRows {
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
		_ = a.q[nb*kernels.QK-1]
		var xs *float32
		if withS {
			_ = a.s[nb-1]
			xs = &a.s[0]
		}
		f(&w[0], rb, &a.q[0], &a.d[0], xs, nb, &out[0], len(out))
	}
}

//go:noescape
func dotQ5_0RowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, ngroups int, out *float32, os int)

//go:noescape
func dotIQ4NLRowsNAVX(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, ngroups int, out *float32, os int)

// kRows32NAsm wraps an N kernel of a Q8_0 type: it checks bounds once,
// and gives the rows past the last group of eight to the type's one-row
// kernel one, which computes them by the same steps.
func kRows32NAsm(f func(w *byte, rb int, xq *int8, xqs int, xd *float32, xds int, nb, na, ngroups int, out *float32, os int), one kRows, blockBytes int) kRowsN {
	return func(w []byte, rb int, a *kAct, a0, na int, out []float32, os, m int) {
		checkRowsN(na, rb)
		k := a.k
		nb := k / kernels.QK
		g := m / 8
		if nb == 0 {
			g = 0
		}
		if g > 0 {
			_ = w[(8*g-1)*rb+nb*blockBytes-1]
			_, _ = a.q[(a0+na)*k-1], a.d[(a0+na)*nb-1]
			_ = out[(na-1)*os+8*g-1]
			f(&w[0], rb, &a.q[a0*k], k, &a.d[a0*nb], 4*nb, nb, na, g, &out[0], 4*os)
		}
		if 8*g == m {
			return
		}
		for i := range na {
			one(w[8*g*rb:], rb, a.row(a0+i), out[i*os+8*g:i*os+m])
		}
	}
}

//go:noescape
func expandQ5_0X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)

//go:noescape
func expandIQ4NLX8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)

//go:noescape
func expandQ4_1X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)

//go:noescape
func expandQ5_1X8AVX(dst, w *byte, rb, nb, ngroups int, c uint32, mins *float32)

//go:noescape
func addMinsX8AVX(mins *float32, nb int, s *float32, ss, na int, out *float32, os, ngroups int)

// setExpandAsm points the types of legacyx8.go at their rewrite kernels.
func setExpandAsm() {
	expandX8Groups = map[kernels.DType]expandKernel{
		kernels.Q5_0:   expandQ5_0X8AVX,
		kernels.IQ4_NL: expandIQ4NLX8AVX,
		kernels.Q4_1:   expandQ4_1X8AVX,
		kernels.Q5_1:   expandQ5_1X8AVX,
	}
	addMinsX8Groups = addMinsX8AVX
}
