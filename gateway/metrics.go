package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine"
)

// metrics are the gateway's own Prometheus collectors.
type metrics struct {
	connections  prometheus.Gauge
	frames       *prometheus.CounterVec // direction, type
	authFailures *prometheus.CounterVec // reason
	resumes      *prometheus.CounterVec // outcome
	disconnects  *prometheus.CounterVec // reason
	chats        *prometheus.CounterVec // tenant, outcome
	recovered    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "specgate_ws_connections", Help: "Open WebSocket connections.",
		}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_ws_frames_total", Help: "Protocol frames by direction (in, out) and type.",
		}, []string{"direction", "type"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_auth_failures_total", Help: "Refused authentications by reason.",
		}, []string{"reason"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_resumes_total", Help: "session.resume requests by outcome (ok, not_found, expired, error).",
		}, []string{"outcome"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_ws_server_closes_total", Help: "Connections the gateway closed, by reason.",
		}, []string{"reason"}),
		chats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_chat_requests_total", Help: "Chat requests by tenant and outcome (finish reason or error code).",
		}, []string{"tenant", "outcome"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "specgate_turns_recovered_total", Help: "Turns of a dead gateway this gateway finalized from their stream log.",
		}),
	}
	for _, c := range []prometheus.Collector{m.connections, m.frames, m.authFailures, m.resumes, m.disconnects, m.chats, m.recovered} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// EngineMetrics implements engine.Metrics over Prometheus. Register it with
// the same registry as the gateway (Options.Registry) so that /metrics
// shows both. Its methods never block.
type EngineMetrics struct {
	queueDepth  *prometheus.GaugeVec
	running     prometheus.Gauge
	preempted   prometheus.Gauge
	preemptions *prometheus.CounterVec
	kvBlocks    *prometheus.GaugeVec
	ttft        *prometheus.HistogramVec
	interToken  *prometheus.HistogramVec
	tokens      *prometheus.CounterVec
	stepTokens  prometheus.Histogram
	stepSeqs    prometheus.Histogram
	stepTime    prometheus.Histogram
	finished    *prometheus.CounterVec
	prefixToks  *prometheus.CounterVec // tenant, result (device, host, miss)
	prefixMoves *prometheus.CounterVec // kind (promotion, demotion, eviction)
	prefixBlks  *prometheus.GaugeVec   // tier, namespace
	guidedMask  prometheus.Histogram
	specAccept  *prometheus.HistogramVec // drafter
}

var _ engine.Metrics = (*EngineMetrics)(nil)

// NewEngineMetrics creates the engine's collectors and registers them.
func NewEngineMetrics(reg prometheus.Registerer) (*EngineMetrics, error) {
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &EngineMetrics{
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "specgate_engine_queue_depth", Help: "Waiting requests by priority class."}, []string{"priority"}),
		running:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "specgate_engine_running_sequences", Help: "Sequences decoding or prefilling."}),
		preempted:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "specgate_engine_preempted_sequences", Help: "Waiting sequences that were preempted."}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_engine_preemptions_total", Help: "Preemptions by tenant and whether KV was kept (cached or swapped to host) rather than dropped."},
			[]string{"tenant", "swapped"}),
		kvBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "specgate_kv_blocks", Help: "KV blocks by tier and state (used, free)."}, []string{"tier", "state"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_ttft_seconds", Help: "Submit to first token.", Buckets: latency},
			[]string{"tenant", "priority"}),
		interToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_inter_token_seconds", Help: "Gap between consecutive tokens.", Buckets: latency},
			[]string{"tenant", "priority"}),
		tokens:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_tokens_total", Help: "Tokens by tenant and kind (prompt, completion)."}, []string{"tenant", "kind"}),
		stepTokens: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "specgate_step_tokens", Help: "Tokens per forward pass.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		stepSeqs:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "specgate_step_sequences", Help: "Sequences per forward pass.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		stepTime:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "specgate_step_seconds", Help: "Forward pass duration.", Buckets: latency}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_engine_finished_total", Help: "Finished requests by tenant, priority and finish reason."},
			[]string{"tenant", "priority", "reason"}),
		prefixToks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_prefix_cache_tokens_total",
			Help: "Prefix cache lookup tokens by tenant and result: hit on the device tier, hit on the host tier (promoted), or miss."},
			[]string{"tenant", "result"}),
		prefixMoves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_prefix_cache_blocks_moved_total",
			Help: "Prefix cache blocks promoted (host to device), demoted (device to host) and evicted (dropped)."},
			[]string{"kind"}),
		prefixBlks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "specgate_prefix_cache_blocks",
			Help: "Blocks kept by the prefix cache, by tier and namespace (a tenant, or (shared) for shared prefixes)."},
			[]string{"tier", "namespace"}),
		guidedMask: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "specgate_guided_mask_seconds",
			Help:    "Time to get the token mask for one token of a guided request (computed on a grammar state's first use, cached after).",
			Buckets: prometheus.ExponentialBuckets(1e-7, 4, 12)}),
		specAccept: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_spec_accepted_tokens",
			Help:    "Draft tokens accepted per sequence per speculative step, by drafter (the target adds one token).",
			Buckets: []float64{0, 1, 2, 3, 4, 5, 6, 8, 12, 16}}, []string{"drafter"}),
	}
	for _, c := range []prometheus.Collector{m.queueDepth, m.running, m.preempted, m.preemptions, m.kvBlocks, m.ttft, m.interToken, m.tokens, m.stepTokens, m.stepSeqs, m.stepTime, m.finished,
		m.prefixToks, m.prefixMoves, m.prefixBlks, m.guidedMask, m.specAccept} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *EngineMetrics) QueueDepth(p engine.Priority, n int) {
	m.queueDepth.WithLabelValues(p.String()).Set(float64(n))
}

func (m *EngineMetrics) Sequences(running, preempted int) {
	m.running.Set(float64(running))
	m.preempted.Set(float64(preempted))
}

func (m *EngineMetrics) Preemption(tenant string, kept bool) {
	s := "false"
	if kept {
		s = "true"
	}
	m.preemptions.WithLabelValues(tenant, s).Inc()
}

func (m *EngineMetrics) KVBlocks(tier string, used, free int) {
	m.kvBlocks.WithLabelValues(tier, "used").Set(float64(used))
	m.kvBlocks.WithLabelValues(tier, "free").Set(float64(free))
}

func (m *EngineMetrics) TTFT(tenant string, p engine.Priority, d time.Duration) {
	m.ttft.WithLabelValues(tenant, p.String()).Observe(d.Seconds())
}

func (m *EngineMetrics) InterToken(tenant string, p engine.Priority, d time.Duration) {
	m.interToken.WithLabelValues(tenant, p.String()).Observe(d.Seconds())
}

func (m *EngineMetrics) Tokens(tenant string, prompt, completion int) {
	m.tokens.WithLabelValues(tenant, "prompt").Add(float64(prompt))
	m.tokens.WithLabelValues(tenant, "completion").Add(float64(completion))
}

func (m *EngineMetrics) Step(tokens, seqs int, d time.Duration) {
	m.stepTokens.Observe(float64(tokens))
	m.stepSeqs.Observe(float64(seqs))
	m.stepTime.Observe(d.Seconds())
}

func (m *EngineMetrics) Finished(tenant string, p engine.Priority, reason string) {
	m.finished.WithLabelValues(tenant, p.String(), reason).Inc()
}

func (m *EngineMetrics) PrefixLookup(tenant string, device, host, miss int) {
	m.prefixToks.WithLabelValues(tenant, "device").Add(float64(device))
	m.prefixToks.WithLabelValues(tenant, "host").Add(float64(host))
	m.prefixToks.WithLabelValues(tenant, "miss").Add(float64(miss))
}

func (m *EngineMetrics) PrefixTransfers(promoted, demoted, evicted int) {
	m.prefixMoves.WithLabelValues("promotion").Add(float64(promoted))
	m.prefixMoves.WithLabelValues("demotion").Add(float64(demoted))
	m.prefixMoves.WithLabelValues("eviction").Add(float64(evicted))
}

func (m *EngineMetrics) PrefixBlocks(namespace, tier string, n int) {
	m.prefixBlks.WithLabelValues(tier, namespace).Set(float64(n))
}

func (m *EngineMetrics) GuidedMask(d time.Duration) { m.guidedMask.Observe(d.Seconds()) }

func (m *EngineMetrics) SpecAccepted(drafter string, accepted int) {
	m.specAccept.WithLabelValues(drafter).Observe(float64(accepted))
}
