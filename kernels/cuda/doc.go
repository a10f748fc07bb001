// Package cuda is the NVIDIA GPU implementation of kernels.Backend, on the
// CUDA driver API through gorgonia.org/cu. It registers itself as "cuda".
//
// Everything that touches the driver is behind the `cuda` build tag:
// gorgonia.org/cu initialises the driver when its package loads and exits
// the process when that fails, so a binary that links it cannot start on a
// machine without a GPU. The default build sees only this file and the PTX
// staleness test; `make cuda` builds the backend into bin/specgate-cuda and
// its conformance test into bin/kernels-cuda.test.
//
// The device code is kernels.cu, compiled by `make ptx` to PTX for sm_80 and
// sm_90 (kernels_sm80.ptx, kernels_sm90.ptx), committed with ptx.stamp, and
// embedded; the driver JIT-compiles it for the device at Open. Matrix
// products are kernels of their own (tensor-core mma for F16/BF16, dp4a for
// Q8_0/Q4_0): nothing links cuBLAS, so the binaries need only the driver
// (libcuda.so.1) at run time. NOTES.md describes each kernel and its
// memory-bandwidth floor.
package cuda
