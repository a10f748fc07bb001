package engine

import (
	"strings"
	"time"

	"github.com/specgate/specgate/engine/guided"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/engine/tokenizer"
	"github.com/specgate/specgate/kernels/sample"
)

// sequence is one live request, owned by the step goroutine.
type sequence struct {
	req    Request
	stream *Stream

	tokens   []int32 // prompt, then every generated token
	prompt   int     // prompt tokens at the front of tokens
	replayed int     // Request.Generated tokens after the prompt
	max      int     // completion cap, replayed tokens included
	dropped  int     // messages left out of the prompt (Final.DroppedMessages)
	history  []int32 // the whole conversation when messages were left out; drafters copy from it
	stopToks []int32

	table []int32 // device blocks in position order
	host  []int32 // host blocks while swapped out
	// kv is how many leading tokens have their K/V written in table (or
	// host): what may be cached when the sequence gives its blocks up.
	kv int
	// matched is how many leading table blocks came from a prefix cache
	// Lookup: they are shared, and the sequence never writes to them.
	matched int
	// cached is how many prompt tokens the first Lookup served (Usage);
	// looked says that Lookup happened.
	cached int
	looked bool

	sampler *sample.Sampler
	// matcher is the guided-decoding cursor after the generated tokens;
	// nil without a constraint. It is kept across preemptions: they drop
	// KV, never tokens.
	matcher *guided.Matcher
	// draftMask is matcher's mask after a draft path, for drafters.
	draftMask spec.MaskFunc
	detok     *tokenizer.Detokenizer
	// held is text not yet emitted because it could be the start of a
	// stop string; heldToks are the tokens behind it (and any text
	// emitted early in the same delta run).
	held     string
	heldToks []int32
	// heldLPs are heldToks' log probabilities when the request asked for
	// them; nextLP is the one of the token sampled last.
	heldLPs []TokenLogprob
	nextLP  TokenLogprob

	// sp is the sequence as speculative steps see it; states are the
	// grammar's states after each node of its tree (guided requests).
	sp     spec.Seq
	states []guided.State
	// steps counts the steps that committed tokens to the sequence and
	// committed those tokens: Stats.AcceptedPerStep.
	steps, committed int
	// drafted and acceptedDrafts count draft tokens verified and taken:
	// Stats.Drafted and Stats.Accepted.
	drafted, acceptedDrafts int

	submitted, scheduled, first, last time.Time
	inter                             []time.Duration
	preemptions                       int
	prefilled                         int // prompt tokens counted for metrics
}

func (s *sequence) generated() int { return len(s.tokens) - s.prompt }

func (s *sequence) isStopToken(t int32) bool {
	for _, x := range s.stopToks {
		if x == t {
			return true
		}
	}
	return false
}

// stopMatch returns where the earliest stop string starts in text, or -1,
// and how many trailing bytes of text could begin a stop string and must be
// held back.
func stopMatch(text string, stops []string) (at, hold int) {
	at = -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at >= 0 {
		return at, 0
	}
	for _, st := range stops {
		// Longest proper prefix of st that text ends with.
		for k := min(len(st)-1, len(text)); k > hold; k-- {
			if strings.HasSuffix(text, st[:k]) {
				hold = k
				break
			}
		}
	}
	return -1, hold
}
