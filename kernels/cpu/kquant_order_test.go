package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels/kernelstest"
)

// TestKRowsFloatOrder checks the rows kernels' float steps against the Go
// references bit for bit on activations of one magnitude: with no term
// far larger than the rest, a step done in another order or with another
// rounding (d·(d_x·isum) for (d_x·d)·isum, say) shows in the last bits of
// most rows, where TestKRowsMatchGo's outlier would drown it.
func TestKRowsFloatOrder(t *testing.T) {
	if !exactRef {
		t.Skip("the Go references may fuse multiply-adds here")
	}
	initTables()
	for _, dt := range kernelstest.ExtraWeightTypes {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(17, uint64(dt)))
			const rows, k = 61, 2048 // not a multiple of 8: the one-row paths too
			rb, _ := dt.RowBytes(k)
			data := make([]byte, rows*rb)
			randKBlocks(r, dt, data, 0)
			xs := make([]float32, k)
			for i := range xs {
				xs[i] = float32(r.NormFloat64())
			}
			a := oneKAct(dt, xs)
			have, want := make([]float32, rows), make([]float32, rows)
			kDots[dt](data, rb, a.row(0), have)
			goRows(kDotsGo[dt])(data, rb, a.row(0), want)
			for i := range want {
				if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
					t.Errorf("row %d: have %g; the reference %g", i, have[i], want[i])
				}
			}
		})
	}
}
