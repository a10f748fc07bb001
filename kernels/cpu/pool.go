package cpu

import (
	"sync"
	"sync/atomic"
	"time"
)

// task is one parallel op. run handles items [lo, hi) on worker w; workers
// have distinct ids in [0, threads), so w indexes per-worker scratch.
type task interface {
	run(w, lo, hi int)
}

// spinFor is how long an idle worker (or a caller waiting for its workers)
// polls before it parks. A forward pass issues ops back to back, microseconds
// apart; waking a parked goroutine costs about as much as a small op, so
// workers stay hot between them and only park once the pass is over.
const spinFor = 50 * time.Microsecond

// pool runs tasks on a fixed set of goroutines. The goroutine calling run is
// worker 0 and takes chunks like the others; helpers are workers 1..n-1.
//
// A job's chunks are cut into one run of consecutive chunks per worker.
// Each worker claims the chunks of its own run first, in order, then those
// left in the others' runs, so a worker's weight rows are one stream in
// memory, and a descheduled worker's share is still done by the others
// (taken from the front of its run: where the owner is only late, the two
// then alternate through the rest of it). A run's next chunk is claimed from its own word, which packs the job's
// generation (high 32 bits) with the chunk index, so a helper that wakes
// late, after its job is over, cannot claim from the next one by mistake.
// run returns once every chunk is finished; it never waits for a helper
// that has not claimed one.
//
// Handing chunks out round-robin from one counter had the two workers of a
// two-core Zen 5 host take alternate 64-row chunks of a weight: each
// kernel's prefetch then ran into the other worker's rows, and a
// speculative verification of five rows over a ~100M Q8_0 model's matrix
// products took 4.22-4.23 ms, against 2.67-3.11 ms with a run per worker
// (BenchmarkVerifyRows, two threads, the two ways alternating).
type pool struct {
	helpers []*helper
	exited  sync.WaitGroup

	// The current job; written by run before it opens the runs, and stable
	// until all its chunks are done. A helper reads nchunks before it has
	// claimed a chunk, possibly while run rewrites it, hence the atomic; its
	// claim then fails.
	task    task
	n       int
	grain   int
	nchunks atomic.Uint32

	runs    []claim       // a run of chunks per worker
	done    atomic.Uint32 // chunks finished in the current job
	stopped atomic.Bool
	// waiting is the generation of the job whose run is parked on finish,
	// or 0. Tied to the job so that a helper that finished the last chunk
	// of an earlier job, and was descheduled before it looked, cannot wake
	// a later job's run while that job's chunks are still running.
	waiting atomic.Uint64
	finish  chan struct{} // wakes a parked run
}

// closed, as a chunk index, is beyond any job's chunks.
const closed = 1<<32 - 1

// claim is one worker's run of chunks: gen<<32 | its next chunk. Spaced
// 128 bytes apart, so that no two claim words share a cache line (or an
// adjacent pair of lines) however the slice is aligned.
type claim struct {
	state atomic.Uint64
	_     [120]byte
}

// runEnd is where run r of a job of nchunks chunks among nruns runs ends
// (and run r+1 starts): the runs differ by at most one chunk.
func runEnd(r, nruns int, nchunks uint32) uint32 {
	return uint32(uint64(r+1) * uint64(nchunks) / uint64(nruns))
}

type helper struct {
	sleeping atomic.Bool
	wake     chan struct{}
}

func newPool(threads int) *pool {
	p := &pool{finish: make(chan struct{}, 1), runs: make([]claim, max(threads, 1))}
	for i := 1; i < threads; i++ {
		h := &helper{wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		p.exited.Add(1)
		go p.loop(i, h)
	}
	return p
}

// run calls t.run over [0, n) in chunks of grain items and returns when all
// of them are done. Jobs of a single chunk run on the caller alone.
func (p *pool) run(t task, n, grain int) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if n <= grain || len(p.helpers) == 0 {
		t.run(0, 0, n)
		return
	}
	// Close the previous job to claims before rewriting its fields: a
	// helper that loaded a run's state a moment ago then fails its CAS.
	gen := p.runs[0].state.Load() >> 32
	for r := range p.runs {
		p.runs[r].state.Store(gen<<32 | closed)
	}
	// Generations live in 32 bits, and 0 is none (waiting).
	if gen = (gen + 1) & (1<<32 - 1); gen == 0 {
		gen = 1
	}
	p.task, p.n, p.grain = t, n, grain
	nchunks := uint32((n + grain - 1) / grain)
	p.nchunks.Store(nchunks)
	p.done.Store(0)
	// Run 0 last: helpers learn of the job from it (await), and by then
	// every run is open.
	for r := len(p.runs) - 1; r >= 0; r-- {
		start := uint32(0)
		if r > 0 {
			start = runEnd(r-1, len(p.runs), nchunks)
		}
		p.runs[r].state.Store(gen<<32 | uint64(start))
	}
	for _, h := range p.helpers {
		if h.sleeping.CompareAndSwap(true, false) {
			h.wake <- struct{}{}
		}
	}
	p.work(0, gen)
	p.wait(gen)
	p.task = nil
}

// work claims and runs chunks of job gen until none are left: its own
// run's first, then the others'.
func (p *pool) work(w int, gen uint64) {
	for i := range p.runs {
		r := (w + i) % len(p.runs)
		if !p.workRun(w, r, gen) {
			return
		}
	}
}

// workRun claims and runs the chunks of run r of job gen until none are
// left there. It reports false if job gen is over (or closed).
func (p *pool) workRun(w, r int, gen uint64) bool {
	c := &p.runs[r].state
	for {
		s := c.Load()
		if s>>32 != gen || uint32(s) == closed {
			return false
		}
		nchunks := p.nchunks.Load()
		if uint32(s) >= runEnd(r, len(p.runs), nchunks) {
			return true
		}
		if !c.CompareAndSwap(s, s+1) {
			continue
		}
		// The claim succeeded, so nchunks and the fields below belong to
		// this job, which cannot end before this chunk does.
		lo := int(uint32(s)) * p.grain
		p.task.run(w, lo, min(lo+p.grain, p.n))
		if p.done.Add(1) == nchunks && w != 0 && p.waiting.CompareAndSwap(gen, 0) {
			p.finish <- struct{}{}
		}
	}
}

// wait returns once every chunk of job gen, the current one, is done.
func (p *pool) wait(gen uint64) {
	var deadline time.Time
	nchunks := p.nchunks.Load()
	for i := 0; p.done.Load() != nchunks; i++ {
		if i&255 != 255 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinFor)
			continue
		}
		if now.Before(deadline) {
			continue
		}
		p.waiting.Store(gen)
		if p.done.Load() == nchunks && p.waiting.CompareAndSwap(gen, 0) {
			return
		}
		// The helper finishing the last chunk saw waiting set: it sends.
		<-p.finish
		return
	}
}

func (p *pool) loop(w int, h *helper) {
	defer p.exited.Done()
	var seen uint64
	for {
		gen, ok := p.await(h, seen)
		if !ok {
			return
		}
		seen = gen
		p.work(w, gen)
	}
}

// await spins, then parks, until a job newer than seen is published. It
// reports false when the pool is stopping.
func (p *pool) await(h *helper, seen uint64) (uint64, bool) {
	var deadline time.Time
	for i := 0; ; i++ {
		if p.stopped.Load() {
			return 0, false
		}
		if g := p.runs[0].state.Load() >> 32; g != seen {
			return g, true
		}
		if i&255 != 255 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spinFor)
			continue
		}
		if now.Before(deadline) {
			continue
		}
		// Park. The flag is set before the last look at the generation: a
		// publisher that bumps it afterwards finds the flag and sends.
		h.sleeping.Store(true)
		if p.runs[0].state.Load()>>32 != seen || p.stopped.Load() {
			if !h.sleeping.CompareAndSwap(true, false) {
				<-h.wake // the publisher claimed the flag; take its token
			}
		} else {
			<-h.wake
		}
		deadline = time.Time{}
	}
}

// stop ends the helpers and waits for them to exit. The pool must be idle.
func (p *pool) stop() {
	p.stopped.Store(true)
	for _, h := range p.helpers {
		if h.sleeping.CompareAndSwap(true, false) {
			h.wake <- struct{}{}
		}
	}
	p.exited.Wait()
}
