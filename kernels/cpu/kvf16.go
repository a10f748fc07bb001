package cpu

import (
	"math"

	"github.com/specgate/specgate/kernels"
)

// f32ToF16Row converts len(dst) floats of src to IEEE half bits, as
// f32ToF16 does: StoreKV's conversion into an F16 cache.
var f32ToF16Row = f32ToF16RowGo

// f32ToF16 converts f to half precision exactly as VCVTPS2PH with
// round-to-nearest-even does, so the Go and the assembly StoreKV fill a
// cache with the same bits: kernels.F32ToF16 (nearest, ties to even;
// overflow to ±Inf; halves' subnormals; float32 subnormals to ±0) for every
// value but NaN, which the instruction quiets keeping its sign and the top
// ten bits of its payload, where F32ToF16 returns the one quiet NaN 0x7e00.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff
	}
	return kernels.F32ToF16(f)
}

func f32ToF16RowGo(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = f32ToF16(f)
	}
}
