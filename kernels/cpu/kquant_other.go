//go:build !amd64 || noasm

package cpu

func setKDotsAsm() {}
