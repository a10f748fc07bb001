//go:build cuda

package main

// The cuda build of specgate (make cuda: bin/specgate-cuda) adds the CUDA
// backend, selected with --backend cuda. It is a separate binary because
// the CUDA driver library exits the process at start where there is no GPU.
import _ "github.com/specgate/specgate/kernels/cuda"
