package engine

import (
	"fmt"
	"sync"
	"time"
)

// Clock tells the engine the time. The step loop reads it once per step;
// Submit reads it for the request's arrival. Implementations must be safe
// for concurrent use.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// FakeClock is a Clock that moves only when told, for deterministic tests of
// queueing, aging, deadlines and timings. The zero value starts at the zero
// time; it is safe for concurrent use.
type FakeClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

// NewFakeClock returns a FakeClock set to t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{t: t} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Options configure an Engine. The zero value is usable: every zero field
// takes the default noted on it.
type Options struct {
	// BlockSize is the number of token slots in one KV block (16).
	BlockSize int
	// KVBytes is the device KV cache budget in bytes; the pool gets as many
	// blocks as fit (256 MiB, but never more blocks than MaxRunning
	// sequences of the context limit can use). KVBlocks, when set, gives
	// the count directly.
	KVBytes  int64
	KVBlocks int
	// HostKVBytes (or HostKVBlocks) sizes the host tier that preempted
	// sequences' KV moves to. Zero means no host tier: a preempted
	// sequence's KV is dropped and recomputed when it resumes.
	HostKVBytes  int64
	HostKVBlocks int
	// MaxBatchTokens is the token budget of one step: decode tokens first,
	// then prefill chunks (512). A forward pass cannot be interrupted, so
	// this also bounds how long a newly arrived request waits for the pass
	// in flight: lower it on slow devices to keep interactive TTFT steady
	// under a prefill-heavy load.
	MaxBatchTokens int
	// MaxRunning caps the sequences decoding or prefilling at once (64).
	MaxRunning int
	// MaxQueued caps waiting requests over all tenants (1024); beyond it
	// Submit refuses with queue_full.
	MaxQueued int
	// MaxContext caps prompt plus completion tokens of one request; zero
	// means the model's trained context length.
	MaxContext int
	// AgingAfter is how long a waiting request waits to count as one
	// priority class higher, so no class starves (5s).
	AgingAfter time.Duration
	// Quantum is the tokens a weight-1 tenant is credited per round of the
	// fair share scheduler (256); smaller interleaves tenants more finely.
	Quantum int
	// Limits are the defaults for a tenant's zero TenantLimits fields: a
	// zero weight is 1, a zero cap is no cap (beyond the global ones).
	Limits TenantLimits
	// Clock is the time source (the wall clock).
	Clock Clock
	// Metrics receives counters and gauges (none).
	Metrics Metrics
}

func (o *Options) validate(kvWidth, layers, modelContext int) error {
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.MaxBatchTokens == 0 {
		o.MaxBatchTokens = 512
	}
	if o.MaxRunning == 0 {
		o.MaxRunning = 64
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = 1024
	}
	if o.MaxContext == 0 || (modelContext > 0 && o.MaxContext > modelContext) {
		o.MaxContext = modelContext
	}
	if o.AgingAfter == 0 {
		o.AgingAfter = 5 * time.Second
	}
	if o.Quantum == 0 {
		o.Quantum = 256
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	if o.Metrics == nil {
		o.Metrics = NopMetrics{}
	}
	switch {
	case o.BlockSize < 0, o.KVBytes < 0, o.KVBlocks < 0, o.HostKVBytes < 0, o.HostKVBlocks < 0,
		o.MaxBatchTokens < 0, o.MaxRunning < 0, o.MaxQueued < 0, o.MaxContext < 0, o.AgingAfter < 0, o.Quantum < 0:
		return fmt.Errorf("engine: negative option in %+v", *o)
	case o.MaxContext <= 0:
		return fmt.Errorf("engine: model reports no context length; set Options.MaxContext")
	}
	// One block holds BlockSize tokens' K and V (F32) in every layer.
	blockBytes := int64(layers) * 2 * int64(o.BlockSize) * int64(kvWidth) * 4
	if blockBytes <= 0 {
		return fmt.Errorf("engine: model has %d layers of KV width %d", layers, kvWidth)
	}
	perSeq := (o.MaxContext + o.BlockSize - 1) / o.BlockSize
	if o.KVBlocks == 0 {
		budget := o.KVBytes
		if budget == 0 {
			budget = 256 << 20
		}
		o.KVBlocks = int(min(budget/blockBytes, int64(o.MaxRunning)*int64(perSeq)))
	}
	if o.HostKVBlocks == 0 && o.HostKVBytes > 0 {
		o.HostKVBlocks = int(o.HostKVBytes / blockBytes)
	}
	if o.KVBlocks < 1 {
		return fmt.Errorf("engine: KV budget of %d bytes holds no %d-byte block", o.KVBytes, blockBytes)
	}
	return nil
}
