package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSoftmaxPasses is softmaxPos alone over 512 positions' scores,
// for chunks of a few heads (a wide model's decode split over workers) up
// to 128 (a narrow-headed model on one thread, 4 KiB a stretch).
func BenchmarkSoftmaxPasses(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, nh := range []int{1, 6, 12, 16, 24, 32, 64, 128} {
		b.Run(fmt.Sprintf("heads=%d", nh), func(b *testing.B) {
			src := randVals(r, 512*nh, 4)
			s := make([]float32, len(src))
			scratch := make([]float32, softmaxScratch(nh))
			loopThreadCPU(b, func() {
				copy(s, src)
				softmaxPos(s, nh, scratch)
			})
		})
	}
}
