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

// flightTask counts the chunks running at the moment, and spins in some of
// them long enough for run's wait to park.
type flightTask struct {
	inFlight atomic.Int32
}

func (f *flightTask) run(w, lo, hi int) {
	f.inFlight.Add(1)
	if lo%3 == 0 {
		for end := time.Now().Add(time.Duration(lo%7) * 20 * time.Microsecond); time.Now().Before(end); {
		}
	}
	f.inFlight.Add(-1)
}

// TestPoolRunReturnsAfterItsChunks checks that run never returns while a
// chunk of its job is still running, with chunks long enough for run to
// park and more workers than cores, so that helpers are descheduled at
// any point. (The window in which a helper, descheduled after finishing
// an earlier job's last chunk, could wake a later job's parked run is a
// few instructions wide: this test does not reach it reliably; tying the
// wake to the job's generation closes it by construction.)
func TestPoolRunReturnsAfterItsChunks(t *testing.T) {
	for _, threads := range []int{2, 4, 8} {
		p := newPool(threads)
		f := &flightTask{}
		for job := range 20000 {
			p.run(f, job%13+2, 1)
			if n := f.inFlight.Load(); n != 0 {
				p.stop()
				t.Fatalf("threads=%d job %d: run returned with %d chunks still running", threads, job, n)
			}
		}
		p.stop()
	}
}
