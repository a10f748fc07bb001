package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/specmode"
)

// TestSpeculateModes: a request speculates only with a drafter both its
// tenant's mode and its own allow, whatever it asks for the output is the
// plain output, and its final counts the drafts it verified and took.
func TestSpeculateModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	prompts := make([][]int32, 3)
	for i := range prompts {
		prompts[i] = prompt(rng, 12+rng.IntN(20))
	}
	run := func(o Options, tenant, req string) []result {
		m := newFakeModel(t)
		m.next = cycleNext
		e, clk := testEngine(t, m, o)
		var streams []*Stream
		for i, p := range prompts {
			s, err := submitNow(e, Request{ID: fmt.Sprint("r", i), Tenant: "t", Prompt: p, MaxTokens: 40,
				Limits: TenantLimits{Speculate: tenant}, Speculate: req})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		drive(t, e, clk, time.Millisecond, 10000)
		var out []result
		for _, s := range streams {
			out = append(out, collect(t, s))
		}
		checkWhole(t, e)
		return out
	}
	plain := run(Options{Speculation: noSpec}, "", "")
	for _, tt := range []struct {
		name, tenant, req string
		drafts            bool
	}{
		{"defaults", "", "", true},
		{"auto both", specmode.Auto, specmode.Auto, true},
		{"request names the engine's drafter", "", specmode.NGram, true},
		{"tenant names the engine's drafter", specmode.NGram, "", true},
		{"request off", specmode.Auto, specmode.Off, false},
		{"tenant off, request may not widen it", specmode.Off, specmode.NGram, false},
		{"tenant off, request auto", specmode.Off, specmode.Auto, false},
		{"request names a drafter the engine lacks", "", specmode.Draft, false},
		{"tenant names a drafter the engine lacks", specmode.Draft, specmode.Auto, false},
		{"tenant and request disagree", specmode.NGram, specmode.Draft, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := run(Options{}, tt.tenant, tt.req)
			for i := range got {
				g, p := got[i], plain[i]
				if !slices.Equal(g.tokens, p.tokens) || g.text != p.text {
					t.Errorf("r%d: have %v; want the plain output %v", i, g.tokens, p.tokens)
				}
				st := g.final.Stats
				if st.Accepted < 0 || st.Accepted > st.Drafted || st.Accepted > g.final.Usage.CompletionTokens {
					t.Errorf("r%d: have %d drafted, %d accepted, %d completion tokens; want 0 <= accepted <= drafted, completion",
						i, st.Drafted, st.Accepted, g.final.Usage.CompletionTokens)
				}
				if !tt.drafts {
					if st.Drafted != 0 || st.Accepted != 0 || st.AcceptedPerStep != 1 {
						t.Errorf("r%d: have %d drafted, %d accepted, %.2f per step; want 0, 0, 1 (no speculation)", i, st.Drafted, st.Accepted, st.AcceptedPerStep)
					}
					continue
				}
				if st.Drafted == 0 || st.Accepted == 0 {
					t.Errorf("r%d: have %d drafted, %d accepted; want drafts verified and taken", i, st.Drafted, st.Accepted)
				}
			}
		})
	}
}

func TestSpeculateModeRefusals(t *testing.T) {
	m := newFakeModel(t)
	for _, r := range []Request{
		{Prompt: []int32{1}, Speculate: "eagle"},
		{Prompt: []int32{1}, Speculate: "Off"},
		{Prompt: []int32{1}, Limits: TenantLimits{Speculate: "on"}},
	} {
		e, _ := testEngine(t, m, Options{})
		_, err := submitNow(e, r)
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeBadRequest {
			t.Errorf("request %q, tenant %q: have %v; want bad_request", r.Speculate, r.Limits.Speculate, err)
		}
	}
	for _, ok := range []string{"", specmode.Auto, specmode.Off, specmode.NGram, specmode.Draft} {
		if err := specmode.Check(ok); err != nil {
			t.Errorf("specmode.Check(%q): %v", ok, err)
		}
	}
}
