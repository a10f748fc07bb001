//go:build !amd64 || noasm

package cpu

// useAVX2 does nothing without the assembly kernels.
func useAVX2() bool { return false }
