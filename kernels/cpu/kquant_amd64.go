//go:build amd64 && !noasm

package cpu

import "github.com/specgate/specgate/kernels"

//go:noescape
func dotQ4KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

//go:noescape
func dotQ6KRowsAVX(w *byte, rb int, xq *int8, xd *float32, bs *int16, nb int, out *float32, nrows int)

// setKDotsAsm points the types with AVX2 kernels at them.
func setKDotsAsm() {
	kDots[kernels.Q4_K] = kRowsAsm(dotQ4KRowsAVX, q4KBytes)
	kDots[kernels.Q6_K] = kRowsAsm(dotQ6KRowsAVX, q6KBytes)
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
		_ = w[(len(out)-1)*rb+nb*blockBytes-1]
		_, _ = a.q[nb*superBlocks-1], a.bs[nb*16-1]
		f(&w[0], rb, &a.q[0], &a.d[0], &a.bs[0], nb, &out[0], len(out))
	}
}
