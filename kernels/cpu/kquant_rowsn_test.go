package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestKRowsNMatchOneRow checks that MatMul on weights of a type with a
// kDotsN kernel gives every output the bits of the one-row kernels (kDots)
// and of the Go reference, for every count of activation rows up to one
// more than a call takes, over 13 weight rows (for the kernels that take
// them eight at a time, a group of eight and five left), and the kernel
// called alone on rows from the second on.
func TestKRowsNMatchOneRow(t *testing.T) {
	initTables()
	const rows = 13
	for _, dt := range []kernels.DType{kernels.Q5_0, kernels.IQ4_NL, kernels.IQ4_XS, kernels.Q2_K} {
		k := 1024 + 3*dt.BlockElems()
		for n := 1; n <= kRowsNMax+1; n++ {
			t.Run(fmt.Sprintf("%v/n=%d", dt, n), func(t *testing.T) {
				kn := kDotsN[dt]
				if kn == nil {
					t.Skip("no kDotsN kernel here")
				}
				r := rand.New(rand.NewPCG(uint64(n), uint64(dt)))
				vals := make([]float32, rows*k)
				for i := range vals {
					vals[i] = float32(r.NormFloat64())
				}
				data, err := kernels.Quantize(dt, vals)
				if err != nil {
					t.Fatal(err)
				}
				// Rows from the fifth on are random bytes, every value
				// pattern, with sane F16 scales.
				rb, _ := dt.RowBytes(k)
				randKBlocks(r, dt, data, 4*rb/dt.BlockBytes())
				xs := make([]float32, n*k)
				for i := range xs {
					xs[i] = float32(r.NormFloat64()) * 3
				}

				be := open(t, 1)
				w, err := be.Weights(dt, rows, k, data)
				if err != nil {
					t.Fatal(err)
				}
				x, y := be.Alloc(n, k), be.Alloc(n, rows)
				be.Upload(x, xs)
				be.MatMul(y, x, w)
				have := make([]float32, n*rows)
				be.Download(have, y)
				saved := kDotsN
				kDotsN = nil
				be.MatMul(y, x, w)
				kDotsN = saved
				one := make([]float32, n*rows)
				be.Download(one, y)

				a := &kAct{f: actFormatOf(dt), k: k}
				nb := k / a.f.blockLen()
				a.q, a.d, a.bs = make([]int8, n*k), make([]float32, n*nb), make([]int16, n*k/16)
				for i := range n {
					a.quantize(i, xs[i*k:(i+1)*k])
				}
				ref := make([]float32, n*rows)
				for i := range n {
					goRows(kDotsGo[dt])(data, rb, a.row(i), ref[i*rows:(i+1)*rows])
				}
				for j := range have {
					if math.Float32bits(have[j]) != math.Float32bits(one[j]) {
						t.Errorf("row %d col %d: have %g; one row at a time %g", j/rows, j%rows, have[j], one[j])
					}
					if exactRef && math.Float32bits(have[j]) != math.Float32bits(ref[j]) {
						t.Errorf("row %d col %d: have %g; the reference %g", j/rows, j%rows, have[j], ref[j])
					}
				}
				if n < 2 {
					return
				}
				// Alone, from activation row 1, with a wider output stride.
				const os = rows + 3
				na := min(n-1, kRowsNMax)
				out := make([]float32, na*os)
				kn(data, rb, a, 1, na, out, os, rows)
				for i := range na {
					for c := range rows {
						if h, wnt := out[i*os+c], have[(1+i)*rows+c]; math.Float32bits(h) != math.Float32bits(wnt) {
							t.Errorf("alone: row %d col %d: have %g; want %g", 1+i, c, h, wnt)
						}
					}
				}
			})
		}
	}
}
