package inflate

import (
	"errors"
	"fmt"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels/sample"
)

// Agreement is how often a draft's greedy token equals a target's.
type Agreement struct {
	Positions int // positions compared
	Agreed    int // of them, where the draft's argmax was the target's
}

// Rate is Agreed/Positions (0 when nothing was compared).
func (a Agreement) Rate() float64 {
	if a.Positions == 0 {
		return 0
	}
	return float64(a.Agreed) / float64(a.Positions)
}

// MeasureAgreement lets target continue each prompt greedily for n tokens
// and, teacher-forced on the target's tokens, counts the positions where
// draft's argmax is the target's. That is the chance that a greedy
// speculative step accepts a draft token given its prefix was accepted: the
// per-token acceptance rate of draft as a draft for target. The prompts run
// as one batch; the models must share a vocabulary.
func MeasureAgreement(target, draft model.Model, prompts [][]int32, n int) (Agreement, error) {
	tv, dv := target.Config().Vocab, draft.Config().Vocab
	switch {
	case tv != dv:
		return Agreement{}, fmt.Errorf("inflate: target vocabulary %d differs from the draft's %d", tv, dv)
	case len(prompts) == 0 || n <= 0:
		return Agreement{}, errors.New("inflate: no prompts or no tokens to compare")
	}
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return Agreement{}, fmt.Errorf("inflate: prompt %d is empty", i)
		}
		longest = max(longest, len(p))
	}
	ctx := longest + n
	if c := min(target.Config().Context, draft.Config().Context); ctx > c {
		return Agreement{}, fmt.Errorf("inflate: %d prompt and %d generated tokens exceed the context of %d", longest, n, c)
	}
	ts, err := model.NewSequences(target, len(prompts), ctx)
	if err != nil {
		return Agreement{}, err
	}
	ds, err := model.NewSequences(draft, len(prompts), ctx)
	if err != nil {
		return Agreement{}, err
	}
	in := make([][]int32, len(prompts))
	copy(in, prompts)
	var a Agreement
	// Each step feeds both models the same tokens (the target's previous
	// choices), so next is filled only after both have read them.
	next := make([]int32, len(prompts))
	want := make([]int32, len(prompts))
	for range n {
		tl, err := ts.Step(in)
		if err != nil {
			return a, fmt.Errorf("inflate: target: %w", err)
		}
		for i := range in {
			want[i] = sample.Argmax(tl[i*tv : (i+1)*tv])
		}
		dl, err := ds.Step(in)
		if err != nil {
			return a, fmt.Errorf("inflate: draft: %w", err)
		}
		for i := range in {
			a.Positions++
			if sample.Argmax(dl[i*dv:(i+1)*dv]) == want[i] {
				a.Agreed++
			}
		}
		copy(next, want)
		for i := range in {
			in[i] = next[i : i+1]
		}
	}
	return a, nil
}
