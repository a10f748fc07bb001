package cluster

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
)

func TestTokensRoundTrip(t *testing.T) {
	for _, ids := range [][]int32{nil, {0}, {1, 2, 3}, {-1, 2147483647, 31999}} {
		s := encodeTokens(ids)
		have, err := decodeTokens(s)
		if err != nil || !reflect.DeepEqual(have, ids) {
			t.Fatalf("%q: have %v, %v; want %v", s, have, err, ids)
		}
	}
	for _, bad := range []string{",", "1,,2", "x", "1,2147483648"} {
		if have, err := decodeTokens(bad); err == nil {
			t.Fatalf("%q: have %v; want an error", bad, have)
		}
	}
}

func TestWireErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     error
		code   string
		closed bool
	}{
		{"engine error keeps its code", &engine.Error{Code: engine.CodeQueueFull, Message: "full", Temporary: true}, engine.CodeQueueFull, false},
		{"wrapped engine error", errors.Join(errors.New("x"), &engine.Error{Code: engine.CodeBadRequest}), engine.CodeBadRequest, false},
		{"engine error keeps its reason", &engine.Error{Code: engine.CodeOverQuota, Reason: engine.ReasonTokensPerMinute, Message: "spent", Temporary: true}, engine.CodeOverQuota, false},
		{"closed engine", engine.ErrClosed, "", true},
		{"anything else is internal", errors.New("boom"), engine.CodeInternal, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := toWireError(tc.in).err()
			if have := errors.Is(err, engine.ErrClosed); have != tc.closed {
				t.Fatalf("have errors.Is(ErrClosed) %v for %v; want %v", have, err, tc.closed)
			}
			var ee *engine.Error
			if !tc.closed && (!errors.As(err, &ee) || ee.Code != tc.code) {
				t.Fatalf("have %v; want code %s", err, tc.code)
			}
			var in *engine.Error
			if errors.As(tc.in, &in) && ee.Reason != in.Reason {
				t.Fatalf("have reason %q; want %q", ee.Reason, in.Reason)
			}
		})
	}
	if toWireError(nil) != nil || (*wireError)(nil).err() != nil {
		t.Fatal("have a non-nil error for nil; want nil both ways")
	}
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func TestDecodeOut(t *testing.T) {
	f := &engine.Final{FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 5},
		Stats: engine.Stats{TTFT: 7 * time.Millisecond, TokensPerSecond: 12.5, Drafted: 11, Accepted: 6, Seed: 99}, DroppedMessages: 4}
	fj, _ := jsonString(toWireFinal(f))
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   outEntry
		bad    bool
	}{
		{"accepted", map[string]any{"k": "a", "e": "e1", "f": "1"}, outEntry{Kind: kindAccepted, Engine: "e1"}, false},
		{"delta", map[string]any{"k": "d", "s": "4", "x": "hi", "t": "1,2"}, outEntry{Kind: kindDelta, Event: engine.Event{Seq: 4, Text: "hi", Tokens: []int32{1, 2}}}, false},
		{"final", map[string]any{"k": "f", "j": fj}, outEntry{Kind: kindFinal, Event: engine.Event{Final: &engine.Final{
			FinishReason: engine.FinishLength, Usage: f.Usage, Stats: engine.Stats{TTFT: 7 * time.Millisecond, TokensPerSecond: 12.5, Drafted: 11, Accepted: 6, Seed: 99},
			DroppedMessages: 4}}}, false},
		{"bad seq", map[string]any{"k": "d", "s": "x"}, outEntry{}, true},
		{"bad final", map[string]any{"k": "f", "j": "{"}, outEntry{}, true},
		{"unknown kind", map[string]any{"k": "z"}, outEntry{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have, err := decodeOut(redis.XMessage{ID: "1-0", Values: tc.values})
			if tc.bad {
				if err == nil {
					t.Fatalf("have %+v; want an error", have)
				}
				return
			}
			tc.want.ID = "1-0"
			if err != nil || !reflect.DeepEqual(have, tc.want) {
				t.Fatalf("have %+v, %v; want %+v", have, err, tc.want)
			}
		})
	}
}
