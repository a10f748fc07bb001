package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/chat"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

// TestRenderFittingSameAsLinear: renderFitting finds its cut by
// bisection; it must give what trying the cuts one after another gave
// (renderFittingLinear, the earlier code, kept here as the reference),
// over random conversations and budgets, with a real tokenizer under
// several chat templates and with the fake model's.
func TestRenderFittingSameAsLinear(t *testing.T) {
	path := testmodels.Path(t, testmodels.Stories260K)
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	engines := map[string]*Engine{}
	fake, _ := testEngine(t, newFakeModel(t), Options{})
	engines["fake"] = fake
	for _, name := range []string{"", "qwen2-chatml", "llama3-instruct", "mistral-instruct", "gemma"} {
		var src []byte
		if name != "" {
			if src, err = os.ReadFile(filepath.Join("model", "chat", "testdata", name+".jinja")); err != nil {
				t.Fatal(err)
			}
		}
		e, err := New(m, Options{ChatTemplate: string(src)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { e.Close() })
		engines["stories/"+name] = e
	}

	words := strings.Fields("once upon a time the little dog ran to the park and saw a big red ball she said hello mom")
	text := func(r *rand.Rand) string {
		n := 1 + r.IntN(12)
		if r.IntN(8) == 0 {
			n = 40 + r.IntN(80) // now and then a long turn
		}
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		return b.String()
	}
	r := rand.New(rand.NewPCG(1, 2))
	for name, e := range engines {
		for i := range 60 {
			var msgs []Message
			if r.IntN(2) == 0 {
				msgs = append(msgs, Message{Role: "system", Content: text(r)})
			}
			turns := r.IntN(40)
			for range turns {
				msgs = append(msgs, Message{Role: "user", Content: text(r)}, Message{Role: "assistant", Content: text(r)})
			}
			msgs = append(msgs, Message{Role: "user", Content: text(r)})
			// A template may refuse a conversation (mistral's, a system
			// message): both must then refuse it alike.
			whole, _, _, _ := e.renderFittingLinear(msgs, nil, 1<<30)
			fit := 1 + r.IntN(len(whole)+10)
			kept, dropped, full, err := e.renderFitting(msgs, nil, fit)
			wKept, wDropped, wFull, wErr := e.renderFittingLinear(msgs, nil, fit)
			if wErr != nil && err == nil && len(kept) > fit {
				// The one difference: a template that refuses a cut's
				// conversation (mistral's, an assistant message first)
				// refused the request when the linear search tried that
				// cut; bisection may not try it, and the prompt it ends
				// with is still too long, so the request is refused
				// either way (as too long).
				continue
			}
			if fmt.Sprint(err) != fmt.Sprint(wErr) || dropped != wDropped || !reflect.DeepEqual(kept, wKept) || !reflect.DeepEqual(full, wFull) {
				t.Fatalf("%s #%d (%d messages, %d tokens, fit %d): have %d tokens, %d dropped, %v; want %d tokens, %d dropped, %v",
					name, i, len(msgs), len(whole), fit, len(kept), dropped, err, len(wKept), wDropped, wErr)
			}
		}
	}
}

// BenchmarkRenderFitting: a long conversation cut to a small budget, by
// bisection and by the linear search it replaced.
func BenchmarkRenderFitting(b *testing.B) {
	e, _ := testEngine(b, newFakeModel(b), Options{})
	msgs := []Message{{Role: "system", Content: "be brief"}}
	for i := range 400 {
		msgs = append(msgs, Message{Role: "user", Content: fmt.Sprintf("u%d abc abc abc", i)}, Message{Role: "assistant", Content: fmt.Sprintf("a%d abc abc", i)})
	}
	msgs = append(msgs, Message{Role: "user", Content: "last"})
	for _, bc := range []struct {
		name string
		fn   func([]Message, []json.RawMessage, int) ([]int32, int, []int32, error)
	}{{"bisect", e.renderFitting}, {"linear", e.renderFittingLinear}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, _, err := bc.fn(msgs, nil, 200); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// renderFittingLinear is renderFitting as it was before the bisection: it
// renders the cuts one after another until one fits.
func (e *Engine) renderFittingLinear(msgs []Message, tools []json.RawMessage, fit int) (kept []int32, dropped int, full []int32, err error) {
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
	from := 0
	for k := 1; from < last; k++ {
		// The cut for k: the first cut point past k steps of history.
		// When it is the one just tried, the next k's is next: never
		// merely the next message, which would move the cut by one
		// exchange next turn rather than by a step.
		prev, c := from, 0
		for c < last && (at[c] < k*step || !cut(c)) {
			c++
		}
		if c == prev {
			continue
		}
		from = c
		p, dropped, err := keep(from)
		if err != nil {
			return nil, 0, nil, err
		}
		if len(p) <= fit {
			return p, dropped, prompt, nil
		}
		if from == last && anchor >= 0 {
			// Too long with the anchor: give it up too.
			anchor, from, k = -1, 0, 0
			continue
		}
		if from == last {
			return p, dropped, prompt, nil
		}
	}
	return prompt, 0, nil, nil
}
