package engine

import "time"

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
	// Preemption counts one preemption; swapped says its KV went to the
	// host tier rather than being dropped.
	Preemption(tenant string, swapped bool)
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
}

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
