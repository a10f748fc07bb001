//go:build !amd64 || noasm

package cpu

// haveAsm is false where there is no assembly: the Go kernels run.
const haveAsm = false

func setAsm() {}
