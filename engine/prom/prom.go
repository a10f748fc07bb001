// Package prom exports an engine's step reports and snapshots as
// Prometheus metrics, named as vLLM and SGLang name theirs
// (num_requests_running, time_to_first_token_seconds, ...) under the
// prefix specgate_, each with the label model_name. The README lists them.
//
// One Collector serves one engine: it is the engine's StepObserver and a
// prometheus.Collector.
//
//	c := prom.New(prom.Options{ModelName: name})
//	reg.MustRegister(c)
//	eng, err := engine.New(m, engine.Options{Observer: c})
//
// Counters and histograms follow the reports; gauges are read at scrape
// time from the latest snapshot a report carried. Latency histograms are
// labelled by priority class, never by tenant (a tenant label would
// multiply every bucket by the tenants); token and request counters keep a
// tenant label.
package prom

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine"
)

// Prefix begins every metric name of the service, the gateway's included.
const Prefix = "specgate_"

// Options configure a Collector.
type Options struct {
	// ModelName is the value of every metric's model_name label, as the
	// OpenAI API names the model (empty: "unknown").
	ModelName string
}

// Collector turns an engine's step reports into metrics. ObserveStep is
// called by the engine's step goroutine, Describe and Collect by scrapes:
// both are safe together.
type Collector struct {
	snap atomic.Pointer[engine.Snapshot]

	// From the reports.
	promptTokens     *prometheus.CounterVec // tenant
	generationTokens *prometheus.CounterVec // tenant
	success          *prometheus.CounterVec // tenant, priority, finished_reason
	preemptions      *prometheus.CounterVec // tenant, kv
	prefixQueries    *prometheus.CounterVec // tenant
	prefixHits       *prometheus.CounterVec // tenant, tier
	drafts           *prometheus.CounterVec // drafter
	draftTokens      *prometheus.CounterVec // drafter
	acceptedTokens   *prometheus.CounterVec // drafter
	ttft             *prometheus.HistogramVec
	tpot             *prometheus.HistogramVec
	e2e              *prometheus.HistogramVec
	queue            *prometheus.HistogramVec
	prefill          *prometheus.HistogramVec
	decode           *prometheus.HistogramVec
	reqPrompt        prometheus.Histogram
	reqGeneration    prometheus.Histogram
	stepTokens       prometheus.Histogram
	stepSeqs         prometheus.Histogram
	stepTime         prometheus.Histogram
	guidedMask       prometheus.Histogram
	// byClass holds the latency histograms of each class, indexed by
	// engine.Priority, so the step goroutine does no label lookups.
	byClass [3]classHistograms

	// From the snapshot, at scrape time.
	running, waiting, preempted *prometheus.Desc
	kvUsage, kvBlocks           *prometheus.Desc
	prefixBlocks, prefixMoved   *prometheus.Desc
}

type classHistograms struct {
	ttft, tpot, e2e, queue, prefill, decode prometheus.Observer
}

var (
	_ engine.StepObserver  = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// Buckets. Latencies span a CPU model's milliseconds to a long reply's
// minutes.
var (
	ttftBuckets    = []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .5, .75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 40, 80}
	tpotBuckets    = []float64{.001, .0025, .005, .0075, .01, .015, .02, .03, .04, .05, .075, .1, .15, .2, .3, .5, .75, 1, 2.5}
	requestBuckets = []float64{.01, .05, .1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1200}
	tokenBuckets   = prometheus.ExponentialBuckets(1, 2, 18) // 1 to 128Ki
	maskBuckets    = prometheus.ExponentialBuckets(1e-7, 4, 12)
)

// New creates the collectors; register the Collector once.
func New(o Options) *Collector {
	name := o.ModelName
	if name == "" {
		name = "unknown"
	}
	cl := prometheus.Labels{"model_name": name}
	counter := func(n, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: Prefix + n, Help: help, ConstLabels: cl}, labels)
	}
	histVec := func(n, help string, b []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: Prefix + n, Help: help, Buckets: b, ConstLabels: cl}, labels)
	}
	hist := func(n, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: Prefix + n, Help: help, Buckets: b, ConstLabels: cl})
	}
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(Prefix+n, help, labels, cl)
	}
	c := &Collector{
		promptTokens:     counter("prompt_tokens_total", "Prompt tokens prefilled, by tenant: computed by a forward pass, neither served by the prefix cache nor recomputed after a preemption.", "tenant"),
		generationTokens: counter("generation_tokens_total", "Tokens generated, by tenant.", "tenant"),
		success:          counter("request_success_total", "Finished requests by tenant, priority class and finish reason (stop, length, cancelled, error).", "tenant", "priority", "finished_reason"),
		preemptions:      counter("num_preemptions_total", "Sequences taken off the device, by tenant and whether their KV was kept (cached or swapped to the host tier) or dropped.", "tenant", "kv"),
		prefixQueries:    counter("prefix_cache_queries_total", "Tokens looked up in the prefix cache, by tenant.", "tenant"),
		prefixHits:       counter("prefix_cache_hits_total", "Tokens the prefix cache served, by tenant and the tier they were found on (device, or host and promoted).", "tenant", "tier"),
		drafts:           counter("spec_decode_num_drafts_total", "Speculative drafts verified (one per sequence per step), by drafter.", "drafter"),
		draftTokens:      counter("spec_decode_num_draft_tokens_total", "Draft tokens verified (tree nodes), by drafter.", "drafter"),
		acceptedTokens:   counter("spec_decode_num_accepted_tokens_total", "Draft tokens accepted, by drafter (the target adds one token to each draft).", "drafter"),
		ttft:             histVec("time_to_first_token_seconds", "Submission to first token, by priority class.", ttftBuckets, "priority"),
		tpot:             histVec("time_per_output_token_seconds", "Wait for each token after the first, by priority class (tokens of one step share its wait).", tpotBuckets, "priority"),
		e2e:              histVec("e2e_request_latency_seconds", "Submission to the end of a request, whatever its finish reason, by priority class.", requestBuckets, "priority"),
		queue:            histVec("request_queue_time_seconds", "Submission to first scheduling, by priority class (requests that never ran are left out).", requestBuckets, "priority"),
		prefill:          histVec("request_prefill_time_seconds", "First scheduling to first token, by priority class (requests without a token are left out).", requestBuckets, "priority"),
		decode:           histVec("request_decode_time_seconds", "First token to the end of a request, by priority class (requests without a token are left out).", requestBuckets, "priority"),
		reqPrompt:        hist("request_prompt_tokens", "Prompt tokens of each finished request.", tokenBuckets),
		reqGeneration:    hist("request_generation_tokens", "Tokens generated for each finished request.", tokenBuckets),
		stepTokens:       hist("iteration_tokens", "Tokens per forward pass (draft tree nodes included).", tokenBuckets),
		stepSeqs:         hist("iteration_sequences", "Sequences per forward pass.", prometheus.ExponentialBuckets(1, 2, 10)),
		stepTime:         hist("iteration_duration_seconds", "Forward pass duration.", tpotBuckets),
		guidedMask:       hist("guided_mask_seconds", "Time to get the token mask for one token of a guided request (computed on a grammar state's first use, cached after).", maskBuckets),

		running:      desc("num_requests_running", "Requests admitted to run (decoding or prefilling)."),
		waiting:      desc("num_requests_waiting", "Requests waiting, by priority class (preempted ones included).", "priority"),
		preempted:    desc("num_requests_preempted", "Waiting requests that were preempted."),
		kvUsage:      desc("kv_cache_usage_perc", "Fraction of a KV tier's blocks in use (0 to 1), by tier (device, host).", "tier"),
		kvBlocks:     desc("kv_cache_blocks", "KV blocks by tier (device, host) and state (used, free).", "tier", "state"),
		prefixBlocks: desc("prefix_cache_blocks", "Blocks the prefix cache keeps, by tier and namespace (a tenant, or (shared) for shared prefixes).", "tier", "namespace"),
		prefixMoved:  desc("prefix_cache_blocks_moved_total", "Prefix cache blocks promoted (host to device), demoted (device to host) and evicted (dropped).", "kind"),
	}
	for _, p := range []engine.Priority{engine.Standard, engine.Interactive, engine.Batch} {
		l := p.String()
		c.byClass[p] = classHistograms{
			ttft: c.ttft.WithLabelValues(l), tpot: c.tpot.WithLabelValues(l),
			e2e: c.e2e.WithLabelValues(l), queue: c.queue.WithLabelValues(l),
			prefill: c.prefill.WithLabelValues(l), decode: c.decode.WithLabelValues(l),
		}
	}
	return c
}

func (c *Collector) class(p engine.Priority) *classHistograms {
	if p < 0 || int(p) >= len(c.byClass) {
		p = engine.Standard // the engine refuses other values
	}
	return &c.byClass[p]
}

// ObserveStep implements engine.StepObserver.
func (c *Collector) ObserveStep(r *engine.StepReport) {
	c.snap.Store(r.Snapshot)
	if r.Sequences > 0 {
		c.stepTokens.Observe(float64(r.Tokens))
		c.stepSeqs.Observe(float64(r.Sequences))
		c.stepTime.Observe(r.Duration.Seconds())
	}
	for _, t := range r.Tenants {
		if t.PrefillTokens > 0 {
			c.promptTokens.WithLabelValues(t.Tenant).Add(float64(t.PrefillTokens))
		}
		if t.DecodeTokens > 0 {
			c.generationTokens.WithLabelValues(t.Tenant).Add(float64(t.DecodeTokens))
		}
	}
	for _, d := range r.Drafts {
		c.drafts.WithLabelValues(d.Drafter).Add(float64(d.Drafts))
		c.draftTokens.WithLabelValues(d.Drafter).Add(float64(d.Drafted))
		c.acceptedTokens.WithLabelValues(d.Drafter).Add(float64(d.Accepted))
	}
	for _, f := range r.FirstTokens {
		c.class(f.Priority).ttft.Observe(f.TTFT.Seconds())
	}
	for _, g := range r.TokenGaps {
		c.class(g.Priority).tpot.Observe(g.Gap.Seconds())
	}
	for _, f := range r.Finished {
		h := c.class(f.Priority)
		h.e2e.Observe(f.Stats.Total.Seconds())
		if f.Scheduled {
			h.queue.Observe(f.Stats.Queue.Seconds())
			if f.Stats.TTFT > 0 {
				h.prefill.Observe((f.Stats.TTFT - f.Stats.Queue).Seconds())
				h.decode.Observe((f.Stats.Total - f.Stats.TTFT).Seconds())
			}
		}
		c.reqPrompt.Observe(float64(f.Usage.PromptTokens))
		c.reqGeneration.Observe(float64(f.Usage.CompletionTokens))
		c.success.WithLabelValues(f.Tenant, f.Priority.String(), f.Reason).Inc()
	}
	for _, p := range r.Preemptions {
		kv := "dropped"
		if p.Kept {
			kv = "kept"
		}
		c.preemptions.WithLabelValues(p.Tenant, kv).Inc()
	}
	for _, l := range r.PrefixLookups {
		c.prefixQueries.WithLabelValues(l.Tenant).Add(float64(l.Device + l.Host + l.Miss))
		c.prefixHits.WithLabelValues(l.Tenant, "device").Add(float64(l.Device))
		c.prefixHits.WithLabelValues(l.Tenant, "host").Add(float64(l.Host))
	}
	for _, d := range r.GuidedMasks {
		c.guidedMask.Observe(d.Seconds())
	}
}

// vecs are the collectors that hold their own values.
func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{
		c.promptTokens, c.generationTokens, c.success, c.preemptions, c.prefixQueries, c.prefixHits,
		c.drafts, c.draftTokens, c.acceptedTokens, c.ttft, c.tpot, c.e2e, c.queue, c.prefill, c.decode,
		c.reqPrompt, c.reqGeneration, c.stepTokens, c.stepSeqs, c.stepTime, c.guidedMask,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.preempted, c.kvUsage, c.kvBlocks, c.prefixBlocks, c.prefixMoved} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
	s := c.snap.Load()
	if s == nil {
		return // no step yet
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.running, float64(s.Running))
	for _, p := range []engine.Priority{engine.Interactive, engine.Standard, engine.Batch} {
		gauge(c.waiting, float64(s.Queue.Of(p)), p.String())
	}
	gauge(c.preempted, float64(s.Preempted))
	tiers := []struct {
		name string
		t    engine.KVTier
	}{{"device", s.Device}, {"host", s.Host}}
	for _, t := range tiers {
		if t.t.Cap == 0 {
			continue // no host tier
		}
		gauge(c.kvUsage, t.t.Usage(), t.name)
		gauge(c.kvBlocks, float64(t.t.Used), t.name, "used")
		gauge(c.kvBlocks, float64(t.t.Free), t.name, "free")
	}
	if p := s.Prefix; p != nil {
		for _, n := range p.Namespaces {
			gauge(c.prefixBlocks, float64(n.Device), "device", n.Namespace)
			gauge(c.prefixBlocks, float64(n.Host), "host", n.Namespace)
		}
		for _, m := range []struct {
			kind string
			n    int64
		}{{"promotion", p.Promotions}, {"demotion", p.Demotions}, {"eviction", p.Evictions}} {
			ch <- prometheus.MustNewConstMetric(c.prefixMoved, prometheus.CounterValue, float64(m.n), m.kind)
		}
	}
}
