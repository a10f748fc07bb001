//go:build amd64 && !noasm

package cpu

//go:noescape
func dotF32AVX(a, b *float32, n int) float32

//go:noescape
func dotF32PairAVX(a, a2, b *float32, n int, out *[2]float32)

// The tile kernels of gemm_f32_amd64.s, each quads tiles of four weight
// rows (ldw floats apart, 0 for one row four times) by three, two or one
// activation rows (ldx apart), over n floats (a multiple of 8) of each; the
// tiles' weight rows follow each other. A tile's accumulators start at +0
// (flags gemmStart) or from its 96 floats of acc; they end reduced into
// out (flags gemmFinish), tile q's four results of activation row j at
// out + 4q + j·ldo, or stored back to acc.
//
//go:noescape
func gemmF32T43(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)

//go:noescape
func gemmF32T42(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)

//go:noescape
func gemmF32T81(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)

//go:noescape
func gemmF32T41(w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int)

const (
	gemmStart  = 1
	gemmFinish = 2
)

// gemmTile calls the kernel for r activation rows directly: through a
// function value its pointers would escape.
func gemmTile(r int, w *float32, ldw int, x *float32, ldx int, n int, acc *float32, out *float32, ldo int, flags int, quads int) {
	switch r {
	case 3:
		gemmF32T43(w, ldw, x, ldx, n, acc, out, ldo, flags, quads)
	case 2:
		gemmF32T42(w, ldw, x, ldx, n, acc, out, ldo, flags, quads)
	default:
		gemmF32T41(w, ldw, x, ldx, n, acc, out, ldo, flags, quads)
	}
}

func dotF32Asm(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotF32AVX(&a[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s = fma32(a[i], b[i], s)
	}
	return s
}

// gemmF32Asm covers the outputs with tiles of four weight rows by three
// activation rows (two or one for the last), a weight row left over by
// running it as all four rows of a tile into scratch, pass by pass, and
// then fuses the tails shorter than a vector into every output.
func gemmF32Asm(out []float32, ldo int, w []float32, wpacked bool, mw int, x []float32, xpacked bool, nx int, k int, sc *gemmScratch) {
	if mw == 0 || nx == 0 {
		return
	}
	if k == 0 {
		for j := range nx {
			clear(out[j*ldo : j*ldo+mw])
		}
		return
	}
	_, _, _ = w[mw*k-1], x[nx*k-1], out[(nx-1)*ldo+mw-1]
	g := gemmArgs{out: out, ldo: ldo, w: w, wpacked: wpacked, mw: mw, x: x, xpacked: xpacked, nx: nx, k: k, k8: k &^ 7, kc: gemmKC, sc: sc}
	switch {
	case nx == 1 && !wpacked && !xpacked:
		// One activation row (a batch-1 decode step) reads each weight
		// once, so it runs at the speed the weights stream from memory,
		// if the arithmetic keeps up: one output's chain of fused
		// multiply-adds (canon.go) takes eight floats per FMA latency,
		// about what one core's stream delivers. Two outputs a pass
		// double that, and their rows half the call's rows apart keep two
		// sequential streams on different pages (the eight-row tile's
		// eight adjacent rows, or two adjacent ones, ran slower than one
		// row alone). A ~100M F32 model on one Zen 5 core decoded at
		// 38-42 tokens/s on the tile, 40-46 a row at a time, 42-49 in
		// pairs.
		i := 0
		if g.k8 >= 64 {
			h := mw / 2
			var two [2]float32
			for ; i < h; i++ {
				dotF32PairAVX(&w[i*k], &w[(i+h)*k], &x[0], g.k8, &two)
				out[i], out[i+h] = two[0], two[1]
			}
			i = 2 * h
		}
		for ; i < mw; i++ {
			out[i] = dotF32AVX(&w[i*k], &x[0], g.k8)
		}
	default:
		// With one triple of activation rows or less, nothing meets a
		// weight row twice: unpacked rows stream through whole.
		wrows := gemmWRows
		if nx <= 3 && !wpacked && !xpacked {
			g.kc, wrows = max(g.k8, 8), gemmDecodeWRows
		}
		for i0 := 0; i0 < mw; i0 += wrows {
			i1 := min(mw, i0+wrows)
			for j0 := 0; j0 < nx; j0 += gemmXRows {
				g.pass(i0, i1, j0, min(nx, j0+gemmXRows))
			}
		}
	}
	if g.k8 == k {
		return
	}
	for j := range nx {
		for i := range mw {
			s := out[j*ldo+i]
			for l := g.k8; l < k; l++ {
				s = fma32(gemmAt(w, wpacked, mw, k, i, l), gemmAt(x, xpacked, nx, k, j, l), s)
			}
			out[j*ldo+i] = s
		}
	}
}

// gemmArgs are gemmF32Asm's arguments, k8 (k less its tail) and kc (the
// span of k a pass takes at a time).
type gemmArgs struct {
	out           []float32
	ldo           int
	w             []float32
	wpacked       bool
	mw            int
	x             []float32
	xpacked       bool
	nx, k, k8, kc int
	sc            *gemmScratch
}

// pass computes the vector part of outputs [i0, i1) × [j0, j1): for each
// span of kc floats of k, activation triple by triple (each stays in L1
// while the pass's weight rows, in L1 too, meet it), one call for the
// pass's whole quads of weight rows and one per row left over.
func (g *gemmArgs) pass(i0, i1, j0, j1 int) {
	k, k8, kc, out, ldo := g.k, g.k8, g.kc, g.out, g.ldo
	quads := (i1 - i0) / 4
	left := i0 + 4*quads
	var single [12]float32
	for kb := 0; kb == 0 || kb < k8; kb += kc {
		n := min(kc, k8-kb)
		flags := 0
		if kb == 0 {
			flags |= gemmStart
		}
		if kb+n >= k8 {
			flags |= gemmFinish
		}
		// The span's weight row i0 and activation row 0, and their
		// strides.
		wp, ldw := g.w[i0*k+kb:], k
		if g.wpacked {
			ldw = min(kc, k-kb)
			wp = g.w[kb*g.mw+i0*ldw:]
		}
		xp, ldx := g.x[kb:], k
		if g.xpacked {
			ldx = min(kc, k-kb)
			xp = g.x[kb*g.nx:]
		}
		for t, j := 0, j0; j < j1; t, j = t+1, j+3 {
			r := min(3, j1-j)
			acc := g.sc.acc[t*gemmTiles*96:]
			xj := &xp[j*ldx]
			switch {
			case r == 1 && quads >= 2:
				// One activation row (batch-1 decode): eight weight
				// rows a call, then a quad left over.
				gemmF32T81(&wp[0], ldw, xj, ldx, n, &acc[0], &out[j*ldo+i0], ldo, flags, quads/2)
				if q := quads - 1; quads%2 == 1 {
					gemmF32T41(&wp[4*q*ldw], ldw, xj, ldx, n, &acc[q*96], &out[j*ldo+i0+4*q], ldo, flags, 1)
				}
			case quads > 0:
				gemmTile(r, &wp[0], ldw, xj, ldx, n, &acc[0], &out[j*ldo+i0], ldo, flags, quads)
			}
			for i := left; i < i1; i++ {
				gemmTile(r, &wp[(i-i0)*ldw], 0, xj, ldx, n, &acc[(quads+i-left)*96], &single[0], 4, flags, 1)
				if flags&gemmFinish != 0 {
					for jj := range r {
						out[(j+jj)*ldo+i] = single[4*jj]
					}
				}
			}
		}
	}
}
