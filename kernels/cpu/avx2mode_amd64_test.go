//go:build amd64 && !noasm

package cpu

// useAVX2 sets the assembly kernels an AVX2 CPU without AVX-512 runs
// (the AVX2 ×8, tile and F32 kernels), on a CPU that has VNNI or the
// 512-bit F32 kernels too, so that such a host tests what AVX2-only hosts
// run; it reports whether it did (false without either, where useAsm(true)
// sets them already).
func useAVX2() bool {
	if !haveVNNI && !haveF32Z {
		return false
	}
	vnni, f32z := haveVNNI, haveF32Z
	haveVNNI, haveF32Z = false, false
	defer func() { haveVNNI, haveF32Z = vnni, f32z }()
	useAsm(true)
	return true
}
