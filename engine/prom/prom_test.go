package prom_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/engine/prom"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

// scrape GETs url and parses the text exposition with Prometheus's own
// parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return mfs
}

// value sums the family's samples whose labels include want: counter and
// gauge values, a histogram's count.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, true
}

func TestScrapeAfterRequests(t *testing.T) {
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	m, err := model.Load(testmodels.Path(t, testmodels.Stories260K), be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := prom.New(prom.Options{ModelName: "stories"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	eng, err := engine.New(m, engine.Options{Observer: c, Speculation: engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	url := srv.URL + "/metrics"

	// Before any request: the gauges are there, at zero.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for eng.Snapshot().Steps == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // the loop's first step publishes
	}
	before := scrape(t, url)
	if v, ok := value(before, "specgate_num_requests_running", nil); !ok || v != 0 {
		t.Errorf("have num_requests_running %v, %v before any request; want 0", v, ok)
	}
	if _, ok := value(before, "specgate_time_to_first_token_seconds", nil); !ok {
		t.Error("have no time_to_first_token_seconds family before any request; want it, empty")
	}

	reqs := []engine.Request{
		{Tenant: "acme", Priority: engine.Interactive, Prompt: nil, Messages: []engine.Message{{Role: "user", Content: "the cat sat. the cat sat. the cat sat. the cat"}}, MaxTokens: 24},
		{Tenant: "acme", Priority: engine.Standard, Messages: []engine.Message{{Role: "user", Content: "Once upon a time"}}, MaxTokens: 16},
		{Tenant: "umbra", Priority: engine.Batch, Messages: []engine.Message{{Role: "user", Content: "Once upon a time, there was"}}, MaxTokens: 12},
	}
	completion := map[string]int{}
	prompt, cached := 0, 0
	for _, r := range reqs {
		s, err := eng.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if f := ev.Final; f != nil {
				if f.FinishReason != engine.FinishLength && f.FinishReason != engine.FinishStop {
					t.Fatalf("have finish %s %v", f.FinishReason, f.Err)
				}
				completion[r.Tenant] += f.Usage.CompletionTokens
				prompt += f.Usage.PromptTokens
				cached += f.Usage.CachedTokens
				break
			}
		}
	}
	// The last final reaches us during its step; the step's report
	// reaches the collector when the step ends, so wait for that (the
	// snapshot is stored before the observer is called, so an idle
	// snapshot alone does not say the counts are in).
	after := scrape(t, url)
	for ctx.Err() == nil {
		if v, _ := value(after, "specgate_request_success_total", nil); eng.Snapshot().Load() == 0 && int(v) == len(reqs) {
			break
		}
		time.Sleep(time.Millisecond)
		after = scrape(t, url)
	}
	for name, mf := range after {
		if !strings.HasPrefix(name, prom.Prefix) {
			t.Errorf("%s: want the prefix %s", name, prom.Prefix)
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model_name"] != "stories" {
				t.Errorf("%s%v: want model_name stories", name, labels)
			}
			if _, ok := labels["instance"]; ok {
				t.Errorf("%s%v: an instance label collides with the scrape target's", name, labels)
			}
			if _, ok := labels["tenant"]; ok && mf.GetType() == dto.MetricType_HISTOGRAM {
				t.Errorf("%s%v: a latency histogram with a tenant label", name, labels)
			}
		}
	}
	n := float64(len(reqs))
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"specgate_time_to_first_token_seconds", nil, n},
		{"specgate_time_to_first_token_seconds", map[string]string{"priority": "batch"}, 1},
		{"specgate_e2e_request_latency_seconds", nil, n},
		{"specgate_request_queue_time_seconds", map[string]string{"priority": "interactive"}, 1},
		{"specgate_request_queue_time_seconds", nil, n},
		{"specgate_request_prefill_time_seconds", nil, n},
		{"specgate_request_decode_time_seconds", map[string]string{"priority": "standard"}, 1},
		{"specgate_request_prompt_tokens", nil, n},
		{"specgate_request_generation_tokens", nil, n},
		{"specgate_request_success_total", map[string]string{"tenant": "acme"}, 2},
		{"specgate_request_success_total", map[string]string{"tenant": "umbra", "priority": "batch"}, 1},
		{"specgate_generation_tokens_total", map[string]string{"tenant": "acme"}, float64(completion["acme"])},
		{"specgate_generation_tokens_total", map[string]string{"tenant": "umbra"}, float64(completion["umbra"])},
		{"specgate_prompt_tokens_total", nil, float64(prompt - cached)},
		{"specgate_num_requests_running", nil, 0},
		{"specgate_num_requests_waiting", nil, 0},
		{"specgate_time_per_output_token_seconds", nil, float64(completion["acme"] + completion["umbra"] - len(reqs))},
	} {
		if have, ok := value(after, tc.name, tc.labels); !ok || have != tc.want {
			t.Errorf("%s%v: have %v (present %v); want %v", tc.name, tc.labels, have, ok, tc.want)
		}
	}
	// The phases add up: queue, prefill and decode make the end to end
	// latency, queue and prefill the time to first token.
	queue, prefill, decode := histSum(after, "specgate_request_queue_time_seconds"), histSum(after, "specgate_request_prefill_time_seconds"), histSum(after, "specgate_request_decode_time_seconds")
	ttft, e2e := histSum(after, "specgate_time_to_first_token_seconds"), histSum(after, "specgate_e2e_request_latency_seconds")
	if !near(queue+prefill, ttft) || !near(queue+prefill+decode, e2e) || e2e == 0 {
		t.Errorf("have seconds queued %v, prefilling %v, decoding %v, to first token %v, end to end %v; want them adding up", queue, prefill, decode, ttft, e2e)
	}
	if have, _ := value(after, "specgate_prefix_cache_queries_total", nil); have < float64(prompt) {
		t.Errorf("have %v prefix cache query tokens; want at least the %d prompt tokens", have, prompt)
	}
	if have, _ := value(after, "specgate_iteration_tokens", nil); have == 0 {
		t.Error("have no forward passes counted")
	}
	used, _ := value(after, "specgate_kv_cache_usage_perc", map[string]string{"tier": "device"})
	blocks, _ := value(after, "specgate_kv_cache_blocks", map[string]string{"tier": "device"})
	if used < 0 || used > 1 || int(blocks) != eng.Options().KVBlocks {
		t.Errorf("have device usage %v of %v blocks; want a fraction of %d", used, blocks, eng.Options().KVBlocks)
	}
	drafts, _ := value(after, "specgate_spec_decode_num_drafts_total", map[string]string{"drafter": "ngram"})
	drafted, _ := value(after, "specgate_spec_decode_num_draft_tokens_total", map[string]string{"drafter": "ngram"})
	accepted, _ := value(after, "specgate_spec_decode_num_accepted_tokens_total", map[string]string{"drafter": "ngram"})
	if drafts == 0 || drafted > 4*drafts || accepted > drafted {
		t.Errorf("have %v drafts of %v tokens, %v accepted; want n-gram drafts of the repeated prompt, at most 4 tokens each", drafts, drafted, accepted)
	}

	// The names follow Prometheus's conventions.
	problems, err := promlint.NewWithMetricFamilies(familyList(after)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// histSum is the sum of a histogram family's observations.
func histSum(mfs map[string]*dto.MetricFamily, name string) float64 {
	sum := 0.0
	for _, m := range mfs[name].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

func familyList(mfs map[string]*dto.MetricFamily) []*dto.MetricFamily {
	var l []*dto.MetricFamily
	for _, mf := range mfs {
		l = append(l, mf)
	}
	return l
}

// TestRegisterOnce: a second collector on one registry is refused, so
// /metrics can never show an engine's series twice.
func TestRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(prom.New(prom.Options{ModelName: "a"})); err != nil {
		t.Fatal(err)
	}
	err := reg.Register(prom.New(prom.Options{ModelName: "a"}))
	if err == nil {
		t.Fatal("have a second collector of the same model registered; want an error")
	}
}
