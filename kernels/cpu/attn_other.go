//go:build !amd64 || noasm

package cpu

// setAttnAsm has nothing to select where there is no assembly.
func setAttnAsm() {}

// The grouped kernels exist only in assembly; groupedG2 stays false, so
// Attention never calls these.
func spreadG2(dst []float32, kv []uint16, slots []int32, stride int) {
	panic("cpu: no grouped attention kernels")
}

func dotsG2(kx, qt, s []float32, nrows, qrow, spos, srow int) {
	panic("cpu: no grouped attention kernels")
}

func axpysG2(vx, w, acc []float32, wpos, wrow int) { panic("cpu: no grouped attention kernels") }

func transpose8(dst, src []float32, n, dstride, sstride int) {
	panic("cpu: no grouped attention kernels")
}
