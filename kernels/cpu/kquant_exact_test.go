//go:build amd64 && !amd64.v3 && !noasm

package cpu

// exactRef: below GOAMD64=v3 the compiler does not fuse the Go
// reference's multiply-adds, so it rounds every operation as the assembly
// does and the two agree bit for bit.
const exactRef = true
