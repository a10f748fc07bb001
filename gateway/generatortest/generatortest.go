// Package generatortest is the conformance suite of engine.Generator.
// Every implementation (the in-process *engine.Engine, the cluster client on the
// Redis request path) runs it against a real engine on a real model, so the
// gateway can rely on one contract whichever is wired in.
package generatortest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// Config describes the implementation under test.
type Config struct {
	// New returns the Generator under test; Run calls it once. It is
	// backed by a real engine whose steps are slow enough (a millisecond
	// or more) that a cancel lands before a long reply ends.
	New func(t *testing.T) engine.Generator
	// Messages is a prompt the model answers greedily with at least
	// MaxTokens/2 tokens before it stops.
	Messages []engine.Message
	// Text is a raw prompt and TextTokens what the model's tokenizer
	// makes of it (BOS included): a request giving Text must be answered
	// as one giving TextTokens, whichever process tokenizes it.
	Text       string
	TextTokens []int32
	// MaxTokens caps the greedy replies (32).
	MaxTokens int
	// Timeout bounds each request (30s).
	Timeout time.Duration
}

// reply is what one stream delivered.
type reply struct {
	text   string
	tokens []int32
	// bounds[i] is the number of tokens after delta i.
	bounds []int
	texts  []string
	seqs   []int
	final  *engine.Final
}

var ids atomic.Int64

func newID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), ids.Add(1))
}

// drain reads s to its io.EOF, checking the stream's contract as it goes.
func drain(t *testing.T, ctx context.Context, s engine.Events) reply {
	t.Helper()
	var r reply
	last := 0
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("recv: have %v; want an event or io.EOF", err)
		}
		if r.final != nil {
			t.Fatalf("have event %+v after the final; want io.EOF", ev)
		}
		if ev.Final != nil {
			r.final = ev.Final
			continue
		}
		if ev.Seq <= last {
			t.Fatalf("have seq %d after %d; want increasing seqs", ev.Seq, last)
		}
		last = ev.Seq
		r.text += ev.Text
		r.tokens = append(r.tokens, ev.Tokens...)
		r.bounds = append(r.bounds, len(r.tokens))
		r.texts = append(r.texts, ev.Text)
		r.seqs = append(r.seqs, ev.Seq)
	}
	if r.final == nil {
		t.Fatal("have io.EOF without a final event; want exactly one final")
	}
	if _, err := s.Recv(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("recv after the end: have %v; want io.EOF", err)
	}
	return r
}

// Run runs the suite.
func Run(t *testing.T, c Config) {
	if c.MaxTokens == 0 {
		c.MaxTokens = 32
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Text == "" || len(c.TextTokens) == 0 {
		t.Fatal("generatortest: Config.Text and TextTokens are required")
	}
	g := c.New(t)
	t.Run("optional interfaces", func(t *testing.T) {
		// Both implementations serve every role, so both must offer what
		// the gateway discovers: readiness and session warmth.
		if rd, ok := g.(engine.Readier); !ok {
			t.Errorf("%T is not an engine.Readier", g)
		} else if err := rd.Ready(); err != nil {
			t.Errorf("Ready: %v; want ready", err)
		}
		if _, ok := g.(engine.SessionWarmer); !ok {
			t.Errorf("%T is not an engine.SessionWarmer", g)
		}
	})
	req := func(t *testing.T) engine.Request {
		return engine.Request{ID: newID(t), Tenant: "conf", User: "u", Session: newID(t),
			Messages: c.Messages, MaxTokens: c.MaxTokens}
	}
	ctxFor := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
		t.Cleanup(cancel)
		return ctx
	}
	run := func(t *testing.T, r engine.Request) reply {
		t.Helper()
		ctx := ctxFor(t)
		s, err := g.Generate(ctx, r)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		return drain(t, ctx, s)
	}

	var ref reply
	t.Run("greedy", func(t *testing.T) {
		ref = run(t, req(t))
		if ref.final.FinishReason != engine.FinishStop && ref.final.FinishReason != engine.FinishLength {
			t.Fatalf("have finish %q (%v); want stop or length", ref.final.FinishReason, ref.final.Err)
		}
		if ref.text == "" || len(ref.tokens) < 4 {
			t.Fatalf("have %q in %d tokens; want a reply of at least 4 tokens", ref.text, len(ref.tokens))
		}
		if have, want := ref.final.Usage.CompletionTokens, len(ref.tokens); have != want {
			t.Fatalf("have %d completion tokens in usage; want %d, the tokens streamed", have, want)
		}
		if have, want := ref.seqs[len(ref.seqs)-1], len(ref.tokens); have != want {
			t.Fatalf("have last seq %d; want %d, the tokens generated", have, want)
		}
		again := run(t, req(t))
		if again.text != ref.text {
			t.Fatalf("have %q; want %q again: greedy is deterministic", again.text, ref.text)
		}
	})
	if ref.final == nil {
		t.Fatal("the greedy reference failed; the rest of the suite needs it")
	}

	t.Run("generated continues", func(t *testing.T) {
		// Split at a delta boundary near the middle, so the text before it
		// is known exactly.
		i := len(ref.bounds) / 2
		if i == 0 || i == len(ref.bounds) {
			t.Skipf("reply of %d deltas cannot be split", len(ref.bounds))
		}
		k := ref.bounds[i-1]
		before := strings.Join(ref.texts[:i], "")
		r := req(t)
		r.Generated = append([]int32(nil), ref.tokens[:k]...)
		cont := run(t, r)
		if have, want := before+cont.text, ref.text; have != want {
			t.Fatalf("have %q + %q; want %q", before, cont.text, want)
		}
		if len(cont.seqs) > 0 && cont.seqs[0] <= k {
			t.Fatalf("have first seq %d; want after the %d generated tokens", cont.seqs[0], k)
		}
		if have, want := cont.final.Usage.CompletionTokens, len(ref.tokens)-k; have != want {
			t.Fatalf("have %d completion tokens; want %d, the new ones", have, want)
		}
	})

	t.Run("text prompt", func(t *testing.T) {
		r := req(t)
		r.Messages = nil
		r.Prompt = c.TextTokens
		want := run(t, r)
		r = req(t)
		r.Messages, r.Text = nil, c.Text
		have := run(t, r)
		if have.text != want.text || have.final.Usage.PromptTokens != len(c.TextTokens) {
			t.Fatalf("have %q from %d prompt tokens; want %q from %d, as for the tokens", have.text, have.final.Usage.PromptTokens, want.text, len(c.TextTokens))
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			mod  func(*engine.Request)
			code string
		}{
			{"negative max tokens", func(r *engine.Request) { r.MaxTokens = -1 }, engine.CodeBadRequest},
			{"over the context", func(r *engine.Request) { r.MaxTokens = 1 << 24 }, engine.CodeContextTooLong},
			{"no prompt", func(r *engine.Request) { r.Messages = nil }, engine.CodeBadRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := req(t)
				tc.mod(&r)
				s, err := g.Generate(ctxFor(t), r)
				var ee *engine.Error
				if !errors.As(err, &ee) || ee.Code != tc.code {
					t.Fatalf("have %v, %v; want an *engine.Error with code %s", s, err, tc.code)
				}
			})
		}
	})

	// long asks for as much as the context allows, so only a cancel ends it
	// early.
	long := func(t *testing.T) engine.Request {
		r := req(t)
		r.MaxTokens = 0
		return r
	}
	firstDelta := func(t *testing.T, ctx context.Context, s engine.Events) {
		t.Helper()
		ev, err := s.Recv(ctx)
		if err != nil || ev.Final != nil {
			t.Fatalf("have %+v, %v; want a first delta", ev, err)
		}
	}

	t.Run("cancel by id", func(t *testing.T) {
		ctx := ctxFor(t)
		r := long(t)
		s, err := g.Generate(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		firstDelta(t, ctx, s)
		g.Cancel(r.ID)
		if have := drain(t, ctx, s).final.FinishReason; have != engine.FinishCancelled {
			t.Fatalf("have finish %q; want cancelled", have)
		}
		g.Cancel(r.ID) // after the end: ignored
	})

	t.Run("cancel by context", func(t *testing.T) {
		ctx := ctxFor(t)
		sctx, cancel := context.WithCancel(ctx)
		s, err := g.Generate(sctx, long(t))
		if err != nil {
			t.Fatal(err)
		}
		firstDelta(t, ctx, s)
		cancel()
		if have := drain(t, ctx, s).final.FinishReason; have != engine.FinishCancelled {
			t.Fatalf("have finish %q; want cancelled", have)
		}
	})

	t.Run("cancel unknown id", func(t *testing.T) {
		g.Cancel("no-such-request")
	})

	t.Run("recv with a done context", func(t *testing.T) {
		ctx := ctxFor(t)
		s, err := g.Generate(ctx, req(t))
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		var text string
		if ev, err := s.Recv(done); err == nil {
			// An event that was ready may still be returned.
			text = ev.Text
			if ev.Final != nil {
				t.Fatalf("have a final first; want a delta or %v", context.Canceled)
			}
		} else if !errors.Is(err, context.Canceled) {
			t.Fatalf("have %v; want an event or %v", err, context.Canceled)
		}
		if have := text + drain(t, ctx, s).text; have != ref.text {
			t.Fatalf("have %q; want %q: the stream stays usable", have, ref.text)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		const n = 6
		var wg sync.WaitGroup
		texts := make([]string, n)
		errs := make([]error, n)
		ctx := ctxFor(t)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := g.Generate(ctx, req(t))
				if err != nil {
					errs[i] = err
					return
				}
				for {
					ev, err := s.Recv(ctx)
					if errors.Is(err, io.EOF) {
						return
					}
					if err != nil {
						errs[i] = err
						return
					}
					texts[i] += ev.Text
				}
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || texts[i] != ref.text {
				t.Errorf("stream %d: have %q, %v; want %q", i, texts[i], errs[i], ref.text)
			}
		}
	})
}
