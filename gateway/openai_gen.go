package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/specgate/specgate/engine"
)

// maxChoices bounds "n": each choice is a generation of its own.
const maxChoices = 16

// choiceEvent is one event of one choice's stream: text (with its tokens'
// log probabilities when asked for) or, last, the final.
type choiceEvent struct {
	index int
	text  string
	lps   []engine.TokenLogprob
	final *engine.Final
}

// choiceIDs are the engine request ids of a call's choices.
func (c *oaiCall) choiceIDs() []string {
	if c.n <= 1 {
		return []string{c.req.ID}
	}
	ids := make([]string, c.n)
	for i := range ids {
		ids[i] = c.req.ID + "/" + strconv.Itoa(i)
	}
	return ids
}

// submitChoices submits one engine request per choice. Choice i samples
// with seed+i, so choice 0 is what n=1 gives with the same seed. When one
// is refused the others are cancelled and drained, and the refusal
// returned.
func (s *Server) submitChoices(ctx context.Context, c *oaiCall) ([]engine.Events, error) {
	ids := c.choiceIDs()
	streams := make([]engine.Events, 0, len(ids))
	for i, id := range ids {
		r := c.req
		r.ID = id
		r.Sample.Seed += uint64(i)
		st, err := s.o.Generator.Generate(ctx, r)
		if err != nil {
			for j, prev := range streams {
				s.o.Generator.Cancel(ids[j])
				go drain(s.runCtx, prev)
			}
			return nil, err
		}
		streams = append(streams, st)
	}
	return streams, nil
}

// drain reads a cancelled stream to its end, as streams ask.
func drain(ctx context.Context, st engine.Events) {
	for {
		if _, err := st.Recv(ctx); err != nil {
			return
		}
	}
}

// mergeChoices reads every stream on a goroutine of its own and sends
// their events on one channel. Each goroutine ends after its stream's
// final; the caller must read until it has every choice's final.
func (s *Server) mergeChoices(streams []engine.Events) <-chan choiceEvent {
	ch := make(chan choiceEvent, 4*len(streams))
	for i, st := range streams {
		go func() {
			for {
				ev := s.recvChoice(st)
				ev.index = i
				ch <- ev
				if ev.final != nil {
					return
				}
			}
		}()
	}
	return ch
}

// recvChoice returns the stream's next delta or, at the end, its final
// (never nil). A Recv error means the server gave up (hard shutdown) and
// reads as cancelled.
func (s *Server) recvChoice(stream engine.Events) choiceEvent {
	for {
		ev, err := stream.Recv(s.runCtx)
		if errors.Is(err, io.EOF) {
			return choiceEvent{final: &engine.Final{FinishReason: engine.FinishError, Err: errors.New("stream ended without a final event")}}
		}
		if err != nil {
			return choiceEvent{final: &engine.Final{FinishReason: engine.FinishCancelled}}
		}
		if ev.Final != nil {
			return choiceEvent{final: ev.Final}
		}
		if ev.Text != "" || len(ev.Logprobs) > 0 { // tokens may not make whole characters yet
			return choiceEvent{text: ev.Text, lps: ev.Logprobs}
		}
	}
}

// failed returns the first choice's failure, if any.
func failed(finals []*engine.Final) error {
	for _, f := range finals {
		if f != nil && f.FinishReason == engine.FinishError {
			if f.Err != nil {
				return f.Err
			}
			return errors.New("generation failed")
		}
	}
	return nil
}

// ---- log probabilities ---------------------------------------------------

type oaiTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type oaiTokenLogprob struct {
	oaiTopLogprob
	TopLogprobs []oaiTopLogprob `json:"top_logprobs"`
}

// chatLogprobs is a chat choice's "logprobs".
type chatLogprobs struct {
	Content []oaiTokenLogprob `json:"content"`
	Refusal *string           `json:"refusal"`
}

func pieceBytes(p string) []int {
	out := make([]int, len(p))
	for i := range len(p) {
		out[i] = int(p[i])
	}
	return out
}

// pieceText is a token's text as OpenAI shows it: partial characters
// become U+FFFD, and bytes has the exact bytes.
func pieceText(p string) string {
	if utf8.ValidString(p) {
		return p
	}
	return strings.ToValidUTF8(p, "\uFFFD")
}

func chatLogprobsOf(lps []engine.TokenLogprob) *chatLogprobs {
	out := &chatLogprobs{Content: make([]oaiTokenLogprob, len(lps))}
	for i, lp := range lps {
		t := oaiTokenLogprob{oaiTopLogprob: oaiTopLogprob{Token: pieceText(lp.Piece), Logprob: lp.Logprob, Bytes: pieceBytes(lp.Piece)}, TopLogprobs: []oaiTopLogprob{}}
		for _, tp := range lp.Top {
			t.TopLogprobs = append(t.TopLogprobs, oaiTopLogprob{Token: pieceText(tp.Piece), Logprob: tp.Logprob, Bytes: pieceBytes(tp.Piece)})
		}
		out.Content[i] = t
	}
	return out
}

// completionLogprobs is a legacy completion choice's "logprobs".
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf converts lps, whose text starts at offset bytes
// into the choice's text.
func completionLogprobsOf(lps []engine.TokenLogprob, offset int) *completionLogprobs {
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, pieceText(lp.Piece))
		out.TokenLogprobs = append(out.TokenLogprobs, lp.Logprob)
		top := map[string]float32{}
		for _, tp := range lp.Top {
			if _, dup := top[pieceText(tp.Piece)]; !dup {
				top[pieceText(tp.Piece)] = tp.Logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(lp.Piece)
	}
	return out
}

// ---- answers ---------------------------------------------------------------

// choiceResult is one whole choice.
type choiceResult struct {
	text  strings.Builder
	lps   []engine.TokenLogprob
	final *engine.Final
}

// oaiWhole answers with one JSON response once every choice ended.
func (s *Server) oaiWhole(w http.ResponseWriter, c *oaiCall, events <-chan choiceEvent) []*engine.Final {
	res := make([]choiceResult, c.choices())
	finals := make([]*engine.Final, len(res))
	for left := len(res); left > 0; {
		ev := <-events
		r := &res[ev.index]
		if ev.final != nil {
			r.final, finals[ev.index] = ev.final, ev.final
			left--
			if ev.final.FinishReason == engine.FinishError {
				for _, id := range c.choiceIDs() {
					s.o.Generator.Cancel(id)
				}
			}
			continue
		}
		r.text.WriteString(ev.text)
		r.lps = append(r.lps, ev.lps...)
	}
	if err := failed(finals); err != nil {
		writeOAIError(w, oaiFrom(err, c.refusedParam(err)))
		return finals
	}
	choices := make([]oaiChatChoice, len(res))
	for i := range res {
		r := &res[i]
		fr := finishReason(r.final.FinishReason)
		ch := oaiChatChoice{Index: i, FinishReason: &fr}
		text := r.text.String()
		if c.chat() {
			msg := &oaiChatMessage{Role: "assistant"}
			if c.toolsGuided() {
				p := c.tools.parser()
				content, calls := p.feed(text)
				content += p.end()
				msg.ToolCalls = calls
				if len(calls) > 0 && fr == "stop" {
					fr = "tool_calls"
				}
				text = content
			}
			if text != "" || len(msg.ToolCalls) == 0 {
				msg.Content = &text
			}
			ch.Message = msg
			if c.req.Logprobs {
				ch.Logprobs = chatLogprobsOf(r.lps)
			}
		} else {
			ch.Text = &text
			if c.req.Logprobs {
				ch.Logprobs = completionLogprobsOf(r.lps, 0)
			}
		}
		choices[i] = ch
	}
	httpJSON(w, http.StatusOK, oaiResponse{
		ID: c.respID, Object: c.object, Created: c.created, Model: c.model,
		SystemFingerprint: fingerprint(c.model), Seed: int64(c.req.Sample.Seed), Choices: choices, Usage: usageOf(finals),
	})
	return finals
}

// oaiStream answers with server-sent events. The status line waits for
// the first delta, so a request the engine refuses at once still gets a
// proper HTTP error.
func (s *Server) oaiStream(w http.ResponseWriter, c *oaiCall, events <-chan choiceEvent) []*engine.Final {
	rc := http.NewResponseController(w)
	chunkObject := c.object + ".chunk"
	if !c.chat() {
		chunkObject = c.object // OpenAI's completion chunks say text_completion
	}
	fp := fingerprint(c.model)
	var nullUsage any
	if c.includeUsage {
		nullUsage = json.RawMessage("null")
	}
	chunk := func(choice oaiChatChoice) oaiResponse {
		return oaiResponse{
			ID: c.respID, Object: chunkObject, Created: c.created, Model: c.model,
			SystemFingerprint: fp, Seed: int64(c.req.Sample.Seed), Choices: []oaiChatChoice{choice}, Usage: nullUsage,
		}
	}
	writing := true
	cancelAll := func() {
		for _, id := range c.choiceIDs() {
			s.o.Generator.Cancel(id)
		}
	}
	sendData := func(data []byte, err error) {
		if !writing {
			return
		}
		if err == nil {
			_, err = fmt.Fprintf(w, "data: %s\n\n", data)
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			// The client is gone: stop the generations, and read on to
			// their finals for the usage to charge.
			writing = false
			cancelAll()
		}
	}
	send := func(v any) { sendData(json.Marshal(v)) }
	done := func() { sendData([]byte("[DONE]"), nil) }
	n := c.choices()
	started := false
	start := func() {
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // proxies must not hold chunks back
		w.WriteHeader(http.StatusOK)
		if c.chat() {
			for i := range n {
				empty := ""
				send(chunk(oaiChatChoice{Index: i, Delta: &oaiDelta{Role: "assistant", Content: &empty}}))
			}
		}
	}
	parsers := make([]*toolParser, n)
	called := make([]int, n) // tool calls sent per choice
	offsets := make([]int, n)
	// pending holds log probabilities of text a tool parser still holds.
	pending := make([][]engine.TokenLogprob, n)
	content := func(i int, text string, lps []engine.TokenLogprob) {
		if text == "" && len(lps) == 0 {
			return
		}
		ch := oaiChatChoice{Index: i}
		if c.chat() {
			ch.Delta = &oaiDelta{Content: &text}
			if c.req.Logprobs {
				ch.Logprobs = chatLogprobsOf(lps)
			}
		} else {
			ch.Text = &text
			if c.req.Logprobs {
				ch.Logprobs = completionLogprobsOf(lps, offsets[i])
			}
			offsets[i] += len(text)
		}
		send(chunk(ch))
	}
	toolCalls := func(i int, calls []oaiToolCall) {
		for _, tc := range calls {
			k := called[i]
			called[i]++
			tc.Index = &k
			send(chunk(oaiChatChoice{Index: i, Delta: &oaiDelta{ToolCalls: []oaiToolCall{tc}}}))
		}
	}
	finals := make([]*engine.Final, n)
	for left := n; left > 0; {
		ev := <-events
		i := ev.index
		if ev.final != nil {
			finals[i] = ev.final
			left--
			if ev.final.FinishReason == engine.FinishError {
				cancelAll()
			}
			continue
		}
		if failed(finals) != nil {
			continue // reading on to the other finals
		}
		if !started {
			start()
		}
		if c.toolsGuided() {
			if parsers[i] == nil {
				parsers[i] = c.tools.parser()
			}
			text, calls := parsers[i].feed(ev.text)
			pending[i] = append(pending[i], ev.lps...)
			if text != "" {
				content(i, text, pending[i])
				pending[i] = nil
			}
			toolCalls(i, calls)
			continue
		}
		content(i, ev.text, ev.lps)
	}
	if err := failed(finals); err != nil {
		e := oaiFrom(err, c.refusedParam(err))
		if !started {
			writeOAIError(w, e)
			return finals
		}
		send(map[string]any{"error": e})
		done()
		return finals
	}
	if !started {
		start()
	}
	for i, f := range finals {
		if p := parsers[i]; p != nil {
			content(i, p.end(), pending[i])
		}
		fr := finishReason(f.FinishReason)
		if called[i] > 0 && fr == "stop" {
			fr = "tool_calls"
		}
		last := oaiChatChoice{Index: i, FinishReason: &fr}
		if c.chat() {
			last.Delta = &oaiDelta{}
		} else {
			empty := ""
			last.Text = &empty
		}
		send(chunk(last))
	}
	if c.includeUsage {
		u := chunk(oaiChatChoice{})
		u.Choices = []oaiChatChoice{}
		u.Usage = usageOf(finals)
		send(u)
	}
	done()
	return finals
}
