package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/spec"
)

// TestDispatchStats: the engine reports what the dispatcher it speculates
// with measured, the one it chose for its drafter when Options gave none
// (lookup is offered no large budgets, a draft model every default shape),
// or the one Options gave; steps are counted in the class that ran them.
func TestDispatchStats(t *testing.T) {
	m := loadStories(t)
	names := func(st []spec.ShapeStats) []string {
		var out []string
		for _, s := range st {
			out = append(out, s.Shape)
		}
		return out
	}
	tests := []struct {
		name string
		sp   engine.Speculation
		want []string // the shapes measured at batch size 1; nil: no speculation
	}{
		{"ngram", engine.Speculation{}, names(spec.NewDispatcher(spec.NGramTiers()).Stats(1))},
		{"draft", engine.Speculation{Drafter: engine.DraftModel, Model: m}, names(spec.NewDispatcher(spec.DefaultTiers()).Stats(1))},
		{"fixed", engine.Speculation{Dispatcher: spec.Fixed(spec.Chain(4))}, []string{"chain4"}},
		{"off", engine.Speculation{Drafter: engine.DraftOff}, nil},
	}
	if slices.Equal(tests[0].want, tests[1].want) {
		t.Fatalf("lookup's and the draft model's tiers offer the same shapes at batch 1 (%v): the test cannot tell them apart", tests[0].want)
	}
	tok := m.Tokenizer()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := engine.New(m, engine.Options{Speculation: tt.sp})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, _, _, err := generate(ctx, e, engine.Request{ID: "r", Prompt: tok.Encode(repeatPrompts[0]), MaxTokens: 24}); err != nil {
				t.Fatal(err)
			}
			ds, err := e.DispatchStats(ctx, engine.Standard, 1)
			if err != nil {
				t.Fatal(err)
			}
			if have := names(ds.Shapes); !slices.Equal(have, tt.want) {
				t.Fatalf("shapes at b=1: have %v; want %v", have, tt.want)
			}
			steps := 0
			for _, s := range ds.Shapes {
				steps += s.Steps
			}
			if tt.want != nil && steps == 0 {
				t.Errorf("no steps measured for the standard class after a standard request: %+v", ds)
			}
			// Nothing ran in the interactive class.
			other, err := e.DispatchStats(ctx, engine.Interactive, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range other.Shapes {
				if s.Steps != 0 {
					t.Errorf("interactive class: %s has %d steps; want none", s.Shape, s.Steps)
				}
			}
			if _, err := e.DispatchStats(ctx, engine.Priority(7), 1); err == nil {
				t.Error("priority 7: have no error")
			}
		})
	}
}

// TestCallGivenUpSharesNothing: a caller whose context has ended returns
// at once with ctx's error and the zero value, while the step goroutine
// may run the queued read later; run with -race, a result handed back
// through memory both sides touch is reported.
func TestCallGivenUpSharesNothing(t *testing.T) {
	m := loadStories(t)
	e, err := engine.New(m, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A request keeps the step goroutine busy while the reads queue.
	busy := make(chan error, 1)
	go func() {
		_, _, _, err := generate(ctx, e, engine.Request{ID: "busy", Prompt: m.Tokenizer().Encode(repeatPrompts[0]), MaxTokens: 48})
		busy <- err
	}()
	defer func() {
		if err := <-busy; err != nil {
			t.Errorf("the busy request: %v", err)
		}
	}()
	gone, stop := context.WithCancel(ctx)
	stop()
	for range 50 {
		if ds, err := e.DispatchStats(gone, engine.Standard, 1); err == nil && ds.Shapes == nil {
			t.Fatal("DispatchStats with an ended context: have no error and no result")
		} else if err != nil && (ds.Shapes != nil || ds.KappaSteps != 0) {
			t.Fatalf("DispatchStats gave up with %v yet returned %+v", err, ds)
		}
		if c, err := e.Counters(gone); err != nil && c.Steps != 0 {
			t.Fatalf("Counters gave up with %v yet returned %+v", err, c)
		}
	}
	// The queued reads run before the engine is idle again.
	if _, err := e.Counters(ctx); err != nil {
		t.Fatal(err)
	}
}
