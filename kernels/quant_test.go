package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{0, 0x0000}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000},
		{65504, 0x7bff}, {1e6, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{6.103515625e-05, 0x0400},  // smallest normal
		{5.960464477539063e-08, 1}, // smallest subnormal
		{1.0009765625, 0x3c01},
		{1.00048828125, 0x3c00}, // halfway: ties to even (down)
		{1.00146484375, 0x3c02}, // halfway: ties to even (up)
	} {
		if h := F32ToF16(tc.f); h != tc.h {
			t.Errorf("F32ToF16(%g) = %#04x; want %#04x", tc.f, h, tc.h)
		}
	}
	// Every finite half converts to float32 and back unchanged.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if f := F16ToF32(uint16(h)); !math.IsNaN(float64(f)) {
				t.Fatalf("F16ToF32(%#04x) = %g; want NaN", h, f)
			}
			continue
		}
		if back := F32ToF16(F16ToF32(uint16(h))); back != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, F16ToF32(uint16(h)), back)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82}} {
		if h := F32ToBF16(tc.f); h != tc.h {
			t.Errorf("F32ToBF16(%g) = %#04x; want %#04x", tc.f, h, tc.h)
		}
		if f := BF16ToF32(F32ToBF16(tc.f)); math.Abs(float64(f-tc.f)) > 0.01*math.Abs(float64(tc.f)) {
			t.Errorf("BF16 round trip of %g = %g", tc.f, f)
		}
	}
	if !math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))) {
		t.Error("BF16 lost a NaN")
	}
}

// TestQuantizeRoundTrip checks each type's worst-case error: a Q8_0 value
// is within half a step (max|x|/127/2) of the original, a Q4_0 value within
// a step of max|x|/8.
func TestQuantizeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 4*QK)
	for i := range src {
		src[i] = float32(r.NormFloat64()) * float32(1+i/QK)
	}
	src[5] = 0 // a zero inside a block
	for i := 2 * QK; i < 3*QK; i++ {
		src[i] = 0 // an all-zero block must not divide by zero
	}
	for _, tc := range []struct {
		dt   DType
		step func(amax float32) float32
	}{
		{F32, func(float32) float32 { return 0 }},
		{F16, func(a float32) float32 { return a / 1024 }},
		{BF16, func(a float32) float32 { return a / 128 }},
		{Q8_0, func(a float32) float32 { return a / 127 * 0.51 }},
		{Q4_0, func(a float32) float32 { return a / 8 * 1.01 }},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			b, err := Quantize(tc.dt, src)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := tc.dt.RowBytes(len(src)); len(b) != n {
				t.Fatalf("have %d bytes; want %d", len(b), n)
			}
			got := make([]float32, len(src))
			if err := Dequantize(tc.dt, b, got); err != nil {
				t.Fatal(err)
			}
			for blk := 0; blk < len(src)/QK; blk++ {
				var amax float32
				for _, v := range src[blk*QK : (blk+1)*QK] {
					amax = max(amax, float32(math.Abs(float64(v))))
				}
				for i := blk * QK; i < (blk+1)*QK; i++ {
					if d := math.Abs(float64(got[i] - src[i])); d > float64(tc.step(amax))+1e-6 {
						t.Fatalf("element %d: have %g; want %g ± %g", i, got[i], src[i], tc.step(amax))
					}
				}
			}
		})
	}
}

func TestRowBytesErrors(t *testing.T) {
	for _, tc := range []struct {
		dt   DType
		cols int
	}{{Q8_0, 33}, {Q4_0, 16}, {DType(99), 32}, {F32, -1}} {
		if _, err := tc.dt.RowBytes(tc.cols); err == nil {
			t.Errorf("RowBytes(%v, %d): have nil error; want one", tc.dt, tc.cols)
		}
	}
	if err := Dequantize(Q8_0, make([]byte, 33), make([]float32, 32)); err == nil {
		t.Error("Dequantize with a short buffer: have nil error; want one")
	}
}

func TestRegistry(t *testing.T) {
	Register("test-registry", func(Options) (Backend, error) { return nil, nil })
	for _, bad := range []func(){
		func() { Register("", func(Options) (Backend, error) { return nil, nil }) },
		func() { Register("x-nil", nil) },
		func() { Register("test-registry", func(Options) (Backend, error) { return nil, nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Register: have no panic; want one")
				}
			}()
			bad()
		}()
	}
	if _, err := Open("no-such-backend", Options{}); err == nil {
		t.Error("Open of an unknown backend: have nil error; want one")
	}
}

// TestQuantizeRoundTripGGML checks that the encoders of the GGML
// quantizations make blocks that decode near their input: the relative RMS
// error stays within what the type's bits allow (simple scale choices, not
// GGML's search, so the bounds are loose).
func TestQuantizeRoundTripGGML(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 4*QKK)
	for i := range src {
		src[i] = float32(r.NormFloat64()) * float32(1+i/QKK)
	}
	for i := QKK; i < QKK+64; i++ {
		src[i] = 0 // zero sub-blocks must not divide by zero
	}
	for _, tc := range []struct {
		dt  DType
		rms float64
	}{
		{Q4_1, 0.12}, {Q5_0, 0.06}, {Q5_1, 0.06}, {IQ4_NL, 0.12},
		{Q2_K, 0.45}, {Q3_K, 0.25}, {Q4_K, 0.12}, {Q5_K, 0.06}, {Q6_K, 0.03}, {IQ4_XS, 0.12},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			b, err := Quantize(tc.dt, src)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := tc.dt.RowBytes(len(src)); len(b) != n {
				t.Fatalf("have %d bytes; want %d", len(b), n)
			}
			got := make([]float32, len(src))
			if err := Dequantize(tc.dt, b, got); err != nil {
				t.Fatal(err)
			}
			var se, ss float64
			for i, v := range src {
				d := float64(got[i] - v)
				se += d * d
				ss += float64(v) * float64(v)
				if math.IsNaN(float64(got[i])) {
					t.Fatalf("element %d decodes to NaN", i)
				}
			}
			for i := QKK; i < QKK+64; i++ {
				if math.Abs(float64(got[i])) > 0.5 {
					t.Errorf("zero element %d decodes to %g", i, got[i])
				}
			}
			if e := math.Sqrt(se / ss); e > tc.rms {
				t.Errorf("relative RMS error %.4f; want ≤ %g", e, tc.rms)
			}
		})
	}
}
