//go:build !amd64 || noasm

package cpu

// setAttnAsm has nothing to select where there is no assembly.
func setAttnAsm() {}
