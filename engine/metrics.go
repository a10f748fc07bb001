package engine

import (
	"time"

	"github.com/specgate/specgate/prefixcache"
)

// Metrics receives the engine's measurements. The gateway implements it
// over Prometheus; the engine itself imports no metrics library. Methods are
// called from the step goroutine (gauges once per step, the rest as events
// happen) and must not block.
//
// Embed NopMetrics to implement only some of the methods.
type Metrics interface {
	// QueueDepth is the number of waiting requests of a class (gauge).
	QueueDepth(p Priority, n int)
	// Sequences is the number of running sequences and of waiting
	// sequences that were preempted (gauges).
	Sequences(running, preempted int)
	// Preemption counts one preemption; kept says its KV was kept (its
	// full blocks cached by the prefix cache, or with the cache off
	// swapped to the host tier) rather than dropped.
	Preemption(tenant string, kept bool)
	// KVBlocks is the used and free blocks of a tier, "device" or "host"
	// (gauges).
	KVBlocks(tier string, used, free int)
	// TTFT observes the time from submit to a request's first token.
	TTFT(tenant string, p Priority, d time.Duration)
	// InterToken observes the gap between two consecutive tokens.
	InterToken(tenant string, p Priority, d time.Duration)
	// Tokens counts prompt tokens prefilled and completion tokens
	// generated for a tenant.
	Tokens(tenant string, prompt, completion int)
	// Step observes one forward pass: tokens in the batch, sequences, and
	// how long the pass took.
	Step(tokens, seqs int, d time.Duration)
	// Finished counts a request's end by finish reason.
	Finished(tenant string, p Priority, reason string)
	// PrefixLookup counts one prefix cache lookup's tokens for a tenant:
	// found on the device tier, found on the host tier (and promoted),
	// and missed (to be computed; a request's last token always is).
	PrefixLookup(tenant string, device, host, miss int)
	// PrefixTransfers counts blocks the prefix cache promoted (host to
	// device), demoted (device to host) and evicted (dropped) since the
	// previous call. It comes at most about once a second.
	PrefixTransfers(promoted, demoted, evicted int)
	// PrefixBlocks is how many blocks a namespace keeps cached on a tier,
	// "device" or "host" (gauge, reported with PrefixTransfers). The
	// namespace is a tenant, or SharedNamespace for prefixes marked shared.
	PrefixBlocks(namespace, tier string, n int)
	// GuidedMask observes the time guided decoding spent getting the token
	// mask for one sampled token of a constrained request (computed on a
	// grammar state's first use, cached after).
	GuidedMask(d time.Duration)
	// SpecAccepted observes one sequence's speculative step: how many of
	// its drafter's tokens were accepted (the target adds one more).
	SpecAccepted(drafter string, accepted int)
}

// SharedNamespace is the namespace name PrefixBlocks gives the blocks of
// prefixes marked shared (Request.SharedPrefix); no tenant ID has this
// form.
const SharedNamespace = "(shared)"

// NopMetrics discards everything; it is the default.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) QueueDepth(Priority, int)                   {}
func (NopMetrics) Sequences(int, int)                         {}
func (NopMetrics) Preemption(string, bool)                    {}
func (NopMetrics) KVBlocks(string, int, int)                  {}
func (NopMetrics) TTFT(string, Priority, time.Duration)       {}
func (NopMetrics) InterToken(string, Priority, time.Duration) {}
func (NopMetrics) Tokens(string, int, int)                    {}
func (NopMetrics) Step(int, int, time.Duration)               {}
func (NopMetrics) Finished(string, Priority, string)          {}
func (NopMetrics) PrefixLookup(string, int, int, int)         {}
func (NopMetrics) PrefixTransfers(int, int, int)              {}
func (NopMetrics) PrefixBlocks(string, string, int)           {}
func (NopMetrics) GuidedMask(time.Duration)                   {}
func (NopMetrics) SpecAccepted(string, int)                   {}

// Counters are an engine's running totals since it started, for tests,
// benchmarks and operators; see Engine.Counters.
type Counters struct {
	// Steps counts forward passes, ForwardTokens the tokens through them.
	Steps, ForwardTokens int64
	// PromptTokens counts input tokens (prompt, and Request.Generated)
	// computed by forward passes: prefill, and its recompute after a
	// preemption. CachedTokens counts the input tokens prefix cache
	// lookups served instead, resumes after a preemption included.
	PromptTokens, CachedTokens int64
	// Preemptions counts sequences taken off the device.
	Preemptions int64
	// StepTokens is the token budget of the latest step (MaxBatchTokens,
	// or less under the step-latency target); TokensPerSecond is the
	// forward throughput estimate the target works from (0 before a step
	// was measured).
	StepTokens      int
	TokensPerSecond float64
	// Cache is the prefix cache's snapshot (the zero value when it is
	// off).
	Cache prefixcache.Stats
}
