//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

// haveF32Z reports whether this CPU runs the 512-bit F32 kernels in
// gemm_f32z_amd64.s.
var haveF32Z = haveAsm && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

// The kernels of gemm_f32z_amd64.s: A weight rows by P pairs of activation
// rows, against groups groups of them.

//go:noescape
func gemmF32Z81(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

//go:noescape
func gemmF32Z82(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

//go:noescape
func gemmF32Z83(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

//go:noescape
func gemmF32Z41(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

//go:noescape
func gemmF32Z42(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

//go:noescape
func gemmF32Z43(w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int)

// gemmZTile calls the kernel of eight (wide) or four weight rows by p
// pairs directly: through a function value its pointers would escape.
func gemmZTile(wide bool, p int, w *float32, ldw int, x *float32, xs int, n int, acc *float32, out *float32, ldo int, flags int, groups int) {
	switch {
	case wide && p == 3:
		gemmF32Z83(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	case wide && p == 2:
		gemmF32Z82(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	case wide:
		gemmF32Z81(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	case p == 3:
		gemmF32Z43(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	case p == 2:
		gemmF32Z42(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	default:
		gemmF32Z41(w, ldw, x, xs, n, acc, out, ldo, flags, groups)
	}
}

// gemmF32GroupsAsm covers the outputs with tiles of eight weight rows by a
// group of activation rows (gemmGroupRows, fewer for the last), four and
// then one at a time for weight rows left over (one row as all four rows
// of a tile, into scratch), a group's odd last row through scratch too;
// then it fuses the tails shorter than a vector into every output. Rows
// narrower than a vector take gemmF32Asm.
//
// Eight weight rows by three pairs, against four by six (the same 24
// accumulators), ran 768x768 to 768x2048 products 4-12% faster on one Zen
// 5 core at 128 and 512 rows: the eight weight rows stay in L1 while the
// group's six activation rows stream past, where twelve activation rows
// and four weight rows at 768 wide no longer fit.
func gemmF32GroupsAsm(out []float32, ldo int, w []float32, mw int, xg, x []float32, nx, k int, sc *gemmScratch) {
	if mw == 0 || nx == 0 {
		return
	}
	if k == 0 {
		for j := range nx {
			clear(out[j*ldo : j*ldo+mw])
		}
		return
	}
	k8 := k &^ 7
	if k8 == 0 {
		gemmF32Asm(out, ldo, w, false, mw, x, false, nx, k, sc)
		return
	}
	_, _, _, _ = w[mw*k-1], x[nx*k-1], out[(nx-1)*ldo+mw-1], xg[gemmGroupsLen(nx, k)-1]
	if sc.accZ == nil {
		sc.accZ = make([]float32, gemmGroupPassRows/gemmGroupRows*gemmGroupAcc)
	}
	for i0 := 0; i0 < mw; i0 += 8 {
		i1 := min(mw, i0+8)
		for j0 := 0; j0 < nx; j0 += gemmGroupPassRows {
			j1 := min(nx, j0+gemmGroupPassRows)
			for kb := 0; kb == 0 || kb < k8; kb += gemmGroupKC {
				n := min(gemmGroupKC, k8-kb)
				flags := 0
				if kb == 0 {
					flags |= gemmStart
				}
				if kb+n >= k8 {
					flags |= gemmFinish
				}
				// The pass's whole groups in one call, then a last short
				// one.
				full := (j1 - j0) / gemmGroupRows
				if full > 0 {
					groupTiles(out[j0*ldo+i0:], ldo, w[i0*k+kb:], k, i1-i0, xg[j0*k8+kb*gemmGroupRows:], gemmGroupRows*k8, gemmGroupRows, full, n, sc.accZ, flags)
				}
				if j := j0 + full*gemmGroupRows; j < j1 {
					r := j1 - j
					p := (r + 1) / 2
					groupTiles(out[j*ldo+i0:], ldo, w[i0*k+kb:], k, i1-i0, xg[j*k8+kb*2*p:], 0, r, 1, n, sc.accZ[full*gemmGroupAcc:], flags)
				}
			}
		}
	}
	if k8 == k {
		return
	}
	for j := range nx {
		for i := range mw {
			s := out[j*ldo+i]
			for l := k8; l < k; l++ {
				s = fma32(w[i*k+l], x[j*k+l], s)
			}
			out[j*ldo+i] = s
		}
	}
}

// groupTiles runs rows ≤ 8 weight rows (from w, ldw floats apart) against
// groups groups of r activation rows (their span's chunks at x, xs floats
// apart) over n floats, into out (row j at j·ldo) at the end of k; acc
// holds the tiles' accumulators between spans, groups·gemmGroupAcc floats.
func groupTiles(out []float32, ldo int, w []float32, ldw, rows int, x []float32, xs, r, groups, n int, acc []float32, flags int) {
	p := (r + 1) / 2
	_ = acc[groups*gemmGroupAcc-1]
	// With an odd last row (one group only), the kernels would store a
	// result for the padding row: the tiles write to scratch, copied out
	// at the finish.
	o, ldt := out, ldo
	var tmp [gemmGroupRows * 8]float32
	if r%2 == 1 {
		o, ldt = tmp[:], 8
	}
	done := 0
	switch {
	case rows == 8:
		gemmZTile(true, p, &w[0], ldw, &x[0], xs, n, &acc[0], &o[0], ldt, flags, groups)
		done = 8
	case rows >= 4:
		gemmZTile(false, p, &w[0], ldw, &x[0], xs, n, &acc[0], &o[0], ldt, flags, groups)
		done = 4
	}
	if r%2 == 1 && flags&gemmFinish != 0 {
		for j := range r {
			copy(out[j*ldo:j*ldo+done], tmp[j*8:])
		}
	}
	// Rows left over, one at a time as all four rows of a tile, into
	// scratch: their accumulators after the tiles'.
	for g := range groups {
		for i := done; i < rows; i++ {
			var one [gemmGroupRows * 4]float32
			a := (8*groups + 4*(3*g+i-done)) * p * 16
			gemmZTile(false, p, &w[i*ldw], 0, &x[g*xs], 0, n, &acc[a], &one[0], 4, flags, 1)
			if flags&gemmFinish != 0 {
				for j := range r {
					out[(g*r+j)*ldo+i] = one[4*j]
				}
			}
		}
	}
}
