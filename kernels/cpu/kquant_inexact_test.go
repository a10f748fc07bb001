//go:build !amd64 || amd64.v3 || noasm

package cpu

// exactRef is false where the Go reference may fuse multiply-adds (or
// there is no assembly to compare).
const exactRef = false
