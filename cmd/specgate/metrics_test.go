package main

// /metrics as Prometheus scrapes it: `specgate serve` runs as a real
// process, real clients chat over its socket, and the exposition is read
// over HTTP and parsed with Prometheus's own parser.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/internal/wsraw"
)

// scrapeMetrics GETs base/metrics and parses it.
func scrapeMetrics(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// metricValue sums the family's samples whose labels include want (a
// histogram's count), and reports whether any matched.
func metricValue(mfs map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, m := range mfs[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && labels[want[i]] == want[i+1]
		}
		if !match {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

// checkFamilies fails on a family outside the prefix (but Go's and the
// process's own), an instance label, an engine family without model_name,
// or a histogram labelled by tenant.
func checkFamilies(t *testing.T, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	gatewayOnly := map[string]bool{}
	for _, n := range []string{"ws_connections", "ws_frames_total", "auth_failures_total", "resumes_total", "ws_server_closes_total", "chat_requests_total", "turns_recovered_total", "node_info"} {
		gatewayOnly["specgate_"+n] = true
	}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		if !strings.HasPrefix(name, "specgate_") {
			t.Errorf("%s: want the prefix specgate_", name)
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if _, ok := labels["instance"]; ok {
				t.Errorf("%s%v: an instance label collides with the scrape target's", name, labels)
			}
			if !gatewayOnly[name] && labels["model_name"] == "" {
				t.Errorf("%s%v: want a model_name label", name, labels)
			}
			if _, ok := labels["tenant"]; ok && mf.GetType() == dto.MetricType_HISTOGRAM {
				t.Errorf("%s%v: a histogram labelled by tenant", name, labels)
			}
		}
	}
}

func TestServeMetrics(t *testing.T) {
	rs := testredis.Start(t)
	p := startServe(t, rs.URL(), "--instance", "node-a")
	c := login(t, p, tenantToken(t, rs, "alice"))
	c.Timeout = 30 * time.Second
	sid := newSession(t, c)

	before := scrapeMetrics(t, p.base)
	checkFamilies(t, before)
	if v, ok := metricValue(before, "specgate_node_info", "node", "node-a", "role", "all"); !ok || v != 1 {
		t.Errorf("have node_info %v, %v; want 1 for node-a, role all", v, ok)
	}
	if v, ok := metricValue(before, "specgate_ws_connections"); !ok || v != 1 {
		t.Errorf("have %v open connections (present %v); want 1", v, ok)
	}

	completion := 0
	for _, rid := range []string{"r1", "r2"} {
		c.SendJSON(map[string]any{"type": "chat", "session": sid, "request": rid, "content": "Once upon a time", "params": map[string]any{"temperature": 0, "max_tokens": 8}})
		_, done, errs := c.Collect(rid, 0)
		if len(errs) > 0 || done.Usage == nil {
			t.Fatalf("%s: have %+v %+v", rid, errs, done)
		}
		completion += done.Usage.CompletionTokens
	}
	if code, _ := wsraw.HTTPGet(t, p.base, "/v1/sessions", "not-a-jwt"); code != http.StatusUnauthorized {
		t.Errorf("have HTTP %d for a bad token; want 401", code)
	}

	// The reply's last step publishes just after its done went out.
	var after map[string]*dto.MetricFamily
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after = scrapeMetrics(t, p.base)
		if v, _ := metricValue(after, "specgate_e2e_request_latency_seconds"); v == 2 || time.Now().After(deadline) {
			break
		}
	}
	checkFamilies(t, after)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"specgate_time_to_first_token_seconds", nil, 2},
		{"specgate_e2e_request_latency_seconds", nil, 2},
		{"specgate_request_queue_time_seconds", nil, 2},
		{"specgate_request_success_total", []string{"tenant", "acme", "finished_reason", "length"}, 2},
		{"specgate_generation_tokens_total", []string{"tenant", "acme"}, float64(completion)},
		{"specgate_chat_requests_total", []string{"tenant", "acme", "outcome", "length"}, 2},
		{"specgate_num_requests_running", nil, 0},
		{"specgate_num_requests_waiting", nil, 0},
		{"specgate_auth_failures_total", nil, 1},
	} {
		if have, ok := metricValue(after, tc.name, tc.labels...); !ok || have != tc.want {
			t.Errorf("%s%v: have %v (present %v); want %v", tc.name, tc.labels, have, ok, tc.want)
		}
	}
	if have, _ := metricValue(after, "specgate_prompt_tokens_total", "tenant", "acme"); have == 0 {
		t.Error("have no prompt tokens counted")
	}
}

// TestEngineRoleMetrics: an engine apart serves its own /metrics, with the
// engine's families and its node, and none of a gateway's.
func TestEngineRoleMetrics(t *testing.T) {
	rs := testredis.Start(t)
	p := startServe(t, rs.URL(), "--role", "engine", "--instance", "engine-a")
	mfs := scrapeMetrics(t, p.base)
	checkFamilies(t, mfs)
	if v, ok := metricValue(mfs, "specgate_node_info", "node", "engine-a", "role", "engine"); !ok || v != 1 {
		t.Errorf("have node_info %v, %v; want 1 for engine-a, role engine", v, ok)
	}
	if v, ok := metricValue(mfs, "specgate_kv_cache_blocks", "tier", "device", "state", "free"); !ok || v == 0 {
		t.Errorf("have %v free device blocks (present %v); want the idle engine's", v, ok)
	}
	if _, ok := mfs["specgate_ws_connections"]; ok {
		t.Error("have a gateway's ws_connections on an engine apart")
	}
}

// TestGatewayRoleMetrics: a gateway apart has no model, so its /metrics
// has its own families and its node, and none of an engine's.
func TestGatewayRoleMetrics(t *testing.T) {
	rs := testredis.Start(t)
	p := startServe(t, rs.URL(), "--role", "gateway", "--instance", "gw-a")
	mfs := scrapeMetrics(t, p.base)
	checkFamilies(t, mfs)
	if v, ok := metricValue(mfs, "specgate_node_info", "node", "gw-a", "role", "gateway"); !ok || v != 1 {
		t.Errorf("have node_info %v, %v; want 1 for gw-a, role gateway", v, ok)
	}
	if _, ok := mfs["specgate_ws_connections"]; !ok {
		t.Error("have no ws_connections on a gateway")
	}
	if _, ok := mfs["specgate_num_requests_running"]; ok {
		t.Error("have an engine's num_requests_running on a gateway apart")
	}
}
