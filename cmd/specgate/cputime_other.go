//go:build !unix

package main

import "time"

// cpuTime is 0 where the platform does not say: bench --spec then prints
// no per-CPU-second figures.
func cpuTime() time.Duration { return 0 }
