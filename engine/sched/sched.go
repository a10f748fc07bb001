// Package sched is the engine's scheduler core: admission with per-tenant
// and global caps, priority classes with aging, weighted deficit round robin
// over tenants by token cost, and per-step plans of which sequences run how
// many tokens and which are preempted when KV blocks run out.
//
// It does no I/O, starts no goroutines and never reads the clock: every call
// takes the time, so tests drive it with a fake clock and get the same trace
// every run. One goroutine (the engine's step loop) owns a Scheduler.
//
// The scheduler's model of a sequence is a count of known tokens (prompt,
// then generated) and a count of tokens whose K/V are in the cache. The
// difference is what the next forward pass must process: the whole prompt
// (chunked) at first, one token per step while decoding, or everything again
// after the sequence's KV was dropped by a preemption. Blocks are counted,
// not named: a sequence with kv tokens holds ceil(kv/BlockSize) blocks.
package sched

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Class is a priority class; a lower value is served first.
type Class int

const (
	Interactive Class = iota
	Standard
	Batch
	numClasses
)

func (c Class) String() string {
	switch c {
	case Interactive:
		return "interactive"
	case Standard:
		return "standard"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Classes lists the classes in service order.
var Classes = [...]Class{Interactive, Standard, Batch}

// Refusals. Enqueue wraps one of these with a message; callers test them
// with errors.Is.
var (
	// ErrQueueFull: the global waiting queue is at its cap.
	ErrQueueFull = errors.New("sched: queue full")
	// ErrOverQuota: a tenant cap (queued requests, tokens per minute)
	// would be exceeded. The refusal wraps one of the two below, which
	// say which cap.
	ErrOverQuota = errors.New("sched: over quota")
	// ErrTokensPerMinute: the tenant's tokens per minute are spent.
	ErrTokensPerMinute = fmt.Errorf("%w: tokens per minute", ErrOverQuota)
	// ErrTenantQueue: the tenant has as many requests waiting as it may.
	ErrTenantQueue = fmt.Errorf("%w: tenant queue", ErrOverQuota)
	// ErrDuplicate: a live request already has this ID.
	ErrDuplicate = errors.New("sched: duplicate request id")
	// ErrInvalid: the request cannot be scheduled as given.
	ErrInvalid = errors.New("sched: invalid request")
)

// Limits are one tenant's share and caps. A zero field takes the value from
// Config.Defaults; a zero there means "no cap" (weight 1).
type Limits struct {
	// Weight is the tenant's share of tokens inside a class relative to
	// other backlogged tenants.
	Weight float64
	// MaxConcurrent caps the tenant's running sequences; more wait.
	MaxConcurrent int
	// MaxQueued caps the tenant's waiting requests; more are refused.
	MaxQueued int
	// TokensPerMinute caps prompt plus completion tokens over the last
	// minute. A request is refused when its prompt does not fit what is
	// left; an admitted one reserves its completion cap (Request.Reserve)
	// at once, so requests admitted together cannot overshoot, and what it
	// did not use is given back when it ends. The cap is exceeded by at
	// most the reservation of the last request admitted.
	TokensPerMinute int
}

// Config configures a Scheduler. Zero values take the defaults noted.
type Config struct {
	// BlockSize is the number of token slots per KV block (16).
	BlockSize int
	// MaxRunning caps the sequences running at once (64).
	MaxRunning int
	// MaxQueued caps waiting requests across all tenants (1024).
	MaxQueued int
	// AgingAfter is how long a waiting request must wait to count as one
	// class higher (5s). Aging is continuous: a request that waited
	// 1.5×AgingAfter is ahead of a fresh request one class above it, and
	// one that has aged into a class goes ahead of that class's own
	// requests; nor is it preempted for them. So a request leaves the
	// queue within its distance from the top class times AgingAfter (and
	// a step): for a running slot or blocks it preempts, if it must, a
	// sequence of the class it aged into that has not aged itself. A
	// request does not age while its tenant has sequences of its class
	// running (it waits on its own tenant's share), nor a running
	// sequence while its class ran in the step (it is sharing by weight).
	AgingAfter time.Duration
	// Quantum is the tokens a tenant of weight 1 is credited per deficit
	// round robin round (256). It is also how far ahead of the others a
	// tenant returning from idle may be served while the step budget is
	// shared, so a tenant cannot bank its idle time.
	Quantum int
	// Defaults fill a tenant's zero Limits.
	Defaults Limits
}

func (c *Config) validate() error {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = 64
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 1024
	}
	if c.AgingAfter == 0 {
		c.AgingAfter = 5 * time.Second
	}
	if c.Quantum == 0 {
		c.Quantum = 256
	}
	if c.Defaults.Weight == 0 {
		c.Defaults.Weight = 1
	}
	switch {
	case c.BlockSize < 0, c.MaxRunning < 0, c.MaxQueued < 0, c.AgingAfter < 0, c.Quantum < 0:
		return fmt.Errorf("sched: negative config value in %+v", *c)
	case c.Defaults.Weight < 0 || math.IsNaN(c.Defaults.Weight) || math.IsInf(c.Defaults.Weight, 0):
		return fmt.Errorf("sched: bad default weight %v", c.Defaults.Weight)
	case c.Defaults.MaxConcurrent < 0, c.Defaults.MaxQueued < 0, c.Defaults.TokensPerMinute < 0:
		return fmt.Errorf("sched: negative default limit in %+v", c.Defaults)
	}
	return nil
}

// Request is a generation to schedule.
type Request struct {
	ID     string
	Tenant string
	Class  Class
	// Limits are the tenant's as the caller knows them; the latest
	// request's limits replace the tenant's previous ones.
	Limits Limits
	// Tokens is how many tokens must go through the model before the first
	// sample: the prompt (plus any tokens replayed after a failover).
	Tokens int
	// Charge is how many tokens count against the tenant's tokens per
	// minute at admission (usually the prompt length); the request is
	// refused when they do not fit.
	Charge int
	// Reserve is how many more tokens (the completion cap) are counted
	// against the tenant's tokens per minute at admission, ahead of
	// Append; Remove gives back what Append did not use.
	Reserve int
}

// Resources are what one step may use.
type Resources struct {
	// Tokens is the step's token budget (decode and prefill together).
	Tokens int
	// Target is the tokens a step may hold to meet the latency target
	// (0: Tokens). When the running sequences' pending tokens do not fit
	// it and belong to more than one tenant, the step is saturated: it
	// holds at most Target tokens, and when Efficient is known at most
	// the weighted cap described there (never fewer than Efficient),
	// shared among tenants by weight (tokens served over weight, the
	// least served first; within a tenant, decodes before prefill, the
	// sequence that ran least recently first). So weights govern
	// throughput whenever the engine is time-bound, not only when
	// running slots run out, and a tenant whose running work is under
	// its share of the target does not hand the rest of each step to the
	// others. Otherwise every decode runs, up to Tokens.
	Target int
	// Efficient is the fewest tokens a step needs for its fixed cost
	// (reading the weights, synchronising workers) to be at most a third
	// of it (0: unknown). When the running work of more than one tenant
	// fills at least that, the machine and not the demand bounds
	// throughput, even if all of it fits Target: then each tenant's share
	// of the step follows its weight too. The step holds the most tokens
	// in which every tenant can take its weighted share (a tenant with d
	// pending tokens and weight w out of W caps it at d·W/w), never fewer
	// than Efficient, shared as under Target. Without this, every stream
	// gets one token per step whatever its tenant's weight, and weights
	// would only govern once steps outgrow the latency target. The price is
	// the steps' fixed cost on the tokens left out, at most a third.
	Efficient int
	// FreeBlocks and FreeHostBlocks are the unused blocks of the device
	// pool and the host tier.
	FreeBlocks, FreeHostBlocks int
	// InteractiveFirst plans the Interactive class's work (its running
	// sequences' tokens, then its waiting requests) before the decodes of
	// lower classes, which get what is left of Tokens: a waiting
	// interactive request's first token is then held up by nothing but
	// other interactive work. The caller sets it for a step when an
	// interactive request waits, and not for two steps in a row, so that
	// lower classes' decodes lose one step at most.
	InteractiveFirst bool
	// Cache, when set, tells how many leading tokens of a request that
	// starts with no KV a prefix cache already holds. Admission budgets
	// only the rest, the tokens the request will compute, and plans its
	// first chunk from there (its KV as if the cache's tokens were
	// computed; the caller corrects it with SetKV when the lookup finds
	// less). Without it a fully cached prompt took a whole chunk of the
	// budget for the few tokens it computes, and about one request was
	// admitted per step.
	Cache PrefixCache
}

// PrefixCache is the prefix cache as admission sees it.
type PrefixCache interface {
	// Cached returns how many leading tokens of request id the cache
	// holds now (0: none or unknown), and how many of FreeBlocks taking
	// them would use (cached blocks nobody else holds stop being free).
	// It must pin and change nothing: it is asked about requests the
	// step may not start.
	Cached(id string) (tokens, blocks int)
}

// Chunk is one sequence's share of a step: tokens [Start, Start+N) of its
// known tokens go through the model.
type Chunk struct {
	ID       string
	Start, N int
	// Logits says the chunk ends at the sequence's last known token, so
	// its logits are sampled for the next token.
	Logits bool
	// Resume says the sequence's KV is on the host tier: copy its blocks
	// back to the device before running the chunk.
	Resume bool
	// Blocks is the number of device blocks the sequence holds once the
	// chunk is written: ceil((Start+N)/BlockSize).
	Blocks int
}

// Preemption tells the engine to take a running sequence off the device.
type Preemption struct {
	ID string
	// Swap says copy its KV blocks to the host tier; otherwise they are
	// dropped and recomputed when it resumes.
	Swap bool
	// Blocks is how many device blocks it held (and, with Swap, how many
	// host blocks it now takes).
	Blocks int
}

// Plan is one step's work. The engine carries out Preempt first, then runs
// Run's chunks in one forward pass. Run lists decodes before prefill chunks,
// each group in priority order.
type Plan struct {
	Preempt []Preemption
	Run     []Chunk
}

// Stats is a snapshot for metrics.
type Stats struct {
	Waiting   [numClasses]int // waiting requests by class (preempted included)
	Running   int
	Preempted int // waiting sequences that were preempted (swapped or dropped)
	Swapped   int // of those, how many hold host blocks
}

// Scheduler is the state machine. It is not safe for concurrent use.
type Scheduler struct {
	cfg     Config
	seqs    map[string]*seq
	tenants map[string]*tenant
	rings   [numClasses]ring
	running []*seq // in no particular order
	waiting int
	steps   int64 // Schedule calls so far
	// carry is the fraction of a token the last weighted step cap left
	// over (see Resources.Efficient), so caps like 21⅓ average out.
	carry float64
	// mark stamps the tenants' scratch fields (tenant.pendMark,
	// seenMark, servedMark) for one pass over them; capTenants is
	// weightedCap's room for its per-class tenant lists.
	mark       uint64
	capTenants [numClasses][]*tenant
}

type seq struct {
	id      string
	t       *tenant
	class   Class
	arrived time.Time
	started time.Time // first admission; zero until then
	// waited is the time spent waiting before the current wait: in the
	// queue, and as a running sequence the step budget left out. since
	// is when the current wait began (zero while it is not waiting).
	// Together they age the sequence (see rank).
	waited time.Duration
	since  time.Time
	// lastRun is the scheduler step in which the sequence last ran.
	lastRun int64
	// reserve is the completion tokens reserved against the tenant's
	// tokens per minute at reservedAt; appended counts what was used.
	reserve, appended int
	reservedAt        time.Time
	total             int // known tokens
	kv                int // tokens whose K/V are cached (on device, or on host when swapped)
	running           bool
	swapped           bool
	preempt           int // times preempted
}

type tenant struct {
	name    string
	lim     Limits
	queue   [numClasses][]*seq // FIFO per class
	deficit [numClasses]float64
	inRing  [numClasses]bool
	running int
	queued  int
	rate    window
	// vt is the tokens the tenant was served divided by its weight: the
	// virtual time by which running sequences share a step budget that
	// cannot hold them all.
	vt float64
	// Scratch for one pass of weightedCap or ageQueued, valid where its
	// mark is the scheduler's: pending tokens per class, and whether the
	// tenant was counted or runs a sequence of the class.
	pend                 [numClasses]int
	pendMark, servedMark [numClasses]uint64
	seenMark             uint64
}

// New returns an empty scheduler.
func New(c Config) (*Scheduler, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: c, seqs: map[string]*seq{}, tenants: map[string]*tenant{}}, nil
}

// Config returns the configuration with defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

func (s *Scheduler) limits(l Limits) Limits {
	d := s.cfg.Defaults
	if l.Weight <= 0 || math.IsNaN(l.Weight) || math.IsInf(l.Weight, 0) {
		l.Weight = d.Weight
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = d.MaxConcurrent
	}
	if l.MaxQueued <= 0 {
		l.MaxQueued = d.MaxQueued
	}
	if l.TokensPerMinute <= 0 {
		l.TokensPerMinute = d.TokensPerMinute
	}
	return l
}

// Enqueue admits r to the waiting queue or refuses it at once with an error
// wrapping ErrQueueFull, ErrOverQuota (ErrTenantQueue or
// ErrTokensPerMinute), ErrDuplicate or ErrInvalid. An admitted request's
// Charge and Reserve count against its tenant's tokens per minute. The
// messages name figures but no tenant: callers may show them.
func (s *Scheduler) Enqueue(now time.Time, r Request) error {
	if r.ID == "" || r.Tokens <= 0 || r.Class < 0 || r.Class >= numClasses || r.Charge < 0 || r.Reserve < 0 {
		return fmt.Errorf("%w: id %q, %d tokens, class %v", ErrInvalid, r.ID, r.Tokens, r.Class)
	}
	if _, dup := s.seqs[r.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, r.ID)
	}
	t := s.tenants[r.Tenant]
	if t == nil {
		t = &tenant{name: r.Tenant}
		s.tenants[r.Tenant] = t
	}
	t.lim = s.limits(r.Limits)
	if s.waiting >= s.cfg.MaxQueued {
		return fmt.Errorf("%w: %d requests waiting", ErrQueueFull, s.waiting)
	}
	if t.lim.MaxQueued > 0 && t.queued >= t.lim.MaxQueued {
		return fmt.Errorf("%w: %d requests already waiting (limit %d)", ErrTenantQueue, t.queued, t.lim.MaxQueued)
	}
	if tpm := t.lim.TokensPerMinute; tpm > 0 {
		if used := t.rate.used(now); used+r.Charge > tpm {
			return fmt.Errorf("%w: %d of %d tokens per minute in use or reserved; this prompt needs %d", ErrTokensPerMinute, used, tpm, r.Charge)
		}
	}
	t.rate.add(now, r.Charge+r.Reserve)
	q := &seq{id: r.ID, t: t, class: r.Class, arrived: now, since: now, total: r.Tokens, reserve: r.Reserve, reservedAt: now}
	s.seqs[r.ID] = q
	s.push(q, false)
	return nil
}

// push puts a waiting sequence in its tenant's class queue: at the back when
// new, at the front when preempted (it arrived before anything queued since).
func (s *Scheduler) push(q *seq, front bool) {
	t := q.t
	if front {
		t.queue[q.class] = append([]*seq{q}, t.queue[q.class]...)
	} else {
		t.queue[q.class] = append(t.queue[q.class], q)
	}
	t.queued++
	s.waiting++
	if !t.inRing[q.class] {
		s.rings[q.class].join(t, q.class, s.cfg.Quantum)
	}
}

// unqueue takes a waiting sequence out of its queue.
func (s *Scheduler) unqueue(q *seq) {
	t := q.t
	qs := t.queue[q.class]
	for i, x := range qs {
		if x == q {
			t.queue[q.class] = append(qs[:i:i], qs[i+1:]...)
			break
		}
	}
	t.queued--
	s.waiting--
	if len(t.queue[q.class]) == 0 {
		s.rings[q.class].leave(t, q.class)
	}
}

// Remove forgets a finished or cancelled request, waiting or running. It
// reports whether the ID was known. The caller frees the sequence's blocks.
func (s *Scheduler) Remove(id string) bool {
	q := s.seqs[id]
	if q == nil {
		return false
	}
	delete(s.seqs, id)
	if q.running {
		s.stop(q)
	} else {
		s.unqueue(q)
	}
	// Give back the reservation's unused part where it was counted; once
	// that second has left the window there is nothing to give back.
	if unused := q.reserve - min(q.appended, q.reserve); unused > 0 {
		q.t.rate.sub(q.reservedAt, unused)
	}
	// The tenant record stays, idle or not: its rate window and deficit
	// are what its next request is judged by, and tenants are few.
	return true
}

func (s *Scheduler) stop(q *seq) {
	for i, x := range s.running {
		if x == q {
			s.running = append(s.running[:i], s.running[i+1:]...)
			break
		}
	}
	q.running = false
	q.t.running--
}

// Append records n tokens sampled for a running sequence: they become known
// tokens to feed through the model next, and count against its tenant's
// tokens per minute beyond what the request reserved. It reports whether
// the ID was known.
func (s *Scheduler) Append(now time.Time, id string, n int) bool {
	q := s.seqs[id]
	if q == nil || n <= 0 {
		return q != nil
	}
	q.total += n
	covered := max(min(n, q.reserve-q.appended), 0)
	q.appended += n
	q.t.rate.add(now, n-covered)
	return true
}

// SetKV corrects how many of a running sequence's known tokens have their
// K/V on the device, after the step went other than planned: the engine's
// prefix cache already held some of the tokens a chunk was to compute (kv
// grows), or the blocks for a chunk ran short and it ran fewer tokens (kv
// shrinks back to what was written). kv is clamped to [0, known tokens];
// the caller keeps ceil(kv/BlockSize) blocks for it. It reports whether the
// ID names a running sequence; it changes nothing otherwise.
func (s *Scheduler) SetKV(id string, kv int) bool {
	q := s.seqs[id]
	if q == nil || !q.running {
		return false
	}
	q.kv = min(max(kv, 0), q.total)
	return true
}

// Len returns a sequence's known and cached token counts.
func (s *Scheduler) Len(id string) (total, kv int, ok bool) {
	q := s.seqs[id]
	if q == nil {
		return 0, 0, false
	}
	return q.total, q.kv, true
}

// Stats returns the current counts.
func (s *Scheduler) Stats() Stats {
	var st Stats
	st.Running = len(s.running)
	for _, q := range s.seqs {
		if q.running {
			continue
		}
		st.Waiting[q.class]++
		if q.preempt > 0 {
			st.Preempted++
		}
		if q.swapped {
			st.Swapped++
		}
	}
	return st
}

// rank is q's effective priority: its class, less one for every AgingAfter
// it has waited (in the queue, or running but left out of steps). A lower
// rank is served first and preempted last, so an aged request is admitted
// ahead of fresher ones of a higher class and then kept.
func (s *Scheduler) rank(q *seq, now time.Time) float64 {
	age := q.waited
	if !q.since.IsZero() {
		age += now.Sub(q.since)
	}
	// Nothing ranks above the top class: a request that has aged all
	// the way there is as urgent as any that is there by class, and
	// pick serves it first (see there), so its wait is bounded by the
	// aging, not by how long the top class's requests wait.
	return max(float64(q.class)-float64(age)/float64(s.cfg.AgingAfter), 0)
}

// level is the class q is served with: its own, or a higher one it has
// aged into.
func (s *Scheduler) level(q *seq, now time.Time) Class {
	r := math.Ceil(s.rank(q, now))
	return Class(max(0, min(float64(q.class), r)))
}

// stopWaiting ends q's current wait, keeping its length for rank.
func (q *seq) stopWaiting(now time.Time) {
	if !q.since.IsZero() {
		q.waited += now.Sub(q.since)
		q.since = time.Time{}
	}
}

func (s *Scheduler) blocks(tokens int) int {
	return (tokens + s.cfg.BlockSize - 1) / s.cfg.BlockSize
}
