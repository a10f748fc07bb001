package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/kernelstest"
)

func open(tb testing.TB, threads int) *Backend {
	tb.Helper()
	b, err := Open(kernels.Options{Threads: threads})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	for _, threads := range []int{1, 2, 0} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			kernelstest.Run(t, open(t, threads))
		})
	}
	t.Run("go_kernels", func(t *testing.T) {
		defer useAsm(true)
		useAsm(false)
		kernelstest.Run(t, open(t, 2))
	})
	// The batch paths of MatMul: the multi-row kernels for every batch,
	// and the tile path with the Go tile kernels (the default above runs
	// the VNNI or AVX2 ones where the CPU has them).
	t.Run("no_tiles", func(t *testing.T) {
		defer useAsm(true)
		useAsm(true)
		useTiles(tilesOff)
		kernelstest.Run(t, open(t, 2))
	})
	t.Run("go_tiles", func(t *testing.T) {
		defer useAsm(true)
		useAsm(false)
		useTiles(tilesGo)
		kernelstest.Run(t, open(t, 2))
	})
	// On a VNNI CPU, the kernels AVX2-only CPUs run.
	t.Run("avx2", func(t *testing.T) {
		defer useAsm(true)
		if !useAVX2() {
			t.Skip("no VNNI: the default above runs the AVX2 kernels")
		}
		kernelstest.Run(t, open(t, 2))
	})
	// Q8_0 and Q4_0 weights in the layout the default does not use: GGML's rows
	// under the assembly, the ×8 groups under the Go kernels.
	t.Run("other_layout", func(t *testing.T) {
		defer useAsm(true)
		useAsm(true)
		useX8Layout(!x8Layout)
		kernelstest.Run(t, open(t, 2))
		useAsm(false)
		useX8Layout(!x8Layout)
		kernelstest.Run(t, open(t, 2))
	})
}

// TestBatchInvariance runs the bit-for-bit batch checks on every kernel
// set, and checks that they all compute the Go kernels' bits: a model's
// output is then the same on any CPU, in any batch.
func TestBatchInvariance(t *testing.T) {
	modes := []struct {
		name string
		set  func()
	}{
		{"asm", func() { useAsm(true) }},
		{"asm_avx2", func() { useAVX2() }}, // the same as asm without VNNI
		{"go_kernels", func() { useAsm(false) }},
		{"no_tiles", func() { useAsm(true); useTiles(tilesOff) }},
		{"go_tiles", func() { useAsm(false); useTiles(tilesGo) }},
		{"asm_other_layout", func() { useAsm(true); useX8Layout(!x8Layout) }},
		// The Go ×8 multi-row kernels, on unbiased weights and on the
		// biased ones VNNI hosts make, on any CPU.
		{"go_other_layout", func() { useAsm(false); useX8Layout(!x8Layout) }},
		{"go_x8_biased", func() { useAsm(false); useX8Layout(true); useX8Bias(true) }},
	}
	defer useAsm(true)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			m.set()
			for seed := range uint64(3) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					kernelstest.BatchInvariance(t, open(t, 1+int(seed)%3), seed)
				})
			}
		})
	}
	// The same random batch through every kernel set: one set of bits.
	r := rand.New(rand.NewPCG(41, 42))
	for _, dt := range kernelstest.WeightTypes {
		const n, m, k = 13, 37, 96
		data, err := kernels.Quantize(dt, randVals(r, m*k, 0.5))
		if err != nil {
			t.Fatal(err)
		}
		xs := randVals(r, n*k, 2)
		var ref []float32
		for _, mode := range modes {
			mode.set()
			b := open(t, 2)
			w, err := b.Weights(dt, m, k, data)
			if err != nil {
				t.Fatal(err)
			}
			x, d := b.Alloc(n, k), b.Alloc(n, m)
			b.Upload(x, xs)
			b.MatMul(d, x, w)
			have := make([]float32, n*m)
			b.Download(have, d)
			if ref == nil {
				ref = have
			} else if !slices.Equal(have, ref) {
				t.Errorf("%v: the %s kernels' MatMul differs from the asm kernels'", dt, mode.name)
			}
		}
	}
}

func TestRegistered(t *testing.T) {
	b, err := kernels.Open("cpu", kernels.Options{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if have := b.Name(); have != "cpu" {
		t.Errorf("Name: have %q; want cpu", have)
	}
	if have := b.(*Backend).Threads(); have != 3 {
		t.Errorf("Threads: have %d; want 3", have)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("have no panic; want one containing %q", want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("have panic %q; want one containing %q", msg, want)
		}
	}()
	f()
}

func TestMisuse(t *testing.T) {
	b := open(t, 2)
	w, err := b.Weights(kernels.F32, 2, 4, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	x := b.Alloc(2, 4)
	tests := []struct {
		name, want string
		f          func()
	}{
		{"write weights", "weight tensor", func() { b.Upload(w, make([]float32, 8)) }},
		{"matmul shape", "MatMul", func() { b.MatMul(b.Alloc(2, 3), x, w) }},
		{"slice range", "Slice", func() { b.Slice(x, 1, 3) }},
		{"gather index", "out of range", func() { b.Gather(b.Alloc(1, 4), w, []int32{2}) }},
		{"rope dims", "RoPE", func() { b.RoPE(x, []int32{0, 1}, kernels.RoPE{HeadDim: 3}) }},
		{"foreign tensor", "not a cpu tensor", func() { b.Add(x, x, fakeTensor{}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { mustPanic(t, tc.want, tc.f) })
	}
	b.Close()
	mustPanic(t, "after Close", func() { b.Add(x, x, x) })
}

type fakeTensor struct{ kernels.Tensor }

// TestWeightsInPlace checks that weights are used without copying and never
// written.
func TestWeightsInPlace(t *testing.T) {
	b := open(t, 2)
	vals := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	data, _ := kernels.Quantize(kernels.F32, vals)
	orig := string(data)
	w, err := b.Weights(kernels.F32, 2, 4, data)
	if err != nil {
		t.Fatal(err)
	}
	if &w.(*Tensor).F32()[0] != (*float32)(ptr(data)) {
		t.Errorf("aligned F32 weights were copied")
	}
	x := b.Alloc(2, 4)
	b.Upload(x, vals)
	b.MatMul(b.Alloc(2, 2), x, w)
	b.RMSNorm(x, x, b.Slice(w, 1, 2), 1e-5)
	b.Gather(x, w, []int32{1, 0})
	if string(data) != orig {
		t.Errorf("weight bytes changed")
	}
}

// TestSteadyStateAllocs checks that ops reuse their scratch memory.
func TestSteadyStateAllocs(t *testing.T) {
	b := open(t, 2)
	r := rand.New(rand.NewPCG(1, 1))
	const n, k, m = 8, 256, 512
	vals := make([]float32, m*k)
	for i := range vals {
		vals[i] = r.Float32() - 0.5
	}
	spec := kernels.KVSpec{Layers: 1, Blocks: 64, BlockSize: 16, Width: 64}
	c, _ := b.NewKV(spec)
	table := make([]int32, 64)
	for i := range table {
		table[i] = int32(i)
	}
	rows := make([]kernels.AttnRow, n)
	for i := range rows {
		rows[i] = kernels.AttnRow{Table: table, Len: int32(1000 + i)}
	}
	q := b.Alloc(n, 256)
	att := b.Alloc(n, 256)
	pos := make([]int32, n)
	for _, dt := range []kernels.DType{kernels.F32, kernels.Q8_0, kernels.Q4_0, kernels.F16, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K} {
		data, _ := kernels.Quantize(dt, vals)
		w, _ := b.Weights(dt, m, k, data)
		x, dst := b.Alloc(n, k), b.Alloc(n, m)
		w0 := b.Slice(w, 0, 1)
		run := func() {
			b.MatMul(dst, x, w)
			b.RMSNorm(x, x, w0, 1e-6)
			b.SwiGLU(dst, dst, dst)
			b.RoPE(q, pos, kernels.RoPE{HeadDim: 64, NeoX: true})
			b.Attention(att, q, c, 0, kernels.Attn{Heads: 4, KVHeads: 1, HeadDim: 64, Rows: rows})
		}
		if allocs := testing.AllocsPerRun(20, run); allocs != 0 {
			t.Errorf("%v: have %v allocations per step; want 0", dt, allocs)
		}
	}
	// Weight rows that end in a part of a group of eight (a vocabulary of
	// 32001) take the kernels' scratch, at batch 1 and past eight rows, in
	// either weight layout.
	const odd = m - 3
	for _, x8 := range []bool{true, false} {
		old := useX8Layout(x8)
		for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0, kernels.Q4_K, kernels.Q5_K, kernels.Q6_K} {
			data, _ := kernels.Quantize(dt, vals[:odd*k])
			w, _ := b.Weights(dt, odd, k, data)
			for _, rows := range []int{1, 2, 40} {
				x, dst := b.Alloc(rows, k), b.Alloc(rows, odd)
				if allocs := testing.AllocsPerRun(20, func() { b.MatMul(dst, x, w) }); allocs != 0 {
					t.Errorf("%v, ×8 layout %v, %d rows: have %v allocations per MatMul of %d weight rows; want 0", dt, x8, rows, allocs, odd)
				}
			}
		}
		useX8Layout(old)
	}
}

// TestMatMulMany checks the fused form against one MatMul per weight: the
// same activations, quantized once, must give bit-identical outputs.
func TestMatMulMany(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	be := open(t, 2)
	const k = 96
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_0, kernels.F32} {
		for _, n := range []int{1, 3, 4, 8, 13} {
			t.Run(fmt.Sprintf("%v/n=%d", dt, n), func(t *testing.T) {
				var ws, many, one []kernels.Tensor
				for _, m := range []int{64, 32, 36} {
					var data []byte
					if dt == kernels.F32 {
						q, err := kernels.Quantize(kernels.F32, randVec(r, m*k))
						if err != nil {
							t.Fatal(err)
						}
						data = q
					} else {
						for range m {
							data = append(data, randBlocks(r, dt, k/kernels.QK, false)...)
						}
					}
					w, err := be.Weights(dt, m, k, data)
					if err != nil {
						t.Fatal(err)
					}
					ws = append(ws, w)
					many, one = append(many, be.Alloc(n, m)), append(one, be.Alloc(n, m))
				}
				x := be.Alloc(n, k)
				be.Upload(x, randVec(r, n*k))
				be.MatMulMany(many, x, ws)
				for i, w := range ws {
					be.MatMul(one[i], x, w)
					m, _ := w.Dims()
					have, want := make([]float32, n*m), make([]float32, n*m)
					be.Download(have, many[i])
					be.Download(want, one[i])
					for j := range want {
						if have[j] != want[j] {
							t.Fatalf("weight %d element %d: have %g; want %g", i, j, have[j], want[j])
						}
					}
				}
			})
		}
	}
}
