package cpu

import "github.com/specgate/specgate/kernels"

var (
	_ kernels.Scaler       = (*Backend)(nil)
	_ kernels.SoftCapper   = (*Backend)(nil)
	_ kernels.GeGLUer      = (*Backend)(nil)
	_ kernels.AttnVariants = (*Backend)(nil)
)

// The element-wise ops of the architectures beyond Llama run the kernels
// package's reference loops in place: they touch each activation once, a
// small fraction of a layer's time next to its matmuls.

// Scale sets x *= s (kernels.ScaleRef).
func (b *Backend) Scale(x kernels.Tensor, s float32) {
	b.live()
	kernels.ScaleRef(writable(x, "Scale").f32, s)
}

// SoftCap sets x = c·tanh(x/c) (kernels.SoftCapRef).
func (b *Backend) SoftCap(x kernels.Tensor, c float32) {
	b.live()
	kernels.SoftCapRef(writable(x, "SoftCap").f32, c)
}

// GeGLU sets dst = GELU(gate)·up (kernels.GeGLURef); dst may be gate or up.
func (b *Backend) GeGLU(dst, gate, up kernels.Tensor) {
	b.live()
	d, g, u := writable(dst, "GeGLU"), f32Tensor(gate, "GeGLU"), f32Tensor(up, "GeGLU")
	sameShape("GeGLU", d, g)
	sameShape("GeGLU", d, u)
	kernels.GeGLURef(d.f32, g.f32, u.f32)
}

// SupportsAttn reports that Attention and TreeAttention compute soft-capped
// and sliding-window attention.
func (b *Backend) SupportsAttn(kernels.Attn) bool { return true }
