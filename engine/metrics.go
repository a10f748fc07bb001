package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/specgate/specgate/engine/sched"
	"github.com/specgate/specgate/prefixcache"
)

// StepObserver receives the report of every engine step: package
// engine/prom turns them into Prometheus metrics. The engine imports no
// metrics library.
type StepObserver interface {
	// ObserveStep runs on the step goroutine once a step is over, and
	// once in New with the starting state (an empty report), so it must
	// not block. r and its slices are the engine's, reused by the next
	// step: keep nothing from them but r.Snapshot, which never changes.
	ObserveStep(r *StepReport)
}

// StepReport is what one engine step did. Requests cancelled between steps
// are reported by the step after.
type StepReport struct {
	// At is when the step ended, on the engine's clock.
	At time.Time
	// Snapshot is the engine's state at the end of the step: what
	// Engine.Snapshot returns until the next step. It is never modified.
	Snapshot *Snapshot

	// Sequences and Tokens are the forward pass's batch: sequences, and
	// tokens through it (draft tree nodes included); Duration is how long
	// the step took from its start to the pass's end (expiry, planning,
	// drafting and the pass; not the commit after it). All zero when the
	// step ran no pass.
	Sequences, Tokens int
	Duration          time.Duration
	// PrefillTokens counts prompt tokens computed by the pass for the
	// first time: neither those the prefix cache served nor those
	// recomputed after a preemption. DecodeTokens counts the tokens the
	// step generated (accepted drafts included).
	PrefillTokens, DecodeTokens int
	// Tenants splits PrefillTokens and DecodeTokens by tenant.
	Tenants []TenantTokens

	// Drafts is speculative decoding's work this step, by drafter.
	Drafts []DraftCount
	// FirstTokens are the requests whose first token the step produced.
	FirstTokens []FirstToken
	// TokenGaps holds one entry per generated token after a request's
	// first: the wait for it. Tokens of one step reach the client
	// together, each counted as an equal share of the wait for them.
	TokenGaps []TokenGap
	// Finished are the requests that ended, whatever the reason.
	Finished []FinishedRequest
	// Preemptions are the sequences the step took off the device.
	Preemptions []Preemption
	// PrefixLookups are the prefix cache lookups of the step.
	PrefixLookups []PrefixLookup
	// GuidedMasks are the times guided decoding spent getting the token
	// mask for each sampled token of a constrained request (computed on a
	// grammar state's first use, cached after); wall time, not the
	// engine's clock, since it measures CPU cost.
	GuidedMasks []time.Duration
}

// TenantTokens is one tenant's share of a step's tokens. The tenant is ""
// for requests without one.
type TenantTokens struct {
	Tenant                      string
	PrefillTokens, DecodeTokens int
}

// DraftCount is one drafter's speculation in a step: how many sequences
// verified a draft, the draft tokens verified (tree nodes), and how many
// of them were accepted (the target adds one token more to each).
type DraftCount struct {
	Drafter                   string
	Drafts, Drafted, Accepted int
}

// FirstToken is a request's first token: how long after its submission it
// was produced.
type FirstToken struct {
	ID, Tenant string
	Priority   Priority
	TTFT       time.Duration
}

// TokenGap is the wait for one generated token of a request of a class.
type TokenGap struct {
	Priority Priority
	Gap      time.Duration
}

// FinishedRequest is a request that ended: its final usage and statistics
// as its stream's Final carries them.
type FinishedRequest struct {
	ID, Tenant string
	Priority   Priority
	Reason     string // a Finish* constant
	Usage      Usage
	Stats      Stats
	// Scheduled says the request ran at least once, so Stats.Queue is its
	// time in the queue; a request cancelled while waiting has none.
	Scheduled bool
}

// Preemption is a sequence taken off the device. Kept says its KV was
// kept (its full blocks cached by the prefix cache, or with the cache off
// swapped to the host tier) rather than dropped.
type Preemption struct {
	Tenant string
	Kept   bool
}

// PrefixLookup is one prefix cache lookup's tokens: found on the device
// tier, found on the host tier (and promoted), and missed (to be computed;
// a request's last token always is).
type PrefixLookup struct {
	Tenant             string
	Device, Host, Miss int
}

// Snapshot is the engine's state at the end of a step. Engine.Snapshot
// returns the latest from any goroutine without waiting for the engine.
type Snapshot struct {
	// At is when the step ended (when the engine was built, before any).
	At time.Time
	// Steps counts the steps so far, idle ones included.
	Steps int64
	// Running is the sequences admitted to run; Queue the requests
	// waiting, by class, of which Preempted were preempted.
	Running   int
	Queue     Queue
	Preempted int
	// Device and Host are the KV tiers' blocks; Host is all zero without
	// a host tier.
	Device, Host KVTier
	// Prefix is the prefix cache's state, refreshed at most once a second
	// while the engine is busy (it costs a scan of the cache) and at every
	// idle step; nil when the cache is off.
	Prefix *PrefixState
}

// Load is the requests the engine holds: running and waiting.
func (s Snapshot) Load() int { return s.Running + s.Queue.Total() }

// Queue is the waiting requests by class (preempted ones included).
type Queue struct {
	Interactive, Standard, Batch int
}

// Of returns the waiting requests of class p.
func (q Queue) Of(p Priority) int {
	switch p {
	case Interactive:
		return q.Interactive
	case Batch:
		return q.Batch
	}
	return q.Standard
}

// Total is the waiting requests of every class.
func (q Queue) Total() int { return q.Interactive + q.Standard + q.Batch }

// KVTier is one KV tier's blocks: Used plus Free is Cap. Blocks the prefix
// cache keeps and no sequence holds count as used.
type KVTier struct {
	Used, Free, Cap int
}

// Usage is the fraction of the tier's blocks in use, 0 for an empty tier.
func (t KVTier) Usage() float64 {
	if t.Cap == 0 {
		return 0
	}
	return float64(t.Used) / float64(t.Cap)
}

// PrefixState is the prefix cache's running totals and what it keeps.
type PrefixState struct {
	// Promotions, Demotions and Evictions count blocks moved host to
	// device, device to host, and dropped, since the engine started.
	Promotions, Demotions, Evictions int64
	// Namespaces is the blocks cached per namespace, sorted by name.
	Namespaces []NamespaceBlocks
}

// NamespaceBlocks is how many blocks the prefix cache keeps for a
// namespace on each tier. The namespace is a tenant ("" for requests
// without one), or SharedNamespace for prefixes marked shared.
type NamespaceBlocks struct {
	Namespace    string
	Device, Host int
}

// SharedNamespace names the namespace of prefixes marked shared
// (Request.SharedPrefix); no tenant ID has this form.
const SharedNamespace = "(shared)"

// Snapshot returns the engine's state at the end of its latest step. It is
// safe from any goroutine and never waits for the engine.
func (e *Engine) Snapshot() Snapshot { return *e.snap.Load() }

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

// The step fills its report through these; publish hands it over.

// tokens counts a sequence's prefilled and generated tokens.
func (r *StepReport) tokens(tenant string, prefill, decode int) {
	r.PrefillTokens += prefill
	r.DecodeTokens += decode
	for i := range r.Tenants {
		if t := &r.Tenants[i]; t.Tenant == tenant {
			t.PrefillTokens += prefill
			t.DecodeTokens += decode
			return
		}
	}
	r.Tenants = append(r.Tenants, TenantTokens{Tenant: tenant, PrefillTokens: prefill, DecodeTokens: decode})
}

// drafted counts one sequence's verified draft.
func (r *StepReport) drafted(drafter string, drafted, accepted int) {
	for i := range r.Drafts {
		if d := &r.Drafts[i]; d.Drafter == drafter {
			d.Drafts++
			d.Drafted += drafted
			d.Accepted += accepted
			return
		}
	}
	r.Drafts = append(r.Drafts, DraftCount{Drafter: drafter, Drafts: 1, Drafted: drafted, Accepted: accepted})
}

// forward records the step's pass.
func (r *StepReport) forward(seqs, tokens int, d time.Duration) {
	r.Sequences, r.Tokens, r.Duration = seqs, tokens, d
}

func (r *StepReport) firstToken(s *sequence, ttft time.Duration) {
	r.FirstTokens = append(r.FirstTokens, FirstToken{ID: s.req.ID, Tenant: s.req.Tenant, Priority: s.req.Priority, TTFT: ttft})
}

func (r *StepReport) tokenGap(s *sequence, gap time.Duration) {
	r.TokenGaps = append(r.TokenGaps, TokenGap{Priority: s.req.Priority, Gap: gap})
}

func (r *StepReport) finished(s *sequence, f *Final) {
	r.Finished = append(r.Finished, FinishedRequest{
		ID: s.req.ID, Tenant: s.req.Tenant, Priority: s.req.Priority, Reason: f.FinishReason,
		Usage: f.Usage, Stats: f.Stats, Scheduled: !s.scheduled.IsZero(),
	})
}

func (r *StepReport) preempted(tenant string, kept bool) {
	r.Preemptions = append(r.Preemptions, Preemption{Tenant: tenant, Kept: kept})
}

func (r *StepReport) prefixLookup(tenant string, device, host, miss int) {
	r.PrefixLookups = append(r.PrefixLookups, PrefixLookup{Tenant: tenant, Device: device, Host: host, Miss: miss})
}

func (r *StepReport) guidedMask(d time.Duration) { r.GuidedMasks = append(r.GuidedMasks, d) }

// reset empties r for the next step, keeping its slices' room.
func (r *StepReport) reset() {
	*r = StepReport{
		Tenants: r.Tenants[:0], Drafts: r.Drafts[:0], FirstTokens: r.FirstTokens[:0],
		TokenGaps: r.TokenGaps[:0], Finished: r.Finished[:0], Preemptions: r.Preemptions[:0],
		PrefixLookups: r.PrefixLookups[:0], GuidedMasks: r.GuidedMasks[:0],
	}
}

// publish ends a step at now: it takes the snapshot, hands the report to
// the observer and starts the next one. The prefix cache's figures are
// refreshed when the engine is idle or a second has passed since they
// were (they cost a scan of the cache).
func (e *Engine) publish(now time.Time, idle bool) {
	prev := e.snap.Load()
	snap := e.snapshot(now, prev.Steps+1, prev.Prefix)
	if e.cache != nil && (idle || prev.Prefix == nil || now.Sub(e.reported) >= time.Second) {
		e.reported = now
		snap.Prefix = e.prefixState()
	}
	e.snap.Store(snap)
	r := &e.report
	if e.o.Observer != nil {
		r.At, r.Snapshot = now, snap
		e.o.Observer.ObserveStep(r)
	}
	r.reset()
}

// snapshot reads the scheduler's and the pools' state.
func (e *Engine) snapshot(now time.Time, steps int64, prefix *PrefixState) *Snapshot {
	st := e.sched.Stats()
	s := &Snapshot{
		At: now, Steps: steps, Running: st.Running, Preempted: st.Preempted,
		Queue: Queue{
			Interactive: st.Waiting[sched.Interactive],
			Standard:    st.Waiting[sched.Standard],
			Batch:       st.Waiting[sched.Batch],
		},
		Device: KVTier{Used: e.dev.Used(), Free: e.dev.Free(), Cap: e.dev.Cap()},
		Prefix: prefix,
	}
	if e.host != nil {
		s.Host = KVTier{Used: e.host.Used(), Free: e.host.Free(), Cap: e.host.Cap()}
	}
	return s
}

// prefixState reads the prefix cache's totals and blocks per namespace.
func (e *Engine) prefixState() *PrefixState {
	st := e.cache.Stats()
	p := &PrefixState{Promotions: st.Promotions, Demotions: st.Demotions, Evictions: st.Evictions}
	for ns, ts := range st.Tenants {
		switch ns {
		case "":
			ns = SharedNamespace
		case anonymous:
			ns = "" // as the reports name requests without a tenant
		}
		p.Namespaces = append(p.Namespaces, NamespaceBlocks{Namespace: ns, Device: ts.DeviceBlocks, Host: ts.HostBlocks})
	}
	slices.SortFunc(p.Namespaces, func(a, b NamespaceBlocks) int { return strings.Compare(a.Namespace, b.Namespace) })
	return p
}
