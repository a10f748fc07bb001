package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestExpandX8 checks the rewrite of the types of legacyX8 as Q8_0 (the Go
// one) against the types' own Go dot products, bit for bit, minimums
// added by addMinsX8 (by its kernel for whole groups, where the CPU has
// one, and in Go for the rest), and the rewrite kernels against the Go
// rewrite, byte for byte: rows in a group and past one, rows with slack
// between them, biased and not, one activation row and several.
func TestExpandX8(t *testing.T) {
	initTables()
	for _, dt := range []kernels.DType{kernels.Q5_0, kernels.IQ4_NL, kernels.Q4_1, kernels.Q5_1} {
		for _, m := range []int{1, 8, 13, 24} {
			for _, nb := range []int{1, 3} {
				for _, flip := range []byte{0, 0x80} {
					t.Run(fmt.Sprintf("%v/%dx%d/flip=%#x", dt, m, nb, flip), func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(m), uint64(dt)<<8|uint64(nb)))
						bb := dt.BlockBytes()
						rb := nb*bb + 5 // slack the rewrite must skip
						w := make([]byte, m*rb)
						for row := range m {
							randKBlocks(r, dt, w[row*rb:row*rb+nb*bb], 0)
						}
						size, nm := x8Groups(m)*nb*x8Block, x8Groups(m)*nb*x8Rows
						want, wantMins := bytes.Repeat([]byte{0xee}, size), make([]float32, nm)
						have, haveMins := bytes.Repeat([]byte{0x11}, size), make([]float32, nm)
						for i := range nm {
							wantMins[i], haveMins[i] = -1, -2
						}
						if !hasMins(dt) {
							wantMins, haveMins = nil, nil
						}
						expandX8(want, wantMins, dt, w, rb, m, nb, flip)
						expandRowsX8(have, haveMins, dt, w, rb, m, nb, flip)
						if !bytes.Equal(have, want) {
							t.Fatalf("the rewrite kernel's bytes differ from the Go rewrite's")
						}
						for i := range wantMins {
							if math.Float32bits(haveMins[i]) != math.Float32bits(wantMins[i]) {
								t.Fatalf("minimum %d: the kernel wrote %g; the Go rewrite %g", i, haveMins[i], wantMins[i])
							}
						}
						// Five activation rows, so that addMinsX8's kernel
						// takes four at once and one alone.
						const na = 5
						acts := make([]*kAct, na)
						s := make([]float32, 0, na*nb)
						for a := range acts {
							xs := make([]float32, nb*32)
							for i := range xs {
								xs[i] = float32(r.NormFloat64())
							}
							acts[a] = oneKAct(dt, xs)
							s = append(s, acts[a].s[:nb]...)
						}
						out := make([]float32, na*m)
						for a, act := range acts {
							for row := range m {
								out[a*m+row] = dotQ8X8FlipGo(want[row/x8Rows*nb*x8Block:], row%x8Rows, nb, act.q, act.d, flip)
							}
						}
						if hasMins(dt) {
							addMinsX8(wantMins, nb, s, na, out, m, m)
						}
						for a, act := range acts {
							if !exactRef {
								break // the Go references may fuse multiply-adds here
							}
							for row := range m {
								ref := kDotsGo[dt](w[row*rb:], act.row(0))
								if got := out[a*m+row]; math.Float32bits(got) != math.Float32bits(ref) {
									t.Errorf("activation %d, row %d: as Q8_0 %g; the %v reference %g", a, row, got, dt, ref)
								}
							}
						}
						// The padding rows of the last group: +0 scales, so +0 results.
						for row := m; row < x8Groups(m)*x8Rows; row++ {
							g := want[row/x8Rows*nb*x8Block:]
							if v := dotQ8X8FlipGo(g, row%x8Rows, nb, acts[0].q, acts[0].d, flip); math.Float32bits(v) != 0 {
								t.Errorf("padding row %d: %g; want +0", row, v)
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkExpandX8 measures the rewrite of a chunk of 64 rows of 4096
// values, by the kernel (where the CPU has one) and in Go, in weights per
// ns.
func BenchmarkExpandX8(b *testing.B) {
	initTables()
	for _, dt := range []kernels.DType{kernels.Q5_0, kernels.IQ4_NL, kernels.Q4_1, kernels.Q5_1} {
		const m, k = 64, 4096
		nb := k / kernels.QK
		rb := nb * dt.BlockBytes()
		w := make([]byte, m*rb)
		randKBlocks(rand.New(rand.NewPCG(1, 2)), dt, w, 0)
		dst := make([]byte, x8Groups(m)*nb*x8Block)
		mins := make([]float32, x8Groups(m)*nb*x8Rows)
		for _, v := range []struct {
			name string
			f    func(dst []byte, mins []float32, dt kernels.DType, w []byte, rb, m, nb int, flip byte)
		}{{"kernel", expandRowsX8}, {"go", expandX8}} {
			b.Run(dt.String()+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					v.f(dst, mins, dt, w, rb, m, nb, 0x80)
				}
				b.ReportMetric(float64(b.N)*m*k/float64(b.Elapsed().Nanoseconds()), "weights/ns")
			})
		}
	}
}
