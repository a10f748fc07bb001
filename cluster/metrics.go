package cluster

import (
	"net/http"
	"sort"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/specgate/specgate/engine"
)

// KVProbe is an engine.Metrics that remembers the device KV gauges for
// the heartbeat and passes every call on to the Metrics it wraps. It
// embeds the interface, so methods the engine adds later pass through too:
//
//	probe := cluster.NewKVProbe(em)
//	eng, _ := engine.New(m, engine.Options{Metrics: probe})
//	cluster.RunEngine(ctx, cluster.EngineOptions{FreeKV: probe.Free, ...})
type KVProbe struct {
	engine.Metrics

	free atomic.Int64 // device blocks free at the last step
	seen atomic.Bool  // free has been set
}

var _ engine.Metrics = (*KVProbe)(nil)

// NewKVProbe wraps next (nil: engine.NopMetrics).
func NewKVProbe(next engine.Metrics) *KVProbe {
	if next == nil {
		next = engine.NopMetrics{}
	}
	return &KVProbe{Metrics: next}
}

// Free returns the free device KV blocks at the last step, -1 before one.
func (p *KVProbe) Free() int {
	if !p.seen.Load() {
		return -1
	}
	return int(p.free.Load())
}

// KVBlocks records the device tier's free blocks and passes the call on.
func (p *KVProbe) KVBlocks(tier string, used, free int) {
	if tier == "device" {
		p.free.Store(int64(free))
		p.seen.Store(true)
	}
	p.Metrics.KVBlocks(tier, used, free)
}

// InstanceGatherer adds the label instance=Instance to every metric G
// gathers, so gateways' and engines' series stay apart when one Prometheus
// scrapes them all. A metric that has an instance label already keeps it.
type InstanceGatherer struct {
	G        prometheus.Gatherer
	Instance string
}

// Gather implements prometheus.Gatherer.
func (g InstanceGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.G.Gather()
	name, value := "instance", g.Instance
	for _, mf := range mfs {
	metrics:
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == name {
					continue metrics
				}
			}
			m.Label = append(m.Label, &dto.LabelPair{Name: &name, Value: &value})
			sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
		}
	}
	return mfs, err
}

// MetricsHandler serves g's metrics with the instance label added.
func MetricsHandler(g prometheus.Gatherer, instance string) http.Handler {
	return promhttp.HandlerFor(InstanceGatherer{G: g, Instance: instance}, promhttp.HandlerOpts{})
}
