package cluster

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
)

// fakeEngine generates token i with text "t<i> " for i after the request's
// Generated tokens up to MaxTokens, one every delay, counting only its own
// in the usage as the engine does: enough to check
// ordering, failover and cancels without a model.
type fakeEngine struct {
	delay time.Duration
	// split: an odd token comes without text, its text comes with the
	// next one's (tokens that do not yet make whole characters).
	split bool

	mu      sync.Mutex // protects the fields below
	streams map[string]*fakeEvents
	subs    []engine.Request
}

func newFakeEngine(delay time.Duration) *fakeEngine {
	return &fakeEngine{delay: delay, streams: map[string]*fakeEvents{}}
}

func fakeText(from, to int) string {
	var s string
	for i := from; i <= to; i++ {
		s += fmt.Sprintf("t%d ", i)
	}
	return s
}

func (f *fakeEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	if r.MaxTokens <= 0 {
		return nil, &engine.Error{Code: engine.CodeBadRequest, Message: "max tokens"}
	}
	s := &fakeEvents{f: f, ctx: ctx, next: len(r.Generated) + 1, first: len(r.Generated) + 1, max: r.MaxTokens, cancel: make(chan struct{})}
	f.mu.Lock()
	f.streams[r.ID] = s
	f.subs = append(f.subs, r)
	f.mu.Unlock()
	return s, nil
}

func (f *fakeEngine) Cancel(id string) {
	f.mu.Lock()
	s := f.streams[id]
	f.mu.Unlock()
	if s != nil {
		s.once.Do(func() { close(s.cancel) })
	}
}

func (f *fakeEngine) submissions() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.subs...)
}

type fakeEvents struct {
	f         *fakeEngine
	ctx       context.Context
	next, max int
	first     int // the first token this attempt generates
	cancel    chan struct{}
	once      sync.Once
	ended     bool
}

func (s *fakeEvents) Recv(ctx context.Context) (engine.Event, error) {
	if s.ended {
		return engine.Event{}, io.EOF
	}
	end := func(reason string) (engine.Event, error) {
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: reason, Usage: engine.Usage{PromptTokens: 1, CompletionTokens: s.next - s.first}}}, nil
	}
	if s.next > s.max {
		return end(engine.FinishLength)
	}
	select {
	case <-time.After(s.f.delay):
	case <-s.cancel:
		return end(engine.FinishCancelled)
	case <-s.ctx.Done():
		return end(engine.FinishCancelled)
	case <-ctx.Done():
		return engine.Event{}, ctx.Err()
	}
	i := s.next
	s.next++
	text := fakeText(i, i)
	if s.f.split {
		text = ""
		if i%2 == 0 {
			text = fakeText(i-1, i)
		}
	}
	return engine.Event{Seq: i, Tokens: []int32{int32(i)}, Text: text}, nil
}
