package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/prom"
)

// Snapshotter is what KVProbe reads: *engine.Engine.
type Snapshotter interface {
	Snapshot() engine.Snapshot
}

// KVProbe reports an engine's free device KV blocks for the heartbeat,
// from the engine's latest snapshot:
//
//	eng, _ := engine.New(m, o)
//	probe := cluster.NewKVProbe(eng)
//	cluster.RunEngine(ctx, cluster.EngineOptions{FreeKV: probe.Free, ...})
type KVProbe struct {
	e Snapshotter
}

// NewKVProbe reads e (nil: Free is always -1).
func NewKVProbe(e Snapshotter) *KVProbe { return &KVProbe{e: e} }

// Free returns the free device KV blocks at the engine's last step, -1
// without an engine.
func (p *KVProbe) Free() int {
	if p == nil || p.e == nil {
		return -1
	}
	return p.e.Snapshot().Device.Free
}

// RegisterNode registers specgate_node_info{node, role} = 1, which names
// the process in the cluster (its id in Redis, the heartbeat's and
// `specgate status`'s). It is a series of its own, to join on, rather
// than a label on every series: the scrape target's instance label stays
// Prometheus's.
func RegisterNode(reg prometheus.Registerer, role, id string) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        prom.Prefix + "node_info",
		Help:        "Always 1: the process's node id in the cluster and its role (all, gateway, engine).",
		ConstLabels: prometheus.Labels{"node": id, "role": role},
	})
	g.Set(1)
	return reg.Register(g)
}
