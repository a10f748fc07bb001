package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine/prom"
)

// metrics are the gateway's own Prometheus collectors; the engine's are
// package engine/prom's, under the same prefix.
type metrics struct {
	connections  prometheus.Gauge
	frames       *prometheus.CounterVec // direction, type
	deltasOut    prometheus.Counter     // frames{out, delta}: one per delta, looked up once
	authFailures *prometheus.CounterVec // reason
	resumes      *prometheus.CounterVec // outcome
	disconnects  *prometheus.CounterVec // reason
	chats        *prometheus.CounterVec // tenant, outcome
	recovered    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: prom.Prefix + "ws_connections", Help: "Open WebSocket connections.",
		}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prom.Prefix + "ws_frames_total", Help: "Protocol frames by direction (in, out) and type.",
		}, []string{"direction", "type"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prom.Prefix + "auth_failures_total", Help: "Refused authentications by reason.",
		}, []string{"reason"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prom.Prefix + "resumes_total", Help: "session.resume requests by outcome (ok, not_found, expired, error).",
		}, []string{"outcome"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prom.Prefix + "ws_server_closes_total", Help: "Connections the gateway closed, by reason.",
		}, []string{"reason"}),
		chats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prom.Prefix + "chat_requests_total", Help: "Chat requests by tenant and outcome (finish reason or error code).",
		}, []string{"tenant", "outcome"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prom.Prefix + "turns_recovered_total", Help: "Turns of a dead gateway this gateway finalized from their stream log.",
		}),
	}
	m.deltasOut = m.frames.WithLabelValues("out", TypeDelta)
	for _, c := range []prometheus.Collector{m.connections, m.frames, m.authFailures, m.resumes, m.disconnects, m.chats, m.recovered} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
