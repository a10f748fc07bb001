package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/kernels"
)

// The ×8 K-quant kernels are checked against the row-major Go reference on
// random shapes rather than a table, because their bugs live in the
// combinations: a partial last group, a slice that starts inside a group,
// a destination that is itself a slice, several threads splitting groups,
// MatMulMany mixing types. A result must equal the reference bit for bit;
// where a weight's scale is Inf or NaN only "NaN for NaN" is promised (x86
// keeps the first operand's NaN, and the compiler may swap operands).

// sentinelBits fills the rows around a destination; any other value there
// after a MatMul is a write outside it.
const sentinelBits = 0x7fc0dead

// refKMatMul is x·wᵀ by the Go reference on row-major K-quant rows.
func refKMatMul(dt kernels.DType, rows []byte, rb, m int, x []float32, n, k int) []float32 {
	nb := k / superBlocks
	out := make([]float32, n*m)
	q, d, bs := make([]int8, k), make([]float32, nb), make([]int16, k/16)
	dot := kDotsGo[dt]
	for a := range n {
		quantRowQ8KGo(q, d, bs, x[a*k:(a+1)*k])
		ar := actRow{q: q, d: d, bs: bs}
		for r := range m {
			out[a*m+r] = dot(rows[r*rb:(r+1)*rb], ar)
		}
	}
	return out
}

// propWeights returns m row-major rows of k values of type dt: quantized
// from floats of one of three scales, or random blocks whose F16 scales are
// small, huge or special (Inf, NaN, ±0, subnormal).
func propWeights(r *rand.Rand, dt kernels.DType, m, k int) []byte {
	if r.IntN(2) == 0 {
		vals := make([]float32, m*k)
		sc := []float32{1, 1e-3, 50}[r.IntN(3)]
		for i := range vals {
			vals[i] = float32(r.NormFloat64()) * sc
		}
		if m > 2 && r.IntN(3) == 0 {
			clear(vals[k : 2*k])
		}
		data, err := kernels.Quantize(dt, vals)
		if err != nil {
			panic(err)
		}
		return data
	}
	nb := m * (k / superBlocks)
	data := randBlocks(r, dt, nb, r.IntN(2) == 0)
	bb := dt.BlockBytes()
	mode := r.IntN(5)
	for b := range nb {
		for _, off := range f16Fields[dt] {
			v := kernels.F32ToF16(r.Float32()*0.02 - 0.01)
			switch mode {
			case 3:
				v = kernels.F32ToF16((r.Float32()*2 - 1) * 65504)
			case 4:
				v = []uint16{0x7c00, 0xfc00, 0x7e00, 0x8000, 0x0001, 0x7bff, 0xfbff, v}[r.IntN(8)]
			}
			binary.LittleEndian.PutUint16(data[b*bb+off:], v)
		}
	}
	return data
}

// propActs returns n rows of k activations with, now and then, an all-zero
// super-block, special values, or a row of exact halves (rounding ties).
func propActs(r *rand.Rand, n, k int) []float32 {
	x := make([]float32, n*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	if n > 1 && r.IntN(3) == 0 {
		clear(x[k : k+superBlocks])
	}
	if r.IntN(4) == 0 {
		nan, inf := float32(math.NaN()), float32(math.Inf(1))
		sp := []float32{0, float32(math.Copysign(0, -1)), nan, inf, -inf, 3e38, -3e38, 1e-40, -1e-40, 1e-45}
		for range 1 + r.IntN(8) {
			x[r.IntN(len(x))] = sp[r.IntN(len(sp))]
		}
	}
	if r.IntN(4) == 0 {
		for i := range k {
			x[i] = float32(r.IntN(255)-127) / 2
		}
	}
	return x
}

// sentinelDst returns an n×m destination as rows [pre, pre+n) of a parent
// full of sentinels, and the parent.
func sentinelDst(b *Backend, n, m, pre, post int) (kernels.Tensor, *Tensor) {
	p := b.Alloc(pre+n+post, m).(*Tensor)
	for i := range p.f32 {
		p.f32[i] = math.Float32frombits(sentinelBits)
	}
	return b.Slice(p, pre, pre+n), p
}

func checkSentinelDst(t *testing.T, what string, parent *Tensor, pre, n, m int, want []float32) bool {
	t.Helper()
	for i, v := range parent.f32 {
		row := i / m
		if row < pre || row >= pre+n {
			if math.Float32bits(v) != sentinelBits {
				t.Errorf("%s: wrote outside the destination: row %d col %d = %g", what, row, i%m, v)
				return false
			}
			continue
		}
		w := want[(row-pre)*m+i%m]
		if math.Float32bits(v) != math.Float32bits(w) && !(v != v && w != w) {
			t.Errorf("%s: [%d][%d] = %g (%#x), want %g (%#x)", what, row-pre, i%m, v, math.Float32bits(v), w, math.Float32bits(w))
			return false
		}
	}
	return true
}

func TestX8KProperty(t *testing.T) {
	iters := 60
	if testing.Short() {
		iters = 15
	}
	initTables()
	types := []kernels.DType{kernels.Q4_K, kernels.Q5_K, kernels.Q6_K}
	for _, x8 := range []bool{true, false} {
		t.Run(fmt.Sprintf("x8=%v", x8), func(t *testing.T) {
			defer useX8Layout(useX8Layout(x8))
			backends := map[int]*Backend{}
			r := rand.New(rand.NewPCG(1, 2))
			for it := range iters {
				threads := 1 + r.IntN(5)
				b := backends[threads]
				if b == nil {
					b = open(t, threads)
					backends[threads] = b
				}
				dt := types[r.IntN(len(types))]
				m, k, n := 1+r.IntN(40), superBlocks*(1+r.IntN(8)), 1+r.IntN(40)
				rb, _ := dt.RowBytes(k)
				data := propWeights(r, dt, m, k)
				w, err := b.Weights(dt, m, k, data)
				if err != nil {
					t.Fatal(err)
				}
				if got := w.(*Tensor).x8; got != x8 {
					t.Fatalf("layout ×8 %v, tensor has %v", x8, got)
				}
				x := propActs(r, n, k)
				xt := b.Alloc(n, k)
				b.Upload(xt, x)
				name := fmt.Sprintf("case %d %v m=%d k=%d n=%d threads=%d", it, dt, m, k, n, threads)

				pre, post := r.IntN(3), r.IntN(3)
				d, p := sentinelDst(b, n, m, pre, post)
				b.MatMul(d, xt, w)
				if !checkSentinelDst(t, name+" whole", p, pre, n, m, refKMatMul(dt, data, rb, m, x, n, k)) {
					return
				}
				for range 3 {
					r0 := r.IntN(m)
					if r.IntN(2) == 0 {
						r0 &^= 7
					}
					r1 := r0 + 1 + r.IntN(m-r0)
					s, sm := b.Slice(w, r0, r1), r1-r0
					pre, post := r.IntN(2), r.IntN(2)
					d, p := sentinelDst(b, n, sm, pre, post)
					b.MatMul(d, xt, s)
					what := fmt.Sprintf("%s slice [%d,%d)", name, r0, r1)
					if !checkSentinelDst(t, what, p, pre, n, sm, refKMatMul(dt, data[r0*rb:], rb, sm, x, n, k)) {
						return
					}
					idx := []int32{int32(r.IntN(sm)), int32(sm - 1), 0}
					g := b.Alloc(len(idx), k).(*Tensor)
					b.Gather(g, s, idx)
					ref := make([]float32, k)
					for i, id := range idx {
						convertRow(ref, dt, data[(r0+int(id))*rb:(r0+int(id)+1)*rb])
						for j := range k {
							if math.Float32bits(ref[j]) != math.Float32bits(g.f32[i*k+j]) {
								t.Errorf("%s: Gather row %d col %d = %g, want %g", what, id, j, g.f32[i*k+j], ref[j])
								return
							}
						}
					}
				}
				// MatMulMany over 1-4 weights of mixed types, sliced on or
				// off a group boundary.
				type many struct {
					dt     kernels.DType
					data   []byte
					rows   int
					parent *Tensor
					pre    int
				}
				var ws, ds []kernels.Tensor
				var cases []many
				whole := r.IntN(2) == 0
				for range 1 + r.IntN(4) {
					wdt := types[r.IntN(len(types))]
					wm := 1 + r.IntN(40)
					if whole {
						wm = 8 * (1 + r.IntN(5))
					}
					wrb, _ := wdt.RowBytes(k)
					wdata := propWeights(r, wdt, wm+8, k)
					w2, err := b.Weights(wdt, wm+8, k, wdata)
					if err != nil {
						t.Fatal(err)
					}
					off := 0
					if r.IntN(2) == 0 {
						off = 8 * r.IntN(2)
						if !whole && r.IntN(2) == 0 {
							off = r.IntN(8)
						}
					}
					ws = append(ws, b.Slice(w2, off, off+wm))
					pre := r.IntN(2)
					d, p := sentinelDst(b, n, wm, pre, r.IntN(2))
					ds = append(ds, d)
					cases = append(cases, many{wdt, wdata[off*wrb : (off+wm)*wrb], wm, p, pre})
				}
				b.MatMulMany(ds, xt, ws)
				for i, c := range cases {
					rb, _ := c.dt.RowBytes(k)
					what := fmt.Sprintf("%s MatMulMany[%d] %v m=%d", name, i, c.dt, c.rows)
					if !checkSentinelDst(t, what, c.parent, c.pre, n, c.rows, refKMatMul(c.dt, c.data, rb, c.rows, x, n, k)) {
						return
					}
				}
			}
		})
	}
}

// TestX8KSteadyStateAllocsOddRows adds to TestSteadyStateAllocs the row
// counts that leave a partial last group, for MatMul and MatMulMany.
func TestX8KSteadyStateAllocsOddRows(t *testing.T) {
	b := open(t, 3)
	r := rand.New(rand.NewPCG(5, 5))
	const k = 512
	defer useX8Layout(useX8Layout(true))
	for _, dt := range []kernels.DType{kernels.Q4_K, kernels.Q5_K, kernels.Q6_K} {
		for _, m := range []int{1, 5, 13, 37} {
			data, err := kernels.Quantize(dt, randVals(r, m*k, 1))
			if err != nil {
				t.Fatal(err)
			}
			w, err := b.Weights(dt, m, k, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 3, 5, 9, 40} {
				x, d1, d2 := b.Alloc(n, k), b.Alloc(n, m), b.Alloc(n, m)
				if a := testing.AllocsPerRun(10, func() { b.MatMul(d1, x, w) }); a != 0 {
					t.Errorf("%v m=%d n=%d: %v allocations per MatMul", dt, m, n, a)
				}
				ds, ws := []kernels.Tensor{d1, d2}, []kernels.Tensor{w, w}
				if a := testing.AllocsPerRun(10, func() { b.MatMulMany(ds, x, ws) }); a != 0 {
					t.Errorf("%v m=%d n=%d: %v allocations per MatMulMany", dt, m, n, a)
				}
			}
		}
	}
}
