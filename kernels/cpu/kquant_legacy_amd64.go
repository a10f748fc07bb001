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
