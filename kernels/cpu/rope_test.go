package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// TestRoPEMatchesLlamaCpp rotates the queries of layer 0 of two reference
// models (5 positions, 4 heads of 64) and compares with llama.cpp's RoPE
// outputs for them (its CPU backend at commit c392e5094; testdata/rope-*):
// the synthetic Gemma 2 model (NeoX layout) and Llama one (adjacent
// pairs). The only differences left are where glibc's sinf/cosf are not
// correctly rounded (one angle here: 3 and 4 elements, by an ulp or so
// of the inputs);
// angles computed as exact powers in float64 differed in about 230 of the
// 1280.
func TestRoPEMatchesLlamaCpp(t *testing.T) {
	be, err := Open(kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	for _, tc := range []struct {
		name string
		neox bool
	}{{"neox", true}, {"pairs", false}} {
		t.Run(tc.name, func(t *testing.T) {
			in, want := readF32s(t, "rope-"+tc.name+"-in.f32"), readF32s(t, "rope-"+tc.name+"-out.f32")
			const rows = 5
			x := be.Alloc(rows, len(in)/rows)
			be.Upload(x, in)
			be.RoPE(x, []int32{0, 1, 2, 3, 4}, kernels.RoPE{HeadDim: 64, NeoX: tc.neox})
			have := make([]float32, len(in))
			be.Download(have, x)
			diff := 0
			for i := range have {
				if have[i] == want[i] {
					continue
				}
				diff++
				// A sine or cosine one ulp off moves the output by about
				// an ulp of the inputs' size.
				if d := math.Abs(float64(have[i] - want[i])); d > 4e-7*max(1, math.Abs(float64(want[i]))) {
					t.Errorf("element %d: %v; llama.cpp %v", i, have[i], want[i])
				}
			}
			t.Logf("%d of %d elements differ from llama.cpp's", diff, len(have))
			if diff > 8 {
				t.Errorf("%d of %d elements differ from llama.cpp's; want at most 8", diff, len(have))
			}
		})
	}
}

func readF32s(t *testing.T, name string) []float32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestRoPEKernels checks the selected rotation kernels against the Go
// loops bit for bit, and rotate's fast path against fma32 on random
// values, so every path fuses as GGML's C does.
func TestRoPEKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 64))
	for _, n := range []int{2, 8, 16, 24, 64, 128, 12} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			v, c, s := randVec(r, 2*n), randVec(r, n), randVec(r, n)
			want := append([]float32(nil), v...)
			ropeHalvesGo(want, c, s)
			ropeHalves(v, c, s)
			for i := range v {
				if !sameBits(v[i], want[i]) {
					t.Fatalf("ropeHalves element %d: have %g; want %g", i, v[i], want[i])
				}
			}
			v, c, s = randVec(r, 2*n), randVec(r, 2*n), randVec(r, 2*n)
			for i := 0; i < 2*n; i += 2 {
				c[i+1], s[i+1] = c[i], s[i]
			}
			want = append(want[:0], v...)
			ropePairsGo(want, c, s)
			ropePairs(v, c, s)
			for i := range v {
				if !sameBits(v[i], want[i]) {
					t.Fatalf("ropePairs element %d: have %g; want %g", i, v[i], want[i])
				}
			}
		})
	}
	for range 100000 {
		a, b, c, s := r.Float32()*4-2, r.Float32()*4-2, r.Float32()*2-1, r.Float32()*2-1
		x, y := rotate(a, b, c, s)
		if wx, wy := fma32(a, c, -(b*s)), fma32(a, s, b*c); !sameBits(x, wx) || !sameBits(y, wy) {
			t.Fatalf("rotate(%g, %g, %g, %g) = %g, %g; want %g, %g", a, b, c, s, x, y, wx, wy)
		}
	}
}
