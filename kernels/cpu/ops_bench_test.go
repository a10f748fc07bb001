package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// BenchmarkRowOps times RMSNorm and RoPE on a prompt's worth of rows of a
// 768-wide model (12 heads of 64), one thread: next to a layer's matmuls
// they should stay small.
func BenchmarkRowOps(b *testing.B) {
	be, err := Open(kernels.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, rows := range []int{1, 128} {
		x, d := be.Alloc(rows, 768), be.Alloc(rows, 768)
		be.Upload(x, randVec(r, rows*768))
		w := be.Alloc(1, 768)
		be.Upload(w, randVec(r, 768))
		pos := make([]int32, rows)
		for i := range pos {
			pos[i] = int32(100 + i)
		}
		b.Run(fmt.Sprintf("RMSNorm/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				be.RMSNorm(d, x, w, 1e-6)
			}
		})
		b.Run(fmt.Sprintf("RoPE/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				be.RoPE(x, pos, kernels.RoPE{HeadDim: 64, NeoX: true})
			}
		})
	}
}
