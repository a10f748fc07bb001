//go:build cuda

package cuda

// This file holds the few driver calls gorgonia.org/cu does not wrap, or
// wraps in a way that does not fit a step loop: kernel launches from a
// reusable C parameter block (cu's Launch mallocs per call and copies
// exactly 8 bytes per parameter, so struct parameters cannot pass), pinned
// host memory, and stream capture into CUDA graphs.

/*
#cgo LDFLAGS: -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs
#include <cuda.h>
#include <stdlib.h>

static CUresult sg_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
		unsigned shm, CUstream s, void **params) {
	return cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, shm, s, params, NULL);
}

static CUresult sg_host_alloc(void **p, size_t n) {
	return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
}

static CUresult sg_host_free(void *p) { return cuMemFreeHost(p); }

static CUresult sg_host_dev(CUdeviceptr *d, void *p) { return cuMemHostGetDevicePointer(d, p, 0); }

static CUresult sg_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

static CUresult sg_end_capture(CUstream s, CUgraph *g) { return cuStreamEndCapture(s, g); }

static CUresult sg_instantiate(CUgraphExec *e, CUgraph g) {
	return cuGraphInstantiate(e, g, NULL, NULL, 0);
}

static CUresult sg_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
static CUresult sg_graph_destroy(CUgraph g) { return cuGraphDestroy(g); }
static CUresult sg_exec_destroy(CUgraphExec e) { return cuGraphExecDestroy(e); }

static CUresult sg_set_smem(CUfunction f, int n) {
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, n);
}

static const char *sg_error_name(CUresult r) {
	const char *s = NULL;
	cuGetErrorName(r, &s);
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// maxParams is the most 8-byte parameter slots a launch may fill.
const maxParams = 32

// params is a launch's parameter block in C memory: slot i holds a value
// (an int or float in its low bytes, little-endian) and ptrs[i] points at
// slot i, as cuLaunchKernel's kernelParams wants. A struct parameter
// occupies consecutive slots from slot 0 and ptrs[0] points at it.
type params struct {
	slots *[maxParams]uint64
	ptrs  *[maxParams]unsafe.Pointer
	n     int
}

func newParams() params {
	s := (*[maxParams]uint64)(C.calloc(maxParams, 8))
	p := (*[maxParams]unsafe.Pointer)(C.calloc(maxParams, C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	for i := range p {
		p[i] = unsafe.Pointer(&s[i])
	}
	return params{slots: s, ptrs: p}
}

func (p *params) free() {
	C.free(unsafe.Pointer(p.slots))
	C.free(unsafe.Pointer(p.ptrs))
	p.slots, p.ptrs = nil, nil
}

func cuStream(s cu.Stream) C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&s)) }

func cuFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }

func check(what string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	name := C.sg_error_name(r)
	if name == nil {
		return fmt.Errorf("cuda: %s: error %d", what, int(r))
	}
	return fmt.Errorf("cuda: %s: %s", what, C.GoString(name))
}

func launchRaw(f cu.Function, gx, gy, gz, bx, shm int, s cu.Stream, p *params) error {
	return check("launch", C.sg_launch(cuFunction(f), C.uint(gx), C.uint(gy), C.uint(gz), C.uint(bx),
		C.uint(shm), cuStream(s), (*unsafe.Pointer)(unsafe.Pointer(p.ptrs))))
}

// hostAlloc returns n bytes of pinned, device-mapped host memory and the
// device address it has there (the same address under unified addressing).
func hostAlloc(n int) (unsafe.Pointer, cu.DevicePtr, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.sg_host_alloc(&p, C.size_t(n))); err != nil {
		return nil, 0, err
	}
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.sg_host_dev(&d, p)); err != nil {
		C.sg_host_free(p)
		return nil, 0, err
	}
	return p, cu.DevicePtr(d), nil
}

func hostFree(p unsafe.Pointer) error { return check("cuMemFreeHost", C.sg_host_free(p)) }

func setMaxDynamicShared(f cu.Function, n int) error {
	return check("cuFuncSetAttribute", C.sg_set_smem(cuFunction(f), C.int(n)))
}

type graphExec struct {
	g C.CUgraph
	e C.CUgraphExec
}

func beginCapture(s cu.Stream) error {
	return check("cuStreamBeginCapture", C.sg_begin_capture(cuStream(s)))
}

func endCapture(s cu.Stream) (*graphExec, error) {
	var g graphExec
	if err := check("cuStreamEndCapture", C.sg_end_capture(cuStream(s), &g.g)); err != nil {
		return nil, err
	}
	if err := check("cuGraphInstantiate", C.sg_instantiate(&g.e, g.g)); err != nil {
		C.sg_graph_destroy(g.g)
		return nil, err
	}
	return &g, nil
}

func (g *graphExec) launch(s cu.Stream) error {
	return check("cuGraphLaunch", C.sg_graph_launch(g.e, cuStream(s)))
}

func (g *graphExec) destroy() {
	C.sg_exec_destroy(g.e)
	C.sg_graph_destroy(g.g)
}
