package kernels

import (
	"math"
	"sync"
)

// Element-wise ops that some architectures need and the required Backend
// does not hold. Each is an optional one-method interface; the functions
// of the same name call it where the backend has it and otherwise compute
// the reference on the host (Download, the Ref function, Upload), so every
// backend runs every architecture, the ones without the op more slowly.
// Every op computes each element on its own, so a row's result never
// depends on the batch it is in.

// Scaler is an optional Backend op: x[i] *= s for every element of the F32
// tensor x, in float32 (ScaleRef).
type Scaler interface {
	Scale(x Tensor, s float32)
}

// SoftCapper is an optional Backend op: x[i] = c·tanh(x[i]·(1/c)) for every
// element of the F32 tensor x, in float32 (SoftCapRef): Gemma 2's final
// logit soft-capping.
type SoftCapper interface {
	SoftCap(x Tensor, c float32)
}

// GeGLUer is an optional Backend op: dst[i] = GELU(gate[i])·up[i] for F32
// tensors of one shape (GeGLURef); dst may alias gate or up. GELU is
// GGML's: the tanh approximation read from a half-precision table.
type GeGLUer interface {
	GeGLU(dst, gate, up Tensor)
}

// Scale sets x *= s through b's Scaler, or on the host.
func Scale(b Backend, x Tensor, s float32) {
	if op, ok := b.(Scaler); ok {
		op.Scale(x, s)
		return
	}
	hostMap(b, x, func(v []float32) { ScaleRef(v, s) })
}

// SoftCap caps x through b's SoftCapper, or on the host.
func SoftCap(b Backend, x Tensor, c float32) {
	if op, ok := b.(SoftCapper); ok {
		op.SoftCap(x, c)
		return
	}
	hostMap(b, x, func(v []float32) { SoftCapRef(v, c) })
}

// GeGLU sets dst = GELU(gate)·up through b's GeGLUer, or on the host.
func GeGLU(b Backend, dst, gate, up Tensor) {
	if op, ok := b.(GeGLUer); ok {
		op.GeGLU(dst, gate, up)
		return
	}
	r, c := gate.Dims()
	g, u := make([]float32, r*c), make([]float32, r*c)
	b.Download(g, gate)
	b.Download(u, up)
	GeGLURef(g, g, u)
	b.Upload(dst, g)
}

func hostMap(b Backend, x Tensor, f func([]float32)) {
	r, c := x.Dims()
	v := make([]float32, r*c)
	b.Download(v, x)
	f(v)
	b.Upload(x, v)
}

// ScaleRef sets x[i] *= s.
func ScaleRef(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// SoftCapRef sets x[i] = c·tanh(x[i]·(1/c)), each step rounded to float32
// as GGML's scale, tanh and scale ops round them, tanh as Tanhf.
func SoftCapRef(x []float32, c float32) {
	inv := 1 / c
	for i, v := range x {
		x[i] = Tanhf(v*inv) * c
	}
}

// GeGLURef sets dst[i] = GELU(gate[i])·up[i]; dst may alias gate or up.
func GeGLURef(dst, gate, up []float32) {
	gate, up = gate[:len(dst)], up[:len(dst)]
	for i := range dst {
		dst[i] = GELU(gate[i]) * up[i]
	}
}

// GELU is GGML's CPU GELU: 0 at or below −10, x at or above 10, and in
// between the tanh approximation
//
//	0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))
//
// looked up in a table indexed by x rounded to half precision, whose
// entries are half-precision too. Matching that rounding is what makes a
// Gemma model's logits agree with llama.cpp's.
func GELU(x float32) float32 {
	switch {
	case x <= -10:
		return 0
	case x >= 10:
		return x
	case x != x:
		return x
	}
	geluOnce.Do(initGELU)
	return F16ToF32(geluTable[F32ToF16(x)])
}

var (
	geluOnce  sync.Once
	geluTable []uint16
)

func initGELU() {
	geluTable = make([]uint16, 1<<16)
	const (
		sqrt2OverPi = float32(0.79788456080286535587989211986876)
		coefA       = float32(0.044715)
	)
	// GGML's C is compiled with multiply-adds contracted: 1 + a·x·x is
	// one fused operation on (a·x)·x, the rest rounds op by op. With that
	// and Tanhf every entry equals llama.cpp's table.
	for i := range geluTable {
		x := F16ToF32(uint16(i))
		ax := coefA * x
		inner := float32(math.FMA(float64(ax), float64(x), 1))
		g := float32(0.5*x) * (1 + Tanhf(float32(sqrt2OverPi*x)*inner))
		geluTable[i] = F32ToF16(g)
	}
}
