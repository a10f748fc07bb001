package sample

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzSample feeds arbitrary logits (NaN and ±Inf included) and parameters:
// no panic, Probs is a distribution over the vocabulary, and Sample draws
// exactly what Draw(Probs) draws.
func FuzzSample(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64}, float32(0.8), 2, float32(0.9), float32(0.05), float32(1.1), uint64(1))
	f.Add([]byte{0, 0, 192, 127, 0, 0, 128, 255}, float32(1), 0, float32(0), float32(0), float32(0), uint64(2))
	f.Fuzz(func(t *testing.T, raw []byte, temp float32, topK int, topP, minP, rep float32, seed uint64) {
		n := len(raw) / 4
		if n == 0 || n > 4096 {
			return
		}
		l := make([]float32, n)
		for i := range l {
			l[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := Params{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, RepeatPenalty: rep, Seed: seed}
		hist := []int32{0, int32(n - 1), -5, int32(n)}
		a, b := New(p), New(p)
		dst := make([]float32, n)
		b.Probs(l, hist, dst)
		var sum float64
		for i, q := range dst {
			if !(q >= 0 && q <= 1) {
				t.Fatalf("%+v: p[%d] = %v", p, i, q)
			}
			sum += float64(q)
		}
		if math.Abs(sum-1) > 1e-4 {
			t.Fatalf("%+v: Probs sum %v (logits %v, probs %v)", p, sum, l, dst)
		}
		x, y := a.Sample(l, hist), b.Draw(dst, len(hist))
		if x != y || x < 0 || int(x) >= n {
			t.Fatalf("%+v: Sample %d; Draw(Probs) %d", p, x, y)
		}
	})
}
