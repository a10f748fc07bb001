package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/specgate/specgate/kernels"
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
	// HostKVBytes (or HostKVBlocks) sizes the host tier. With the prefix
	// cache on it is the cache's second tier: cached blocks (a preempted
	// sequence's among them) are demoted there when the device runs short
	// and promoted back on a hit. With the cache off, preempted sequences'
	// KV is swapped there. Zero means no host tier: blocks the device cannot
	// keep are dropped and recomputed when needed.
	HostKVBytes  int64
	HostKVBlocks int
	// KVType is the KV cache's element type (KVF16: F16 where the backend
	// stores it, else F32). New sets it on the model (and on a draft
	// model), so every cache the engine has made is of that type; block
	// counts from KVBytes and HostKVBytes follow its size.
	KVType KVType
	// NoPrefixCache turns the prefix cache off. With it on (the default) a
	// request's tokens are looked up among the KV blocks of its tenant's
	// earlier requests (and of prefixes marked shared, see
	// Request.SharedPrefix), only the uncached suffix is prefilled, and the
	// full blocks of a finished, cancelled or preempted sequence are kept
	// for the next request until the space is needed (least recently used
	// first; a live session's last prefix last, see SetSessionLive).
	NoPrefixCache bool
	// PrefixTenantCap caps the blocks one tenant may keep in the prefix
	// cache, device and host together, so that one tenant cannot push
	// everybody else's prefixes out; at the cap its own oldest go first.
	// Zero means no cap.
	PrefixTenantCap int
	// MaxBatchTokens is the token budget of one step: decode tokens first,
	// then prefill chunks (512). MaxStepLatency usually keeps steps
	// shorter.
	MaxBatchTokens int
	// MaxStepLatency is the step-latency target. A forward pass cannot be
	// interrupted, so a newly arrived request first waits for the pass in
	// flight: while more than one request is live, the engine models its
	// forward pass's time from recent steps (a fixed cost per step plus a
	// cost per token, measured with the Clock) and cuts the prefill part
	// of the step budget to what fits this time, but not so far that the
	// fixed cost is over a third of a step; decode tokens always run, and
	// at least one prefill token. And
	// an interactive request waiting for its first token gets a step of
	// interactive work only (lower classes' decodes wait that one step),
	// so its first token waits for the pass in flight and its own pass
	// and nothing else (50ms: about what a short prompt's own pass takes
	// on a CPU with a ~100M-parameter model, so that a batch flood at
	// most about doubles interactive TTFT). Throughput loses the per-step
	// fixed cost over the target. A negative value turns both off: every
	// step may use MaxBatchTokens, decodes first.
	MaxStepLatency time.Duration
	// MaxRunning caps the sequences decoding or prefilling at once (64).
	MaxRunning int
	// MaxQueued caps waiting requests over all tenants (1024); beyond it
	// Submit refuses with queue_full.
	MaxQueued int
	// MaxContext caps prompt plus completion tokens of one request; zero
	// means the model's trained context length.
	MaxContext int
	// DefaultMaxTokens caps the completion of a request that sets no
	// MaxTokens (1024); it gets what is left of the context up to this.
	// A chat given as Messages whose prompt would leave less than its
	// MaxTokens (without one: a quarter of the context, at most
	// DefaultMaxTokens) loses its oldest turns (never system messages or
	// the last message) until it fits.
	DefaultMaxTokens int
	// ChatTemplate, when set, replaces the model's own chat template (a
	// Jinja template, as in tokenizer.chat_template): for a model file
	// that lacks one or carries an outdated one. Empty uses the model's.
	ChatTemplate string
	// AgingAfter is how long a waiting request waits to count as one
	// priority class higher, so no class starves (5s).
	AgingAfter time.Duration
	// Quantum is the tokens a weight-1 tenant is credited per round of the
	// fair share scheduler (256); smaller interleaves tenants more finely.
	Quantum int
	// Limits are the defaults for a tenant's zero TenantLimits fields: a
	// zero weight is 1, a zero cap is no cap (beyond the global ones).
	Limits TenantLimits
	// GrammarCache is how many compiled guided-decoding grammars (regex,
	// JSON schema, choices) are kept for reuse, least recently used
	// dropped first (64). Requests with the same constraint share one.
	GrammarCache int
	// Speculation configures speculative decoding (n-gram drafts, the
	// default dispatcher and policies).
	Speculation Speculation
	// Clock is the time source (the wall clock).
	Clock Clock
	// Observer receives every step's report (none).
	Observer StepObserver
}

// KVType is the element type of an engine's KV cache.
type KVType uint8

const (
	// KVF16 stores K and V as F16 where the backend can
	// (kernels.SupportsKV) and as F32 where it cannot. Against F32 it
	// halves the cache, so a byte budget holds twice the blocks, and
	// halves the bytes decode attention reads per token; each value is
	// rounded to the nearest half as it is stored, as llama.cpp's default
	// KV cache does.
	KVF16 KVType = iota
	// KVF32 stores them as F32, as computed.
	KVF32
)

func (t KVType) String() string {
	switch t {
	case KVF16:
		return "f16"
	case KVF32:
		return "f32"
	}
	return fmt.Sprintf("KVType(%d)", uint8(t))
}

// ParseKVType parses the names String gives: "f16" or "f32".
func ParseKVType(s string) (KVType, error) {
	for _, t := range []KVType{KVF16, KVF32} {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("engine: KV type %q: want f16 or f32", s)
}

// DType is the element type t stores on backend b: F16 falls back to F32
// where b does not store F16.
func (t KVType) DType(b kernels.Backend) kernels.DType {
	if t == KVF16 && kernels.SupportsKV(b, kernels.F16) {
		return kernels.F16
	}
	return kernels.F32
}

// validate fills in defaults and checks o for a model of the given shape
// whose KV cache holds elements of type kvType.
func (o *Options) validate(kvWidth, layers, modelContext int, kvType kernels.DType) error {
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
	if o.MaxStepLatency == 0 {
		o.MaxStepLatency = 50 * time.Millisecond
	}
	if o.DefaultMaxTokens == 0 {
		o.DefaultMaxTokens = 1024
	}
	if o.GrammarCache == 0 {
		o.GrammarCache = defaultGrammarCache
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	switch {
	case o.KVType != KVF16 && o.KVType != KVF32:
		return fmt.Errorf("engine: unknown KV type %v", o.KVType)
	case o.BlockSize < 0, o.KVBytes < 0, o.KVBlocks < 0, o.HostKVBytes < 0, o.HostKVBlocks < 0,
		o.MaxBatchTokens < 0, o.MaxRunning < 0, o.MaxQueued < 0, o.MaxContext < 0, o.AgingAfter < 0, o.Quantum < 0,
		o.PrefixTenantCap < 0, o.GrammarCache < 0, o.DefaultMaxTokens < 0:
		return fmt.Errorf("engine: negative option in %+v", *o)
	case o.MaxContext <= 0:
		return fmt.Errorf("engine: model reports no context length; set Options.MaxContext")
	}
	// One block holds BlockSize tokens' K and V in every layer.
	blockBytes := kernels.KVSpec{Layers: layers, BlockSize: o.BlockSize, Width: kvWidth, DType: kvType}.BlockBytes()
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
