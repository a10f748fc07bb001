package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/spec"
)

// specBench measures speculative decoding through the engine: the same
// greedy streams decoded plainly and speculatively, interleaved (plain,
// speculative, plain, …) so that a load that comes and goes on the machine
// touches both alike.
type specBench struct {
	kind                   string // engine.DraftModel or engine.DraftNGram
	shape                  string // --shape
	fixed                  *spec.Shape
	tokens, rounds, warmup int
	target, draft          model.Loaded
	kvType                 engine.KVType
	// pairs is the fewest timed pairs per batch size (zero: rounds
	// decide alone).
	pairs int
	// mismatches counts streams whose speculative output differed from
	// plain decoding's (greedy, so lossless speculation makes it 0).
	mismatches int
	// plainSteps and specSteps tally each engine's steps during the
	// timed runs.
	plainSteps, specSteps *stepTally
}

// check validates the flags before any model is loaded.
func (b *specBench) check(draftPath string) error {
	switch b.kind {
	case "":
		if draftPath != "" {
			return errors.New("--draft-model needs --spec draft")
		}
		return nil
	case engine.DraftModel:
		if draftPath == "" {
			return errors.New("--spec draft needs --draft-model")
		}
	case engine.DraftNGram:
		if draftPath != "" {
			return errors.New("--draft-model is for --spec draft, not ngram")
		}
	default:
		return fmt.Errorf("--spec %q: want draft or ngram", b.kind)
	}
	if b.tokens < 1 || b.rounds < 1 || b.warmup < 0 || b.pairs < 0 {
		return errors.New("--tokens and --rounds must be positive and --warmup and --pairs not negative")
	}
	s, err := parseShape(b.shape)
	if err != nil {
		return fmt.Errorf("--shape: %w", err)
	}
	b.fixed = s
	return nil
}

// parseShape reads --shape; nil for auto.
func parseShape(s string) (*spec.Shape, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	n := 0
	if hasArg && name != "confident" {
		var err error
		if n, err = strconv.Atoi(arg); err != nil || n < 1 || n > spec.MaxTreeNodes {
			return nil, fmt.Errorf("%q: want a node count from 1 to %d after the colon", s, spec.MaxTreeNodes)
		}
	}
	var sh spec.Shape
	switch {
	case (s == "auto" || s == "") && !hasArg:
		return nil, nil
	case name == "chain" && hasArg:
		sh = spec.Chain(n)
	case name == "dynamic" && hasArg:
		sh = spec.Dynamic(n)
	case name == "confident" && hasArg:
		// confident:N,D,W,S: N nodes, D deep, W wide, score ≥ S.
		f := strings.Split(arg, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("%q: want confident:nodes,depth,width,minscore", s)
		}
		var v [3]int
		for i := range v {
			var err error
			if v[i], err = strconv.Atoi(f[i]); err != nil || v[i] < 1 || v[i] > spec.MaxTreeNodes {
				return nil, fmt.Errorf("%q: %q is not a count from 1 to %d", s, f[i], spec.MaxTreeNodes)
			}
		}
		ms, err := strconv.ParseFloat(f[3], 64)
		if err != nil || ms < 0 || ms >= 1 {
			return nil, fmt.Errorf("%q: want a minimum score in [0, 1)", s)
		}
		sh = spec.Confident(v[0], v[1], v[2], ms)
	case name == "off" && !hasArg:
		// A speculating engine that never drafts: what its machinery
		// costs beside the plain engine's step.
		sh = spec.Off
	case name == "bushy" && !hasArg:
		sh = spec.Bushy
	case name == "wide" && !hasArg:
		sh = spec.Wide
	default:
		return nil, fmt.Errorf("%q: want auto, off, chain:N, dynamic:N, confident:N,D,W,S, bushy or wide", s)
	}
	return &sh, nil
}

// specRun is one batch of streams' outcome.
type specRun struct {
	tokens            int
	steps             float64 // decode steps, from each stream's accepted per step
	elapsed           time.Duration
	cpu               time.Duration // the process's CPU time (user and system)
	outs              [][]int32
	drafted, accepted int
	ttft              time.Duration // summed over the streams
	streams           int
}

// run prints, for each batch size, one line
//
//	spec b=<B> plain=<tok/s> spec=<tok/s> speedup=<x> accepted_per_step=<a>
//
// to w: completion tokens per second of B concurrent greedy streams over
// the timed rounds, their ratio, and the speculative streams' tokens per
// decode step. Notes (prompts, draft acceptance, a mismatch between plain
// and speculative output) go to stderr.
func (b *specBench) run(ctx context.Context, w io.Writer, sizes []int) error {
	if b.draft != nil && b.draft.Config().Vocab != b.target.Config().Vocab {
		return fmt.Errorf("--draft-model has %d tokens, --model %d: they must share a vocabulary", b.draft.Config().Vocab, b.target.Config().Vocab)
	}
	maxB := slices.Max(sizes)
	// The prefix cache is on, as in serving: after the warm-up each
	// engine holds the prompts' KV, so the timed runs measure decoding, not
	// the prefill of a long conversation (the same for both, it would pull
	// the ratio towards 1), as a chat's next turn finds its earlier turns
	// cached.
	// The KV pool is sized by MaxRunning sequences of the context limit:
	// it must hold every prompt as well as the largest batch, or at small
	// batch sizes (--batches 1 alone) the prompts evict each other from
	// the prefix cache and both engines re-prefill them on every request,
	// which pulls the ratio towards 1. Only the bench's own streams run, so
	// a larger cap does not change a batch.
	o := engine.Options{MaxRunning: max(maxB, len(storyPrompts)), KVType: b.kvType, DefaultMaxTokens: b.tokens}
	plainOpts, specOpts := o, o
	plainOpts.Speculation = engine.Speculation{Drafter: engine.DraftOff}
	b.plainSteps, b.specSteps = &stepTally{}, &stepTally{}
	plainOpts.Observer, specOpts.Observer = b.plainSteps, b.specSteps
	// Without --shape the engine picks its own dispatcher for the
	// drafter, as in serving.
	specOpts.Speculation = engine.Speculation{Drafter: b.kind, Model: b.draft}
	if b.fixed != nil {
		specOpts.Speculation.Dispatcher = spec.Fixed(*b.fixed)
	}
	// Both engines drive the one target model; they never run at once.
	plain, err := engine.New(b.target, plainOpts)
	if err != nil {
		return err
	}
	defer plain.Close()
	specE, err := engine.New(b.target, specOpts)
	if err != nil {
		return err
	}
	defer specE.Close()

	prompts, err := b.prompts(ctx, plain)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "speculation %s, shape %s, on %s: %d prompts, %d tokens per stream, %d timed rounds (at least %d pairs per batch size) after %d warm-up\n",
		b.kind, b.shape, b.target.Config().Name, len(prompts), b.tokens, b.rounds, b.pairs, b.warmup)
	for _, n := range sizes {
		// Every prompt runs at every batch size: below the number of
		// prompts, as several batches one after another.
		var batches [][][]int32
		for g := range max(1, len(prompts)/n) {
			batch := make([][]int32, n)
			for i := range batch {
				batch[i] = prompts[(g*n+i)%len(prompts)]
			}
			batches = append(batches, batch)
		}
		for range b.warmup + 1 {
			for _, batch := range batches {
				if _, err := b.once(ctx, specE, batch); err != nil {
					return err
				}
			}
		}
		for _, batch := range batches {
			if _, err := b.once(ctx, plain, batch); err != nil {
				return err
			}
		}
		var p, s specRun
		var quoted copyShare
		var pairs []string
		b.plainSteps.reset()
		b.specSteps.reset()
		pc0, err := plain.Counters(ctx)
		if err != nil {
			return err
		}
		sc0, err := specE.Counters(ctx)
		if err != nil {
			return err
		}
		for round := range b.roundsFor(len(batches)) {
			for _, batch := range batches {
				// Odd rounds run the speculative engine first (plain,
				// spec, spec, plain, …): the host's drift over a run and
				// whatever the first of a pair leaves behind in the caches
				// then fall on both sides alike instead of always on the
				// second. At a batch size where speculation stays off both
				// sides do the same work, and an ordered pair read that
				// drift as a loss.
				pr, sr, err := b.pair(ctx, plain, specE, batch, round%2 == 1)
				if err != nil {
					return err
				}
				for i := range pr.outs {
					quoted.add(batch[i], pr.outs[i])
					if !slices.Equal(pr.outs[i], sr.outs[i]) {
						b.mismatches++
						fmt.Fprintf(os.Stderr, "WARNING: b=%d stream %d: speculative output differs from plain (lossless greedy decoding must not)\n", n, i)
						break
					}
				}
				p.add(pr)
				s.add(sr)
				pairs = append(pairs, fmt.Sprintf(" %.2f/%.2f", ratio(sr.rate(), pr.rate()), ratio(pr.cpuPerToken(), sr.cpuPerToken())))
			}
		}
		pt, st := p.rate(), s.rate()
		aps := 0.0
		if s.steps > 0 {
			aps = float64(s.tokens) / s.steps
		}
		fmt.Fprintf(w, "spec b=%d plain=%.1f spec=%.1f speedup=%.2f accepted_per_step=%.2f\n", n, pt, st, st/pt, aps)
		if p.cpu > 0 && s.cpu > 0 {
			// On a machine shared with other work, wall time follows the
			// others' load; CPU time follows the work done (the worker
			// pool's short spins included).
			pc, sc := float64(p.tokens)/p.cpu.Seconds(), float64(s.tokens)/s.cpu.Seconds()
			fmt.Fprintf(os.Stderr, "  b=%d: per CPU-second: plain=%.1f spec=%.1f speedup=%.2f\n", n, pc, sc, sc/pc)
			// The pairs apart: how far the host moved the figures
			// within this run.
			fmt.Fprintf(os.Stderr, "  b=%d: each pair's speedup, wall/per CPU-second:%s\n", n, strings.Join(pairs, ""))
		}
		// Where each engine's wall time went: a speculating engine that
		// plays Off should spend it as the plain one does.
		pc1, err := plain.Counters(ctx)
		if err != nil {
			return err
		}
		sc1, err := specE.Counters(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "  b=%d: plain engine: %s; %s; mean TTFT %v\n", n, b.plainSteps.summary(p.elapsed), prompted(pc0, pc1), p.meanTTFT().Round(time.Millisecond))
		fmt.Fprintf(os.Stderr, "  b=%d: spec engine:  %s; %s; mean TTFT %v\n", n, b.specSteps.summary(s.elapsed), prompted(sc0, sc1), s.meanTTFT().Round(time.Millisecond))
		if b.kind == engine.DraftNGram {
			// How much of the replies repeats the conversation: what
			// lookup can draft from at all, whatever the shape.
			fmt.Fprintf(os.Stderr, "  b=%d: %s\n", n, quoted)
		}
		if s.drafted > 0 {
			fmt.Fprintf(os.Stderr, "  b=%d: %d draft tokens verified, %d accepted (%.0f%%)\n", n, s.drafted, s.accepted, 100*float64(s.accepted)/float64(s.drafted))
		}
		if b.fixed == nil {
			// The engine is idle between runs: what its dispatcher
			// measured in the tier of this batch size, for reading the
			// figures above.
			ds, err := specE.DispatchStats(ctx, engine.Standard, n)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "  b=%d dispatcher (a drafted row costs %.2f of a plain step, fitted over %d steps):", n, ds.Kappa, ds.KappaSteps)
			for _, o := range ds.Shapes {
				fmt.Fprintf(os.Stderr, " %s %d steps %.0f tok/s %.2f acc;", o.Shape, o.Steps, o.TokensPerSec, o.Accepted)
			}
			fmt.Fprintln(os.Stderr)
		}
	}
	return nil
}

// roundsFor returns the timed rounds for a batch size whose prompts make
// n batches: --rounds, or more where that gives fewer than --pairs pairs.
// At large batch sizes one batch holds every prompt, and two pairs of a
// few seconds each read the host's drift more than the engines: at b=32,
// where both engines ran the same passes, single runs read 0.94-1.08. More
// rounds are rounded up to an even number, so that each engine goes first
// in half of them.
func (b *specBench) roundsFor(n int) int {
	r := b.rounds
	if n*r < b.pairs {
		r = (b.pairs + n - 1) / n
		r += r % 2
	}
	return r
}

// pair runs batch on the plain engine and on the speculative one, the
// speculative first when specFirst.
func (b *specBench) pair(ctx context.Context, plain, specE *engine.Engine, batch [][]int32, specFirst bool) (pr, sr specRun, err error) {
	if specFirst {
		if sr, err = b.once(ctx, specE, batch); err != nil {
			return pr, sr, err
		}
	}
	if pr, err = b.once(ctx, plain, batch); err != nil {
		return pr, sr, err
	}
	if !specFirst {
		sr, err = b.once(ctx, specE, batch)
	}
	return pr, sr, err
}

func (r *specRun) add(o specRun) {
	r.tokens += o.tokens
	r.steps += o.steps
	r.elapsed += o.elapsed
	r.cpu += o.cpu
	r.drafted += o.drafted
	r.accepted += o.accepted
	r.ttft += o.ttft
	r.streams += o.streams
}

// meanTTFT is the streams' mean time to first token: with b streams
// submitted at once, how long admission takes to start them all.
func (r specRun) meanTTFT() time.Duration {
	if r.streams == 0 {
		return 0
	}
	return r.ttft / time.Duration(r.streams)
}

// prompted says how many input tokens an engine computed and how many its
// prefix cache served between two readings of its counters.
func prompted(c0, c1 engine.Counters) string {
	return fmt.Sprintf("%d prompt tokens computed, %d from the cache", c1.PromptTokens-c0.PromptTokens, c1.CachedTokens-c0.CachedTokens)
}

// ratio is a/b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// cpuPerToken is the CPU seconds a token took (0 without tokens).
func (r specRun) cpuPerToken() float64 {
	if r.tokens == 0 {
		return 0
	}
	return r.cpu.Seconds() / float64(r.tokens)
}

func (r specRun) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.tokens) / r.elapsed.Seconds()
}

// once runs one greedy stream per prompt, all submitted at once, and waits
// for them all.
func (b *specBench) once(ctx context.Context, e *engine.Engine, prompts [][]int32) (specRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := specRun{outs: make([][]int32, len(prompts))}
	finals := make([]*engine.Final, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.outs[i], finals[i], errs[i] = generateAll(ctx, e, engine.Request{
				ID: fmt.Sprint("bench-", i), Tenant: "bench", Prompt: p, MaxTokens: b.tokens,
			})
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.cpu = cpuTime() - cpu0
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	for _, f := range finals {
		n := f.Usage.CompletionTokens
		r.tokens += n
		if f.Stats.AcceptedPerStep > 0 {
			r.steps += float64(n) / f.Stats.AcceptedPerStep
		} else {
			r.steps += float64(n)
		}
		r.drafted += f.Stats.Drafted
		r.accepted += f.Stats.Accepted
		r.ttft += f.Stats.TTFT
		r.streams++
	}
	return r, nil
}

// generateAll runs r to its end and returns its tokens and final event.
func generateAll(ctx context.Context, e *engine.Engine, r engine.Request) ([]int32, *engine.Final, error) {
	s, err := e.Submit(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	var toks []int32
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a final event")
			}
			return nil, nil, err
		}
		toks = append(toks, ev.Tokens...)
		if f := ev.Final; f != nil {
			if f.FinishReason == engine.FinishError {
				return nil, nil, fmt.Errorf("request %s: %v", r.ID, f.Err)
			}
			return toks, f, nil
		}
	}
}

// prompts returns the tokenized prompts for the drafter: story openings
// for a draft model; for n-gram lookup, chats that quote an earlier turn:
// the target tells a story, is asked to tell it again word for word (its
// retelling, made here, joins the chat) and is asked once more, so that
// the reply repeats text the conversation already holds.
func (b *specBench) prompts(ctx context.Context, plain *engine.Engine) ([][]int32, error) {
	tok := b.target.Tokenizer()
	var out [][]int32
	for _, p := range storyPrompts {
		ids := tok.Encode(p)
		if b.kind != engine.DraftNGram {
			out = append(out, ids)
			continue
		}
		chat := "User: Tell me a story that begins: " + p + "\nAssistant: " + p
		for range 2 {
			reply, _, err := generateAll(ctx, plain, engine.Request{Tenant: "bench", Prompt: tok.Encode(chat), MaxTokens: b.tokens})
			if err != nil {
				return nil, err
			}
			chat += tok.Decode(reply) + "\nUser: Please tell the same story again, word for word.\nAssistant: " + p
		}
		out = append(out, tok.Encode(chat))
	}
	return out, nil
}

// copyShare counts, over greedy replies, the tokens whose preceding two
// (three) tokens already occur earlier in the conversation (the prompt and
// the reply before them), and how many of those the token after the most
// recent such occurrence predicts: how far the replies quote the
// conversation, the ceiling of what n-gram lookup can draft.
type copyShare struct {
	tokens       int
	after, right [2]int // [0]: a 2-token match, [1]: a 3-token match
}

func (c *copyShare) add(prompt, reply []int32) {
	conv := slices.Concat(prompt, reply)
	for i := range reply {
		at := len(prompt) + i // conv[at] is the token predicted from conv[:at]
		c.tokens++
		for k, n := range [2]int{2, 3} {
			if at < n {
				continue
			}
			for e := at - 2; e >= n-1; e-- {
				if slices.Equal(conv[e-n+1:e+1], conv[at-n:at]) {
					c.after[k]++
					if conv[e+1] == conv[at] {
						c.right[k]++
					}
					break
				}
			}
		}
	}
}

func (c copyShare) String() string {
	pct := func(a int) float64 { return 100 * float64(a) / float64(max(c.tokens, 1)) }
	return fmt.Sprintf("%d reply tokens: %.0f%% follow a 2-token match in the conversation (its most recent next token right for %.0f%%), %.0f%% a 3-token match (right for %.0f%%)",
		c.tokens, pct(c.after[0]), pct(c.right[0]), pct(c.after[1]), pct(c.right[1]))
}

// stepTally sums an engine's steps by kind, from its step reports: the
// plan and forward pass of each (StepReport.Duration), and the steps'
// count. The bench resets it before a batch size's timed runs; the
// engines run one at a time, but it is read from the bench's goroutine.
type stepTally struct {
	mu    sync.Mutex
	steps [stepKinds]int
	dur   [stepKinds]time.Duration
	seqs  int // sequences over all steps
}

// Step kinds: decodes alone, decodes with draft trees, and steps that ran
// a prompt's chunk as well.
const (
	stepDecode = iota
	stepDraft
	stepPrefill
	stepKinds
)

func (t *stepTally) ObserveStep(r *engine.StepReport) {
	if r.Tokens == 0 {
		return
	}
	nodes := 0
	for _, d := range r.Drafts {
		nodes += d.Drafted
	}
	k := stepDecode
	switch {
	case r.Tokens-nodes > r.Sequences:
		k = stepPrefill
	case nodes > 0:
		k = stepDraft
	}
	t.mu.Lock()
	t.steps[k]++
	t.dur[k] += r.Duration
	t.seqs += r.Sequences
	t.mu.Unlock()
}

func (t *stepTally) reset() {
	t.mu.Lock()
	t.steps, t.dur, t.seqs = [stepKinds]int{}, [stepKinds]time.Duration{}, 0
	t.mu.Unlock()
}

// summary says how the steps shared wall, the timed runs' wall time; what
// is left is the steps' commit phase and the time between steps.
func (t *stepTally) summary(wall time.Duration) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var in time.Duration
	var sb strings.Builder
	steps := 0
	for k, name := range [stepKinds]string{"decode", "drafting", "with a prompt chunk"} {
		in += t.dur[k]
		steps += t.steps[k]
		fmt.Fprintf(&sb, "%d %s steps %.3fs, ", t.steps[k], name, t.dur[k].Seconds())
	}
	if steps > 0 {
		// Below the batch size when admission starts requests slowly.
		fmt.Fprintf(&sb, "%.1f sequences per step, ", float64(t.seqs)/float64(steps))
	}
	fmt.Fprintf(&sb, "outside plan and pass %.3fs of %.3fs", (wall - in).Seconds(), wall.Seconds())
	return sb.String()
}
