//go:build !amd64 || noasm

package cpu

// haveAsm is false where there is no assembly: the Go kernels run.
const haveAsm = false

func setAsm() {}

// haveVNNI is false too: no tiled kernels but the Go ones.
const haveVNNI = false

func setVNNI() {}

func setTilesAVX2() {}

func setVecAsm() {}
