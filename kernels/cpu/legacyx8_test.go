package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestExpandX8 checks the rewrite of Q5_0 and IQ4_NL rows as Q8_0 (the Go
// one) against the types' own Go dot products, bit for bit, and the
// rewrite kernels against the Go rewrite, byte for byte: rows in a group
// and past one, rows with slack between them, biased and not.
func TestExpandX8(t *testing.T) {
	initTables()
	for _, dt := range []kernels.DType{kernels.Q5_0, kernels.IQ4_NL} {
		for _, m := range []int{1, 8, 13, 24} {
			for _, nb := range []int{1, 3} {
				for _, flip := range []byte{0, 0x80} {
					t.Run(fmt.Sprintf("%v/%dx%d/flip=%#x", dt, m, nb, flip), func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(m), uint64(dt)<<8|uint64(nb)))
						bb := dt.BlockBytes()
						rb := nb*bb + 5 // slack the rewrite must skip
						w := make([]byte, m*rb)
						randKBlocks(r, dt, w, 0)
						size := x8Groups(m) * nb * x8Block
						want := bytes.Repeat([]byte{0xee}, size)
						expandX8(want, dt, w, rb, m, nb, flip)
						have := bytes.Repeat([]byte{0x11}, size)
						expandRowsX8(have, dt, w, rb, m, nb, flip)
						if !bytes.Equal(have, want) {
							t.Fatalf("the rewrite kernel's bytes differ from the Go rewrite's")
						}
						xs := make([]float32, nb*32)
						for i := range xs {
							xs[i] = float32(r.NormFloat64())
						}
						a := oneKAct(dt, xs)
						for row := range m {
							ref := kDotsGo[dt](w[row*rb:], a.row(0))
							got := dotQ8X8FlipGo(want[row/x8Rows*nb*x8Block:], row%x8Rows, nb, a.q, a.d, flip)
							if math.Float32bits(got) != math.Float32bits(ref) {
								t.Errorf("row %d: as Q8_0 %g; the %v reference %g", row, got, dt, ref)
							}
						}
						// The padding rows of the last group: +0 scales, values 0.
						for row := m; row < x8Groups(m)*x8Rows; row++ {
							g := want[row/x8Rows*nb*x8Block:]
							if v := dotQ8X8FlipGo(g, row%x8Rows, nb, a.q, a.d, flip); math.Float32bits(v) != 0 {
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
	for _, dt := range []kernels.DType{kernels.Q5_0, kernels.IQ4_NL} {
		const m, k = 64, 4096
		nb := k / kernels.QK
		rb := nb * dt.BlockBytes()
		w := make([]byte, m*rb)
		randKBlocks(rand.New(rand.NewPCG(1, 2)), dt, w, 0)
		dst := make([]byte, x8Groups(m)*nb*x8Block)
		for _, v := range []struct {
			name string
			f    func(dst []byte, dt kernels.DType, w []byte, rb, m, nb int, flip byte)
		}{{"kernel", expandRowsX8}, {"go", expandX8}} {
			b.Run(dt.String()+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					v.f(dst, dt, w, rb, m, nb, 0x80)
				}
				b.ReportMetric(float64(b.N)*m*k/float64(b.Elapsed().Nanoseconds()), "weights/ns")
			})
		}
	}
}
