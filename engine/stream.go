package engine

import (
	"context"
	"io"
	"sync"
)

// Stream delivers one request's events: deltas, then exactly one Final.
//
// The engine never waits for a reader: deltas the reader has not taken yet
// coalesce into one (their tokens and text joined, the later Seq kept), so a
// slow consumer costs memory proportional to its backlog of text, not step
// time. Recv is safe to call from one goroutine at a time; Cancel from any.
type Stream struct {
	id     string
	cancel func(*Stream)

	mu     sync.Mutex // protects the fields below
	queue  []Event    // at most one delta, then possibly the final
	ended  bool       // the final is queued
	closed bool       // the final was received
	notify chan struct{}
	// stop undoes the context watch; called once the final is queued.
	stop func() bool
}

func newStream(id string, cancel func(*Stream)) *Stream {
	return &Stream{id: id, cancel: cancel, notify: make(chan struct{}, 1)}
}

// ID returns the request ID the stream belongs to.
func (s *Stream) ID() string { return s.id }

// Cancel asks the engine to stop the request; its stream then ends with
// finish reason "cancelled" (unless it already ended). It does not wait.
func (s *Stream) Cancel() { s.cancel(s) }

// Recv returns the next event. After the event that carries Final it returns
// io.EOF. It blocks until an event is ready or ctx is done (then ctx's
// error, and the stream stays usable).
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			if ev.Final != nil {
				s.closed = true
			}
			s.mu.Unlock()
			return ev, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// push queues a delta, merging it into an unread one. Called by the step
// goroutine only.
func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if n := len(s.queue); n > 0 && s.queue[n-1].Final == nil {
		last := &s.queue[n-1]
		last.Tokens = append(last.Tokens, ev.Tokens...)
		last.Logprobs = append(last.Logprobs, ev.Logprobs...)
		last.Text += ev.Text
		last.Seq = ev.Seq
	} else {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	s.wake()
}

// finish queues the final event; later pushes are ignored.
func (s *Stream) finish(f *Final) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.queue = append(s.queue, Event{Final: f})
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.wake()
}

func (s *Stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// watch cancels the request when ctx is done before the stream ends.
func (s *Stream) watch(ctx context.Context) {
	if ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { s.cancel(s) })
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		stop()
		return
	}
	s.stop = stop
	s.mu.Unlock()
}
