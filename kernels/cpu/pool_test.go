package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// countTask counts how often each item is run.
type countTask struct {
	hits    []atomic.Int32
	workers []atomic.Int32
}

func (c *countTask) run(w, lo, hi int) {
	c.workers[w].Add(1)
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
}

func TestPoolRunsEveryItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 4} {
		p := newPool(threads)
		c := &countTask{hits: make([]atomic.Int32, 1000), workers: make([]atomic.Int32, threads)}
		for job := range 3000 {
			n, grain := job%997+1, job%7+1
			if job%500 == 0 {
				// Let the helpers park, so waking them is covered too.
				time.Sleep(2 * spinFor)
			}
			p.run(c, n, grain)
			for i := range n {
				if have := c.hits[i].Swap(0); have != 1 {
					t.Fatalf("threads=%d job %d (n=%d grain=%d): item %d ran %d times; want 1", threads, job, n, grain, i, have)
				}
			}
		}
		p.stop()
	}
}

// TestRunEnd checks that a job's runs cover its chunks in order, each
// once, and differ in length by at most one chunk.
func TestRunEnd(t *testing.T) {
	for _, nruns := range []int{1, 2, 3, 4, 7} {
		for nchunks := range uint32(40) {
			start, short, long := uint32(0), nchunks, uint32(0)
			for r := range nruns {
				end := runEnd(r, nruns, nchunks)
				if end < start {
					t.Fatalf("runs=%d chunks=%d: run %d ends at %d, before its start %d", nruns, nchunks, r, end, start)
				}
				short, long = min(short, end-start), max(long, end-start)
				start = end
			}
			if start != nchunks {
				t.Errorf("runs=%d chunks=%d: the runs end at %d", nruns, nchunks, start)
			}
			if long-short > 1 {
				t.Errorf("runs=%d chunks=%d: runs of %d to %d chunks", nruns, nchunks, short, long)
			}
		}
	}
}
