package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// conversation is a two-turn chat in token ids: turn 2's prompt is turn 1's
// prompt, its greedy reply, and the next user message.
type conversation struct {
	first, second engine.Request
}

func storiesConversation(t *testing.T, m interface{ Encode(string) []int32 }, e *engine.Engine, tenant string) conversation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := engine.Request{Tenant: tenant, Session: "conv", Prompt: m.Encode("Once upon a time"), MaxTokens: 60}
	reply, _, f, err := generate(ctx, e, first)
	if err != nil || f.FinishReason != engine.FinishLength {
		t.Fatalf("turn 1: %v %+v", err, f)
	}
	next := m.Encode(" The next day, the little bird")[1:] // no BOS mid-conversation
	p2 := append(append(slices.Clone(first.Prompt), reply...), next...)
	return conversation{first, engine.Request{Tenant: tenant, Session: "conv", Prompt: p2, MaxTokens: 40}}
}

// greedyNoCache runs r alone on an engine without the prefix cache.
func greedyNoCache(t *testing.T, m interface{ Encode(string) []int32 }, e *engine.Engine, r engine.Request) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	toks, _, f, err := generate(ctx, e, r)
	if err != nil || f.FinishReason == engine.FinishError {
		t.Fatalf("no cache: %v %+v", err, f)
	}
	return toks
}

func counters(t *testing.T, e *engine.Engine) engine.Counters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStoriesPrefixCache runs the second turn of a conversation on the real
// model: with the cache it prefills only the tokens turn 1 did not leave
// cached, and its greedy output is the output without the cache; another
// tenant's identical prompt finds nothing; and a prefix demoted to the host
// tier is promoted back and gives the same output.
func TestStoriesPrefixCache(t *testing.T) {
	m := loadStories(t)
	tok := m.Tokenizer()
	plain, err := engine.New(m, engine.Options{NoPrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	conv := storiesConversation(t, tok, plain, "a")
	want := greedyNoCache(t, tok, plain, conv.second)
	// Turn 1 computed its prompt and all but its last generated token:
	// whole blocks of 16 of those are cached.
	computed := len(conv.first.Prompt) + conv.first.MaxTokens - 1
	cached := computed / 16 * 16
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tests := []struct {
		name   string
		o      engine.Options
		fill   bool   // another tenant's request pushes turn 1's blocks to the host
		tenant string // who sends turn 2
		cached int
	}{
		{"next turn", engine.Options{}, false, "a", cached},
		{"other tenant", engine.Options{}, false, "b", 0},
		// 8 device blocks of 16: the filler's 119 computed tokens need 8, so
		// turn 1's 4 cached blocks go to the host tier.
		{"demoted and promoted", engine.Options{KVBlocks: 8, HostKVBlocks: 32}, true, "a", cached},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := engine.New(m, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if _, _, f, err := generate(ctx, e, conv.first); err != nil || f.FinishReason != engine.FinishLength {
				t.Fatalf("turn 1: %v %+v", err, f)
			}
			if tt.fill {
				filler := slices.Repeat(tok.Encode("The cat sat on the mat and")[1:], 20)[:110]
				if _, _, f, err := generate(ctx, e, engine.Request{Tenant: "c", Prompt: filler, MaxTokens: 10}); err != nil || f.FinishReason == engine.FinishError {
					t.Fatalf("filler: %v %+v", err, f)
				}
				if c := counters(t, e); c.Cache.Demotions == 0 {
					t.Fatalf("have cache %+v after the filler; want turn 1's blocks demoted", c.Cache)
				}
			}
			before := counters(t, e)
			second := conv.second
			second.Tenant = tt.tenant
			toks, _, f, err := generate(ctx, e, second)
			if err != nil || f.FinishReason == engine.FinishError {
				t.Fatalf("turn 2: %v %+v", err, f)
			}
			after := counters(t, e)
			if f.Usage.CachedTokens != tt.cached {
				t.Errorf("have %d cached tokens; want %d", f.Usage.CachedTokens, tt.cached)
			}
			if have, want := after.PromptTokens-before.PromptTokens, int64(len(second.Prompt)-tt.cached); have != want {
				t.Errorf("have %d prompt tokens prefilled for turn 2; want %d (of %d)", have, want, len(second.Prompt))
			}
			if tt.fill {
				if host := after.Cache.HostHitTokens - before.Cache.HostHitTokens; host != int64(tt.cached) {
					t.Errorf("have %d host hit tokens; want all %d cached tokens promoted", host, tt.cached)
				}
			}
			if !slices.Equal(toks, want) {
				t.Errorf("turn 2 greedy ids differ from the no-cache run:\nhave %v\nwant %v", toks, want)
			}
		})
	}
}
