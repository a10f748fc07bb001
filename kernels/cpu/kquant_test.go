package cpu

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/kernelstest"
)

// FuzzWeightsGGML feeds arbitrary bytes and shapes to Weights for the GGML
// quantizations: a shape the bytes do not fill is an error, never a panic,
// and whatever Weights accepts MatMul and Gather compute without panicking,
// whatever the block scales hold (NaN and Inf included).
func FuzzWeightsGGML(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for i, dt := range kernelstest.ExtraWeightTypes {
		rb, _ := dt.RowBytes(dt.BlockElems())
		data := make([]byte, 2*rb)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		f.Add(uint8(i), uint16(2), uint16(dt.BlockElems()), data)
		f.Add(uint8(i), uint16(1), uint16(dt.BlockElems()), data[:rb-1])
		f.Add(uint8(i), uint16(1), uint16(dt.BlockElems()+32), data)
	}
	b, err := Open(kernels.Options{Threads: 2})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	f.Fuzz(func(t *testing.T, typ uint8, rows, cols uint16, data []byte) {
		types := kernelstest.ExtraWeightTypes
		dt := types[int(typ)%len(types)]
		w, err := b.Weights(dt, int(rows%64), int(cols%2048), data)
		if err != nil {
			rb, rerr := dt.RowBytes(int(cols % 2048))
			if rerr == nil && len(data) == int(rows%64)*rb {
				t.Fatalf("Weights(%v, %d, %d) of %d bytes: %v", dt, rows%64, cols%2048, len(data), err)
			}
			return
		}
		n, k := w.Dims()
		if n == 0 || k == 0 {
			return
		}
		x := b.Alloc(3, k)
		xs := make([]float32, 3*k)
		for i := range xs {
			xs[i] = float32(i%7) - 3
		}
		b.Upload(x, xs)
		b.MatMul(b.Alloc(3, n), x, w)
		b.Gather(b.Alloc(2, k), w, []int32{0, int32(n - 1)})
	})
}

// TestWeightsGGMLShapes checks the load errors of the GGML quantizations:
// a row that is not whole blocks and data that is short or long.
func TestWeightsGGMLShapes(t *testing.T) {
	b := open(t, 1)
	for _, dt := range kernelstest.ExtraWeightTypes {
		be := dt.BlockElems()
		rb, _ := dt.RowBytes(be)
		for _, tc := range []struct {
			rows, cols, bytes int
			short             bool
		}{
			{2, be, 2*rb - 1, true},
			{2, be, 2*rb + 1, true},
			{2, be / 2, rb, false},
			{1, be + 16, 2 * rb, false},
		} {
			_, err := b.Weights(dt, tc.rows, tc.cols, make([]byte, tc.bytes))
			if err == nil {
				t.Errorf("Weights(%v, %d, %d) of %d bytes: have nil error; want one", dt, tc.rows, tc.cols, tc.bytes)
				continue
			}
			if tc.short != errors.Is(err, ErrShortData) {
				t.Errorf("Weights(%v, %d, %d) of %d bytes: error %v", dt, tc.rows, tc.cols, tc.bytes, err)
			}
		}
	}
}
