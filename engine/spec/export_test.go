package spec

import (
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/kernels/sample"
)

// BadAcceptance makes every Step take drafts unverified until tb ends, so
// that a test can show the lossless suites catch a wrong acceptance rule.
// Tests using it must not run in parallel.
func BadAcceptance(tb testing.TB) {
	unverified = true
	tb.Cleanup(func() { unverified = false })
}

// Pair is pair for the external tests: a target and its Q4_0 draft on one
// CPU backend, with plain prompts and prompts that repeat themselves.
type Pair struct {
	Name             string
	Target, Draft    model.Loaded
	Prompts, Repeats [][]int32
}

func exported(p pair) Pair {
	return Pair{Name: p.name, Target: p.target, Draft: p.draft, Prompts: p.prompts, Repeats: p.repeats}
}

// StoriesPair is the TinyStories 260K model and its Q4_0.
func StoriesPair(tb testing.TB) Pair { return exported(storiesPair(tb)) }

// SynthPair is a random synthetic model and its Q4_0.
func SynthPair(tb testing.TB) Pair { return exported(synthPair(tb)) }

// PlainGreedy is the reference greedy decoding through model.Sequences;
// its outputs keep a final end-of-generation token.
func PlainGreedy(tb testing.TB, m model.Loaded, prompts [][]int32, max int) [][]int32 {
	return plainGreedy(tb, m, prompts, max)
}

// ExactJoint is the target's exact distribution of the first k
// completion tokens, keyed by Key.
func ExactJoint(t *testing.T, m model.Loaded, prompt []int32, params sample.Params, k int) map[string]float64 {
	return exactJoint(t, m, prompt, params, k)
}

// Key is the key of a token sequence in ExactJoint's map.
func Key(toks ...int32) string { return key(toks...) }

// ChiSquare is Pearson's statistic of counts against want over n trials
// and its critical value at significance 0.001.
func ChiSquare(counts map[string]int, want map[string]float64, n int) (stat, crit float64) {
	return chiSquare(counts, want, n)
}

// StoriesChainsOnly is the TinyStories 260K model on a CPU backend that
// hides its tree ops: speculation verifies chains only.
func StoriesChainsOnly(tb testing.TB) model.Loaded {
	// Embedding only the interface hides the CPU backend's tree ops.
	return loadOn(tb, testmodelsStories(tb), struct{ kernels.Backend }{openBackend(tb)})
}
