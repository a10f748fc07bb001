package engine

import (
	"fmt"
	"testing"
	"time"
)

func TestAgedBatchUnderInteractiveFlood(t *testing.T) {
	// The engine's own budget and interactive-first steps around the
	// scheduler: 80 closed-loop interactive streams over 64 running slots
	// and one batch request, on a fake clock. The batch request must
	// start right after it has aged two classes and then finish.
	m := newFakeModel(t)
	const aging = 100 * time.Millisecond
	e, clk := testEngine(t, m, Options{MaxRunning: 64, AgingAfter: aging})
	// A cost model as a ~100M model on a CPU gives: 10 ms a step and
	// 2 ms a token, so the 50 ms target holds 20 tokens and the flood's
	// steps are saturated. (The fake clock does not move during a
	// forward pass, so the engine measures nothing itself.)
	for range 4 {
		e.rate.observe(10, 30*time.Millisecond)
		e.rate.observe(30, 70*time.Millisecond)
	}
	batch, err := submitNow(e, Request{ID: "batch", Tenant: "bulk", Priority: Batch, Prompt: []int32{5, 6, 7, 8}, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]*Stream{}
	n := 0
	for step := 0; step < 2000 && e.seqs["batch"] != nil; step++ {
		for id := range live {
			if e.seqs[id] == nil {
				delete(live, id)
			}
		}
		for len(live) < 80 {
			id := fmt.Sprint("i", n)
			n++
			st, err := submitNow(e, Request{ID: id, Tenant: "chat", Priority: Interactive, Prompt: []int32{1, 2, 3, int32(4 + n%40)}, MaxTokens: 16})
			if err != nil {
				t.Fatal(err)
			}
			live[id] = st
		}
		e.step(clk.Now())
		clk.Advance(10 * time.Millisecond)
	}
	if e.seqs["batch"] != nil {
		t.Fatal("the batch request did not finish under the flood")
	}
	f := collect(t, batch).final
	if f.Stats.Queue > 2*aging+20*time.Millisecond || f.Stats.Preemptions > 0 || f.Usage.CompletionTokens != 16 {
		t.Errorf("have queue %v, %d preemptions, %d tokens; want ≤ 2×aging + 2 steps, none, 16", f.Stats.Queue, f.Stats.Preemptions, f.Usage.CompletionTokens)
	}
}
