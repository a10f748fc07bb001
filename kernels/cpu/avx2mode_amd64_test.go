//go:build amd64 && !noasm

package cpu

// useAVX2 sets the assembly kernels an AVX2 CPU without VNNI runs (the
// AVX2 ×8 and tile kernels), on a CPU that has VNNI too, so that a VNNI
// host tests what AVX2-only hosts run; it reports whether it did (false
// without VNNI, where useAsm(true) sets them already).
func useAVX2() bool {
	if !haveVNNI {
		return false
	}
	haveVNNI = false
	defer func() { haveVNNI = true }()
	useAsm(true)
	return true
}
