//go:build !cuda

// Command specgate-cuda is specgate on an NVIDIA GPU; it needs the cuda
// build tag (make cuda). Built without it, it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "specgate-cuda: built without CUDA; build it with make cuda (go build -tags cuda)")
	os.Exit(1)
}
