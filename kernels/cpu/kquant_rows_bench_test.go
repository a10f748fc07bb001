package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels/kernelstest"
)

// BenchmarkKRows times, on one thread, each GGML type's rows kernel
// (kDots) against its Go reference over a decode step's 768×2048 matrix
// (one activation row), in weights per nanosecond.
func BenchmarkKRows(b *testing.B) {
	initTables()
	const rows, k = 768, 2048
	r := rand.New(rand.NewPCG(3, 4))
	xs := make([]float32, k)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	for _, dt := range kernelstest.ExtraWeightTypes {
		rb, _ := dt.RowBytes(k)
		// Random F16 scales would hold NaNs and subnormals, which some
		// CPUs take far longer over (randBlocks keeps them sane).
		w := make([]byte, rows*rb)
		randKBlocks(r, dt, w, 0)
		a := oneKAct(dt, xs)
		out := make([]float32, rows)
		for _, v := range []struct {
			name string
			f    kRows
		}{{"kernel", kDots[dt]}, {"go", goRows(kDotsGo[dt])}} {
			b.Run(dt.String()+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					v.f(w, rb, a.row(0), out)
				}
				b.ReportMetric(float64(b.N)*rows*k/float64(b.Elapsed().Nanoseconds()), "weights/ns")
			})
		}
	}
}
