package seeded

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestFillIgnoresGOMAXPROCS: the bytes are the same whether one goroutine
// draws every chunk or several share them, for every chunk size, a last
// chunk shorter than the others included.
func TestFillIgnoresGOMAXPROCS(t *testing.T) {
	const rows, cols = 37, 64
	fill := func(c Chunk) {
		for i := range c.Vals {
			c.Vals[i] = float32(int32(c.Src.Uint64())) / (1 << 31)
		}
	}
	for _, dt := range []kernels.DType{kernels.F32, kernels.Q8_0} {
		rb, err := dt.RowBytes(cols)
		if err != nil {
			t.Fatal(err)
		}
		for _, chunkRows := range []int{1, 4, 64} {
			draw := func(procs int) []byte {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				dst := make([]byte, rows*rb)
				if err := Fill(dst, dt, rows, cols, chunkRows, TensorSeed(1, 2, "t"), fill); err != nil {
					t.Fatal(err)
				}
				return dst
			}
			one := draw(1)
			for _, procs := range []int{2, 3, 8} {
				if !bytes.Equal(draw(procs), one) {
					t.Errorf("%v, %d rows a chunk: GOMAXPROCS %d drew other bytes than 1", dt, chunkRows, procs)
				}
			}
		}
	}
}

func TestFillRefusesBadSizes(t *testing.T) {
	nop := func(Chunk) {}
	if err := Fill(make([]byte, 10), kernels.F32, 1, 4, 1, [2]uint64{}, nop); err == nil {
		t.Error("10 bytes for 16: have no error")
	}
	if err := Fill(make([]byte, 16), kernels.F32, 1, 4, 0, [2]uint64{}, nop); err == nil {
		t.Error("0 rows a chunk: have no error")
	}
	if err := Fill(make([]byte, 16), kernels.Q8_0, 1, 4, 1, [2]uint64{}, nop); err == nil {
		t.Error("Q8_0 rows of 4: have no error")
	}
}
