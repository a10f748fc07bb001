package loadgen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/tenants"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if q := h.Quantile(0.5); q != 0 {
		t.Fatalf("empty: have %v; want 0", q)
	}
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	var other Histogram
	other.Add(5 * time.Second)
	h.Merge(&other)
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, 5 * time.Second}} {
		got := h.Quantile(tc.q)
		if rel := float64(got-tc.want) / float64(tc.want); rel > 0.012 || rel < -0.012 {
			t.Errorf("q%.2f: have %v; want %v ±1.2%%", tc.q, got, tc.want)
		}
	}
	if h.Count() != 1001 || h.Max() != 5*time.Second {
		t.Errorf("have count %d max %v; want 1001, 5s", h.Count(), h.Max())
	}
}

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][]Weighted
		bad  bool
	}{
		{in: "interactive", want: [][]Weighted{{{Interactive, 1}}}},
		{in: "interactive:1/standard:3,batch:0.5", want: [][]Weighted{{{Interactive, 1}}, {{Standard, 3}, {Batch, 0.5}}}},
		{in: "urgent:1", bad: true},
		{in: "batch:-1", bad: true},
		{in: "interactive/", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMix(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("have %v; want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a, b := mustJSON(t, got), mustJSON(t, tc.want); a != b {
				t.Fatalf("have %s; want %s", a, b)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMainSmoke runs the command against an in-process gateway: tenants
// created in Redis, two users each, three turns each, one tenant all
// interactive and one all batch. Every request must complete with the
// tokens asked for, and the latencies must fit the fake engine's pace.
func TestMainSmoke(t *testing.T) {
	const interval = 2 * time.Millisecond
	gen := newPacedGen(t, interval, 4)
	g := startGateway(t, gen)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	err := Main(ctx, []string{
		"-url", g.url, "-redis", testredis.URL(), "-redis-prefix", g.prefix,
		"-tenants", "2", "-users", "2", "-turns", "3", "-max-tokens", "5",
		"-ramp", "10ms", "-duration", "20s", "-mix", "interactive/batch", "-json",
	}, &out)
	if err != nil {
		t.Fatalf("Main: %v\n%s", err, out.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	tot := rep.Total
	if tot.Requests != 12 || tot.Completed != 12 || tot.ErrorCount() != 0 || tot.Unfinished != 0 {
		t.Fatalf("have %+v; want 12 requests, all completed, no errors", tot)
	}
	if tot.Tokens != 60 {
		t.Errorf("have %d tokens; want 12 × 5", tot.Tokens)
	}
	if rep.StopReason != "done" || rep.Connects != 4 {
		t.Errorf("have stop %q, %d connects; want done, 4", rep.StopReason, rep.Connects)
	}
	if len(rep.Tenants) != 2 || rep.Tenants[0].Name != "loadgen-0" || rep.Tenants[1].Name != "loadgen-1" {
		t.Fatalf("have tenants %+v; want loadgen-0, loadgen-1", rep.Tenants)
	}
	// The first delta comes one tick or more after the request is
	// submitted; the next ones one tick apart, unless batched together.
	if tot.TTFTP50 <= 0 || tot.TTFTP50 > 1000 || tot.ITLP99 > 1000 || tot.TokensPerSecond <= 0 {
		t.Errorf("have %+v; want 0 < TTFT p50 <= 1s, ITL p99 <= 1s, tokens/s > 0", tot)
	}
	if p := gen.priorities(); p[engine.Interactive] != 6 || p[engine.Batch] != 6 {
		t.Errorf("have priorities %v; want 6 interactive, 6 batch", p)
	}
	if len(rep.Priorities) != 2 || rep.Priorities[0].Name != Interactive || rep.Priorities[1].Name != Batch {
		t.Errorf("have priority rows %+v; want interactive and batch", rep.Priorities)
	}
	// A second run reuses the tenants and, with a given key, mints tokens
	// itself; this time the table is printed, capped at 3 requests.
	store := tenants.NewStore(g.rdb, g.prefix, nil)
	ten, err := store.Get(ctx, "loadgen-0")
	if err != nil {
		t.Fatal(err)
	}
	key := ten.Keys[len(ten.Keys)-1]
	out.Reset()
	err = Main(ctx, []string{
		"-url", g.url, "-hs256", key.ID + ":" + base64.StdEncoding.EncodeToString(key.Secret),
		"-users", "2", "-turns", "3", "-requests", "3", "-max-tokens", "3", "-ramp", "0",
	}, &out)
	if err != nil {
		t.Fatalf("Main: %v\n%s", err, out.String())
	}
	table := out.String()
	for _, want := range []string{"stopped: requests", "loadgen-0", "total", "TTFT p99", "ITL p50"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	t.Logf("\n%s", table)
}

// TestRunStopsAtDuration checks the duration bound: a turn longer than the
// run is cancelled, reported unfinished, and not as an error.
func TestRunStopsAtDuration(t *testing.T) {
	gen := newPacedGen(t, 50*time.Millisecond, 1000)
	g := startGateway(t, gen)
	store := tenants.NewStore(g.rdb, g.prefix, nil)
	ctx := context.Background()
	kid, secret, err := EnsureTenant(ctx, store, tenants.CreateSpec{ID: "slow", Key: tenants.KeySpec{Alg: tenants.HS256}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := Run(ctx, Config{
		URL:       g.url,
		Tenants:   []Tenant{{Name: "slow", Token: HS256Minter(kid, secret, "specgate", time.Minute)}},
		Users:     2,
		Turns:     5,
		MaxTokens: 1000,
		Duration:  300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("run took %v; want about 300ms", d)
	}
	if rep.StopReason != "duration" || rep.Total.Unfinished != 2 || rep.Total.ErrorCount() != 0 {
		t.Errorf("have %+v stop %q; want 2 unfinished, no errors, stopped by duration", rep.Total, rep.StopReason)
	}
}

func TestMainRefusals(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"-mix", "urgent"},
		{"-hs256", "nokey"},
		{"-tenants", "0"},
		{"extra"},
	} {
		if err := Main(ctx, args, &bytes.Buffer{}); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: have %v; want a usage error", args, err)
		}
	}
	if err := Main(ctx, []string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: have %v; want flag.ErrHelp", err)
	}
}

// FuzzParseDelta: whatever line the lean delta reader accepts, it reads as
// encoding/json does.
func FuzzParseDelta(f *testing.F) {
	for _, s := range []string{
		`{"type":"delta","request":"t1","seq":3,"text":"12345 "}`,
		`{"type":"delta","request":"t1","seq":3,"text":"a\"b"}`,
		`{"type":"delta","request":"t1","seq":03,"text":"x"}`,
		`{"type":"delta","request":"t1","seq":3,"text":"héllo"}`,
		"{\"type\":\"delta\",\"request\":\"t1\",\"seq\":3,\"text\":\"\xff\"}",
		`{"type":"delta","request":"t1","seq":3,"text":"x"} `,
		`{"type":"done","request":"t1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		have, ok := parseDelta(line)
		if !ok {
			return
		}
		var want gateway.ServerFrame
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", line, err)
		}
		if have.Type != want.Type || have.Request != want.Request || have.Seq != want.Seq || have.Text != want.Text {
			t.Fatalf("read %q as %+v; encoding/json reads %+v", line, have, want)
		}
	})
}
