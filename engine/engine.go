package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/chat"
	"github.com/specgate/specgate/engine/sched"
	"github.com/specgate/specgate/engine/specmode"
	"github.com/specgate/specgate/engine/tokenizer"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/prefixcache"
)

// blockAllocator hands out the block ids of one KV tier.
// prefixcache.Pool is the implementation; the interface keeps the engine to
// what it uses.
type blockAllocator interface {
	// Alloc takes n blocks, all or nothing.
	Alloc(n int) ([]int32, error)
	// Unref drops the caller's reference; the last one frees the block.
	Unref(b int32) error
	Free() int
	Used() int
	Cap() int
}

var _ blockAllocator = (*prefixcache.Pool)(nil)

// Engine serves generation requests on one model. Submit, Cancel and Close
// are safe for concurrent use; one goroutine, started by New and stopped by
// Close, owns everything else.
type Engine struct {
	m     model.Model
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	o     Options
	clock Clock

	// grammars caches compiled guided-decoding grammars over gvocab, the
	// model's vocabulary as the compiler sees it (built on first use).
	// Both are safe for concurrent use: Submit compiles on the caller's
	// goroutine.
	grammars *guided.Cache
	gvOnce   sync.Once
	gvocab   *guided.Vocab

	// Owned by the step goroutine.
	spec  *specState // nil with speculation off
	sched *sched.Scheduler
	dev   blockAllocator
	host  blockAllocator // nil without a host tier
	// kvb makes the KV tiers and moves blocks between them.
	kvb    kvBackend
	devKV  kernels.KVCache
	hostKV kernels.KVCache
	// cache is the prefix cache over dev and host; nil when it is off.
	// With it on, the host tier is the cache's: sequences are never
	// swapped, their blocks are cached instead.
	cache *prefixcache.Cache
	// shared counts, per cached device block, the live sequences holding
	// it from a Lookup. Sequences hold cached blocks only that way (they
	// insert their own blocks only as they give them up), so every other
	// cached device block can be evicted: see allocatable.
	shared   map[int32]int
	seqs     map[string]*sequence
	cur      stepPlan   // the step's plan, its buffers reused
	logits   passLogits // the step's forward pass's
	rate     throughput
	urgent   bool     // the last step planned interactive work first
	count    Counters // Cache is filled in by counters()
	report   StepReport
	reported time.Time // when the snapshot's prefix state was last read

	// snap is the latest snapshot: written by the step goroutine, read by
	// any (Snapshot).
	snap atomic.Pointer[Snapshot]

	mu     sync.Mutex // protects the fields below
	inbox  []op
	closed bool

	wake    chan struct{} // cap 1: the inbox has ops
	quit    chan struct{} // closed by Close
	done    chan struct{} // closed when the loop exits
	started bool
	once    sync.Once
	nextID  atomic.Uint64
}

// op is one message to the step goroutine: a submission, a cancel, or a
// function to run there (session liveness, snapshots).
type op struct {
	sub    *submission
	cancel string
	// from, when set, is the stream whose request the cancel is for: a
	// cancel from a stream (its Cancel, its context) arrives late when
	// the request has ended meanwhile, and must not stop a later request
	// that reuses the ID.
	from *Stream
	fn   func()
}

type submission struct {
	req    Request
	tokens []int32 // prompt, then req.Generated
	prompt int
	max    int // completion cap, Generated included
	// dropped is how many messages were left out to fit the context;
	// history is then the whole conversation, for drafters.
	dropped int
	history []int32
	stream  *Stream
	reply   chan error
	at      time.Time // when Submit was called: queue time starts here
	// matcher is the guided-decoding cursor, past req.Generated; nil
	// without a constraint.
	matcher *guided.Matcher
}

// New builds an engine on m and starts its step goroutine; Close stops it.
// The engine does not close m.
func New(m model.Model, o Options) (*Engine, error) {
	e, err := newEngine(m, o)
	if err != nil {
		return nil, err
	}
	e.started = true
	go e.loop()
	return e, nil
}

// newEngine builds an engine without starting its goroutine: tests drive
// step directly.
func newEngine(m model.Model, o Options) (*Engine, error) {
	cfg := m.Config()
	kvType := o.KVType.DType(m.Backend())
	if err := o.validate(cfg.KVWidth(), cfg.Layers, cfg.Context, kvType); err != nil {
		return nil, err
	}
	// The engine makes both tiers through the backend, in the shape the
	// model reports; a draft model makes its own cache, so it is told
	// the type (one without the setting takes the backend's default).
	if d, ok := o.Speculation.Model.(model.KVTyper); ok && o.Speculation.Drafter == DraftModel {
		if err := d.SetKVType(o.KVType.DType(o.Speculation.Model.Backend())); err != nil {
			return nil, fmt.Errorf("engine: draft model KV cache: %w", err)
		}
	}
	text, ok := m.(model.Text)
	if !ok || text.Tokenizer() == nil {
		return nil, errors.New("engine: model has no tokenizer")
	}
	tok := text.Tokenizer()
	src := text.ChatTemplate()
	if o.ChatTemplate != "" {
		src = o.ChatTemplate
	}
	tmpl, err := chat.New(src, chat.Options{BOS: tok.Token(tok.BOS()), EOS: tok.Token(tok.EOS())})
	if err != nil {
		return nil, fmt.Errorf("engine: chat template: %w", err)
	}
	s, err := sched.New(sched.Config{
		BlockSize:  o.BlockSize,
		MaxRunning: o.MaxRunning,
		MaxQueued:  o.MaxQueued,
		AgingAfter: o.AgingAfter,
		Quantum:    o.Quantum,
		Defaults:   schedLimits(o.Limits),
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	kvb := kvBackend(m.Backend())
	devKV, err := kvb.NewKV(cfg.KVSpec(o.KVBlocks, o.BlockSize, kvType))
	if err != nil {
		return nil, fmt.Errorf("engine: device KV of %d blocks: %w", o.KVBlocks, err)
	}
	dpool := prefixcache.NewPool(prefixcache.Device, o.KVBlocks)
	e := &Engine{
		m: m, kvb: kvb, tok: tok, tmpl: tmpl, o: o, clock: o.Clock,
		sched: s, devKV: devKV, dev: dpool, grammars: guided.NewCache(o.GrammarCache),
		seqs: map[string]*sequence{}, shared: map[int32]int{},
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	if e.spec, err = newSpecState(m, o, e); err != nil {
		return nil, err
	}
	var hpool *prefixcache.Pool
	if o.HostKVBlocks > 0 {
		if e.hostKV, err = kvb.NewKV(cfg.KVSpec(o.HostKVBlocks, o.BlockSize, kvType)); err != nil {
			return nil, fmt.Errorf("engine: host KV of %d blocks: %w", o.HostKVBlocks, err)
		}
		hpool = prefixcache.NewPool(prefixcache.Host, o.HostKVBlocks)
		e.host = hpool
	}
	if !o.NoPrefixCache {
		e.cache, err = prefixcache.New(kvb, devKV, e.hostKV, dpool, hpool, prefixcache.Options{TenantCap: o.PrefixTenantCap})
		if err != nil {
			return nil, fmt.Errorf("engine: prefix cache: %w", err)
		}
	}
	now := e.clock.Now()
	snap := e.snapshot(now, 0, nil)
	e.snap.Store(snap)
	if o.Observer != nil {
		// The starting state, so a scrape before the first request sees
		// the idle engine's KV and queues rather than nothing.
		e.report.At, e.report.Snapshot = now, snap
		o.Observer.ObserveStep(&e.report)
		e.report.reset()
	}
	return e, nil
}

func schedLimits(l TenantLimits) sched.Limits {
	return sched.Limits{Weight: l.Weight, MaxConcurrent: l.MaxConcurrent, MaxQueued: l.MaxQueued, TokensPerMinute: l.TokensPerMinute}
}

// Options returns the engine's options with defaults filled in.
func (e *Engine) Options() Options { return e.o }

// Submit queues r and returns its stream, or refuses it at once with an
// *Error (bad_request, over_quota, queue_full, context_too_long) or
// ErrClosed. Cancelling ctx later cancels the request (its stream ends with
// finish reason "cancelled"). A request without an ID gets one; see
// Stream.ID.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	sub, err := e.prepare(r)
	if err != nil {
		return nil, err
	}
	if err := e.send(op{sub: sub}); err != nil {
		return nil, err
	}
	select {
	case err := <-sub.reply:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		// The loop may still admit it: the cancel queued behind the
		// submission undoes that.
		e.cancelStream(sub.stream)
		return nil, ctx.Err()
	case <-e.done:
		return nil, ErrClosed
	}
	sub.stream.watch(ctx)
	return sub.stream, nil
}

// Cancel stops request id: a waiting request leaves the queue, a running one
// stops within one step and frees its blocks. Its stream ends with finish
// reason "cancelled". Unknown or finished ids are ignored.
func (e *Engine) Cancel(id string) {
	e.send(op{cancel: id})
}

// cancelStream stops st's request, not whatever request holds its ID
// when the cancel arrives.
func (e *Engine) cancelStream(st *Stream) {
	e.send(op{cancel: st.id, from: st})
}

// SetSessionLive tells the prefix cache whether a conversation's
// connection is live. While it is, the last prefix the session's requests
// (Request.Session) touched stays on the device in preference to others';
// once it goes idle that prefix is the first to be demoted to the host tier.
// It is safe from any goroutine and does not wait; it does nothing when the
// cache is off, the session is empty or the engine is closed.
func (e *Engine) SetSessionLive(session string, live bool) {
	if session == "" || e.cache == nil {
		return
	}
	_ = e.send(op{fn: func() { e.cache.SetSessionLive(session, live) }})
}

// Counters returns a snapshot of the engine's running totals. It is safe
// from any goroutine and waits for the step goroutine (at most one step),
// ctx or Close.
func (e *Engine) Counters(ctx context.Context) (Counters, error) {
	return call(e, ctx, e.counters)
}

// call runs fn on e's step goroutine and waits for its result, ctx or
// Close. The result travels through a channel rather than a variable the
// caller reads: a caller that gives up (ctx) returns while fn may still
// run later, and must not share memory with it.
func call[T any](e *Engine, ctx context.Context, fn func() T) (T, error) {
	res := make(chan T, 1)
	var zero T
	if err := e.send(op{fn: func() { res <- fn() }}); err != nil {
		return zero, err
	}
	select {
	case v := <-res:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-e.done:
		return zero, ErrClosed
	}
}

func (e *Engine) send(o op) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.inbox = append(e.inbox, o)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// Close stops the step goroutine; requests still live end with finish reason
// "error" (ErrClosed). It is idempotent and waits for the goroutine.
func (e *Engine) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.quit)
		if e.started {
			<-e.done
		} else {
			e.shutdown()
			close(e.done)
		}
	})
	return nil
}

// loop is the step goroutine: a single select that drains the inbox and
// steps while there is work.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		now := e.clock.Now()
		e.drain(now)
		busy := e.step(now)
		var idle <-chan time.Time
		if !busy && len(e.seqs) > 0 {
			// Work exists but none could run (a transient the next
			// step resolves): poll instead of spinning.
			idle = time.After(time.Millisecond)
		}
		if busy {
			select {
			case <-e.quit:
				e.shutdown()
				return
			default:
				continue
			}
		}
		select {
		case <-e.quit:
			e.shutdown()
			return
		case <-e.wake:
		case <-idle:
		}
	}
}

// drain applies the queued submissions and cancels in order.
func (e *Engine) drain(now time.Time) {
	e.mu.Lock()
	ops := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, o := range ops {
		if o.sub != nil {
			o.sub.reply <- e.enqueue(now, o.sub)
			continue
		}
		if o.fn != nil {
			o.fn()
			continue
		}
		if s := e.seqs[o.cancel]; s != nil && (o.from == nil || s.stream == o.from) {
			e.end(s, now, FinishCancelled, nil)
		}
	}
}

// shutdown ends every live request and refuses queued submissions.
func (e *Engine) shutdown() {
	e.mu.Lock()
	ops := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, o := range ops {
		if o.sub != nil {
			o.sub.reply <- ErrClosed
		}
	}
	now := e.clock.Now()
	for _, s := range e.seqs {
		e.end(s, now, FinishError, ErrClosed)
	}
	e.publish(now, true) // the observer hears of the requests ended here
}

// prepare checks r against the model and renders its prompt; it runs on the
// caller's goroutine.
func (e *Engine) prepare(r Request) (*submission, error) {
	bad := func(format string, a ...any) error {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf(format, a...)}
	}
	if r.ID == "" {
		r.ID = "req-" + strconv.FormatUint(e.nextID.Add(1), 10)
	}
	switch r.Priority {
	case Interactive, Standard, Batch:
	default:
		return nil, bad("unknown priority %d", int(r.Priority))
	}
	for _, m := range []string{r.Speculate, r.Limits.Speculate} {
		if err := specmode.Check(m); err != nil {
			return nil, bad("%v", err)
		}
	}
	if r.MaxTokens < 0 {
		return nil, bad("max tokens %d is negative", r.MaxTokens)
	}
	if r.SharedPrefix < 0 {
		return nil, bad("shared prefix of %d tokens is negative", r.SharedPrefix)
	}
	if r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs || r.TopLogprobs > 0 && !r.Logprobs {
		return nil, bad("top logprobs %d: want 0 to %d, with logprobs on", r.TopLogprobs, MaxTopLogprobs)
	}
	if r.Limits.Weight < 0 || r.Limits.MaxConcurrent < 0 || r.Limits.MaxQueued < 0 || r.Limits.TokensPerMinute < 0 || r.Limits.MaxContext < 0 {
		return nil, bad("negative tenant limit in %+v", r.Limits)
	}
	limit := e.o.MaxContext
	if c := r.Limits.MaxContext; c > 0 && c < limit {
		limit = c
	}
	// A sequence must fit the device pool alone, or it could never finish.
	limit = min(limit, e.o.KVBlocks*e.o.BlockSize)
	// room is what the reply needs beside the prompt: what was asked
	// for, or without a cap a quarter of the context (at most the
	// default cap), so a long chat keeps its newest turns and still has
	// room to answer.
	room := r.MaxTokens
	if room == 0 {
		room = max(min(e.o.DefaultMaxTokens, limit/4), 1)
	}
	prompt := r.Prompt
	dropped := 0
	// history is the whole conversation when turns were left out of the
	// prompt: n-gram drafting still copies from them.
	var history []int32
	if len(prompt) == 0 && len(r.Messages) == 0 && r.Text != "" {
		var err error
		if prompt, err = e.textPrompt(r); err != nil {
			return nil, err
		}
	}
	if len(prompt) == 0 {
		if len(r.Messages) == 0 {
			return nil, bad("request has neither prompt tokens, messages nor text")
		}
		fit := limit - room
		if r.KeepTurns {
			fit = math.MaxInt // rendered whole; the length checks below refuse it
		}
		var err error
		if prompt, dropped, history, err = e.renderFitting(r.Messages, r.Tools, fit); err != nil {
			return nil, err
		}
	}
	vocab := int32(e.m.Config().Vocab)
	for _, ids := range [][]int32{prompt, r.Generated} {
		for i, t := range ids {
			if t < 0 || t >= vocab {
				return nil, bad("token %d at %d is outside the vocabulary of %d", t, i, vocab)
			}
		}
	}
	maxTok := r.MaxTokens
	if maxTok == 0 {
		maxTok = min(limit-len(prompt), e.o.DefaultMaxTokens)
	}
	if maxTok <= 0 {
		return nil, &Error{Code: CodeContextTooLong, Message: fmt.Sprintf("prompt of %d tokens leaves no room to generate within the context limit of %d", len(prompt), limit)}
	}
	if len(prompt)+maxTok > limit {
		return nil, &Error{Code: CodeContextTooLong, Message: fmt.Sprintf("prompt of %d tokens plus %d to generate exceeds the context limit of %d", len(prompt), maxTok, limit)}
	}
	if len(r.Generated) >= maxTok {
		return nil, bad("%d tokens already generated of at most %d", len(r.Generated), maxTok)
	}
	// Compiling comes last: it is the one costly check, and it runs here,
	// on the caller's goroutine, so the step loop never waits for it.
	var matcher *guided.Matcher
	if r.Guided != nil {
		gr, err := e.compileGuided(r.Guided)
		if err != nil {
			return nil, err
		}
		if matcher, err = newMatcher(gr, r.Generated); err != nil {
			return nil, err
		}
	}
	tokens := make([]int32, 0, len(prompt)+maxTok)
	tokens = append(append(tokens, prompt...), r.Generated...)
	r.Prompt = prompt
	// Only prompt tokens may be shared: the reply stays the tenant's.
	r.SharedPrefix = min(r.SharedPrefix, len(prompt))
	return &submission{
		req: r, tokens: tokens, prompt: len(prompt), max: maxTok, dropped: dropped, history: history,
		stream: newStream(r.ID, e.cancelStream), reply: make(chan error, 1), at: e.clock.Now(),
		matcher: matcher,
	}, nil
}

// renderFitting renders msgs with the chat template and tokenizes them,
// and reports how many messages it left out. When the conversation is
// longer than fit tokens, it drops old turns in large steps at cut points
// that depend only on the messages before them: the system messages (and
// so the template's head) stay, and the first exchange (a user message and
// its reply, when they take at most a quarter of fit) stays as an anchor,
// as attention sinks do; then the conversation goes on from the first
// user message at or past k steps of history, for the least k that fits,
// a step being the whole room the head and anchor leave. A conversation
// only grows at its end, so turn after turn the cut stays put until the
// history has filled the room again, and the kept prompt starts the same
// way each turn: its KV stays in the prefix cache. When the cut moves, it
// lands on the newest messages (when the next cut point is not there yet,
// only the last message is kept): the head and anchor come from the cache
// and only the few messages after the cut are prefilled, so a cut turn is
// cheap too, and cuts come as rarely as the room allows. Keeping more at a
// cut (say half the room) would keep more of the recent conversation but
// prefill it again at every cut and cut twice as often.
// When even the last message alone is too long, that prompt is returned as
// it is (the caller refuses it).
func (e *Engine) renderFitting(msgs []Message, tools []json.RawMessage, fit int) (kept []int32, dropped int, full []int32, err error) {
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	prompt, err := e.render(cm, tools)
	if err != nil || len(prompt) <= fit {
		return prompt, 0, nil, err
	}
	// at[i] is the history before message i in tokens, as its messages'
	// texts tokenize alone plus the template's markup for one message: an
	// estimate, but the same every turn, which is what keeps cuts put.
	markup := 4
	x := chat.Message{Role: "user", Content: "x"}
	one, err1 := e.render([]chat.Message{x}, nil)
	three, err3 := e.render([]chat.Message{x, {Role: "assistant", Content: "x"}, x}, nil)
	if err1 == nil && err3 == nil {
		markup = max((len(three)-len(one))/2-1, 1)
	}
	last := len(cm) - 1
	at := make([]int, len(cm))
	users := false
	for i, m := range cm {
		if i > 0 {
			at[i] = at[i-1]
			if cm[i-1].Role != "system" {
				at[i] += len(e.tok.Encode(cm[i-1].Content)) + markup
			}
		}
		users = users || (m.Role == "user" && i > 0 && i < last)
	}
	// The anchor: the first exchange, when it is short.
	anchor := -1
	for i, m := range cm[:last] {
		if m.Role == "system" {
			continue
		}
		if m.Role == "user" && i+1 < last && cm[i+1].Role == "assistant" && at[i+2]-at[i] <= fit/4 {
			anchor = i
		}
		break
	}
	// cut reports whether the conversation may go on at message i.
	cut := func(i int) bool {
		if i == last {
			return true
		}
		return (anchor < 0 || i > anchor+1) && cm[i].Role != "system" && (cm[i].Role == "user" || !users)
	}
	// keep renders the conversation cut at from.
	keep := func(from int) ([]int32, int, error) {
		kept := make([]chat.Message, 0, len(cm))
		dropped := 0
		for i, m := range cm[:from] {
			if m.Role == "system" || (anchor >= 0 && (i == anchor || i == anchor+1)) {
				kept = append(kept, m)
			} else {
				dropped++
			}
		}
		p, err := e.render(append(kept, cm[from:]...), tools)
		return p, dropped, err
	}
	// step is the room after the head and the anchor, as the estimate
	// counts it; it depends on the earliest messages only.
	step := fit
	if p, _, err := keep(last); err == nil {
		step = max(fit-(len(p)-len(e.tok.Encode(cm[last].Content))-markup), 1)
	}
	if last == 0 {
		return prompt, 0, nil, nil // one message: nothing to leave out
	}
	for {
		// The cuts, in the order of k: for each k, the first cut point
		// past k steps of history, each taken once (when the cut for k is
		// the one before, the next k's is next: never merely the next
		// message, which would move the cut by one exchange next turn
		// rather than by a step). Found without rendering: at grows with
		// i, so the cut for k never comes before the cut for k-1.
		var cuts []int
		for k, c := 1, 0; c < last; {
			for c < last && (at[c] < k*step || !cut(c)) {
				c++
			}
			if len(cuts) == 0 || c != cuts[len(cuts)-1] {
				cuts = append(cuts, c)
			}
			// The cut stays c while k steps are at most at[c].
			k = max(k+1, at[c]/step+1)
		}
		// The first cut whose prompt fits, by bisection: a later cut
		// keeps fewer messages, so a shorter prompt. The last cut is the
		// last message.
		lo, hi := 0, len(cuts)
		var fitting []int32
		var fitDropped int
		for lo < hi {
			mid := (lo + hi) / 2
			p, dropped, err := keep(cuts[mid])
			if err != nil {
				return nil, 0, nil, err
			}
			if len(p) <= fit {
				hi, fitting, fitDropped = mid, p, dropped
			} else {
				lo = mid + 1
			}
		}
		if hi < len(cuts) {
			return fitting, fitDropped, prompt, nil
		}
		if anchor >= 0 {
			// Too long with the anchor: give it up too.
			anchor = -1
			continue
		}
		p, dropped, err := keep(last)
		if err != nil {
			return nil, 0, nil, err
		}
		return p, dropped, prompt, nil
	}
}

// NativeTools reports whether the chat template renders Request.Tools and
// tool turns itself, and how its model family writes calls.
func (e *Engine) NativeTools() (chat.CallFormat, bool) { return e.tmpl.NativeTools() }

// render renders msgs with the chat template and tokenizes the text.
func (e *Engine) render(msgs []chat.Message, tools []json.RawMessage) ([]int32, error) {
	text, err := e.tmpl.RenderTools(msgs, tools)
	if err != nil {
		if errors.Is(err, chat.ErrRaised) {
			return nil, &Error{Code: CodeBadRequest, Message: err.Error()}
		}
		return nil, &Error{Code: CodeInternal, Message: err.Error()}
	}
	var prompt []int32
	if e.tmpl.Fallback() {
		prompt = e.tok.Encode(text)
	} else {
		prompt = e.tok.EncodeSpecial(text)
	}
	if len(prompt) == 0 {
		return nil, &Error{Code: CodeBadRequest, Message: "messages render to an empty prompt"}
	}
	return prompt, nil
}
