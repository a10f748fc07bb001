package cpu

import (
	"runtime"
	"sync"
	"time"
)

// MeasureBandwidth estimates the host's memory read bandwidth in bytes per
// second: one goroutine per CPU streams over its share of a buffer of the
// given size (make it much larger than the caches, e.g. 256 MiB) with the
// same vector loads MatMul uses, until dur has passed. A decode step that
// reads W weight bytes cannot take less than W / bandwidth.
func MeasureBandwidth(bytes int, dur time.Duration) (bytesPerSec float64) {
	initTables()
	threads := runtime.NumCPU()
	per := max(bytes/4/threads, 1024) &^ 3
	buf := make([]float32, per*threads)
	for i := range buf {
		buf[i] = 1 // touch every page before timing
	}
	var (
		wg    sync.WaitGroup
		total = make([]int64, threads)
		sink  = make([]float32, threads)
	)
	start := time.Now()
	deadline := start.Add(dur)
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := buf[t*per : (t+1)*per]
			var o [4]float32
			var sc gemmScratch
			for time.Now().Before(deadline) || total[t] == 0 {
				// Four weight rows against one activation row, as a
				// batch-1 decode reads them: each cache line once from
				// memory (the activation row is the first weight row).
				gemmF32(o[:], 4, part, false, 4, part, false, 1, per/4, &sc)
				sink[t] += o[0]
				total[t] += int64(len(part)) * 4
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var sum int64
	for _, n := range total {
		sum += n
	}
	runtime.KeepAlive(sink)
	return float64(sum) / elapsed
}
