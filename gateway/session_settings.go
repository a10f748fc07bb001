package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
)

// Per-session settings live in the session's hash (sess:<id>): "system",
// the system prompt sent first through the chat template, and "params",
// the JSON of the session's default ChatParams. A chat's own params
// override them field by field.

// updateScript sets the given settings of a session (KEYS[1]). ARGV:
// tenant, user, now ms, then field/value pairs.
var updateScript = redis.NewScript(ownerCheck + `
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'updated', ARGV[3])
return 1
`)

// SessionUpdate is a change to a session; nil fields stay as they are.
type SessionUpdate struct {
	Title  *string
	System *string
	Params *ChatParams
}

func (u SessionUpdate) fields() ([]any, error) {
	var kv []any
	if u.Title != nil {
		kv = append(kv, "title", *u.Title)
	}
	if u.System != nil {
		kv = append(kv, "system", *u.System)
	}
	if u.Params != nil {
		b, err := json.Marshal(u.Params)
		if err != nil {
			return nil, fmt.Errorf("gateway: encode params: %w", err)
		}
		kv = append(kv, "params", string(b))
	}
	return kv, nil
}

// Update changes a session's title, system prompt or default parameters.
func (s *SessionStore) Update(ctx context.Context, tenant, user, id string, u SessionUpdate) error {
	if !validKeyPart(id) {
		return ErrNotFound
	}
	kv, err := u.fields()
	if err != nil {
		return err
	}
	now := s.now().UnixMilli()
	args := append([]any{tenant, user, now}, kv...)
	n, err := updateScript.Run(ctx, s.rdb, []string{s.sessKey(id)}, args...).Int()
	if err != nil {
		return fmt.Errorf("gateway: update session: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return s.touch(ctx, tenant, user, id, now)
}

// decorate fills a view's settings from the session hash h, and its
// branch points.
func (s *SessionStore) decorate(ctx context.Context, v *SessionView, h map[string]string) error {
	v.System = h["system"]
	if raw := h["params"]; raw != "" {
		var p ChatParams
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return fmt.Errorf("gateway: session %s: stored params: %w", v.ID, err)
		}
		v.Params = &p
	}
	b, err := s.branches(ctx, v.ID, v.Messages)
	if err != nil {
		return err
	}
	v.Branches = b
	return nil
}

// settings reads a session's system prompt and default parameters.
func (s *SessionStore) settings(ctx context.Context, sid string) (system string, params *ChatParams, err error) {
	v, err := s.rdb.HMGet(ctx, s.sessKey(sid), "system", "params").Result()
	if err != nil {
		return "", nil, fmt.Errorf("gateway: read session settings: %w", err)
	}
	system, _ = v[0].(string)
	if raw, _ := v[1].(string); raw != "" {
		var p ChatParams
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return "", nil, fmt.Errorf("gateway: session %s: stored params: %w", sid, err)
		}
		params = &p
	}
	return system, params, nil
}

// mergeParams is the session's defaults d overridden by the chat's own c,
// field by field (a zero field in c keeps d's).
func mergeParams(d, c *ChatParams) *ChatParams {
	if d == nil {
		return c
	}
	if c == nil {
		cp := *d
		return &cp
	}
	out := *d
	if c.MaxTokens != 0 {
		out.MaxTokens = c.MaxTokens
	}
	if c.Temperature != 0 {
		out.Temperature = c.Temperature
	}
	if c.TopP != 0 {
		out.TopP = c.TopP
	}
	if c.TopK != 0 {
		out.TopK = c.TopK
	}
	if c.MinP != 0 {
		out.MinP = c.MinP
	}
	if c.Seed != 0 {
		out.Seed = c.Seed
	}
	if c.Priority != "" {
		out.Priority = c.Priority
	}
	if c.Speculate != "" {
		out.Speculate = c.Speculate
	}
	if len(c.Stop) > 0 {
		out.Stop = c.Stop
	}
	// Guided decoding is one choice: a chat that names one replaces the
	// session's.
	if len(c.Schema) > 0 || c.Regex != "" || len(c.Choices) > 0 || c.JSON {
		out.Schema, out.Regex, out.Choices, out.JSON = c.Schema, c.Regex, c.Choices, c.JSON
	}
	return &out
}

// engineMessages is the prompt for the engine: the system prompt first
// (when set), then the history.
func engineMessages(system string, history []Message) []engine.Message {
	out := make([]engine.Message, 0, len(history)+1)
	if system != "" {
		out = append(out, engine.Message{Role: "system", Content: system})
	}
	for _, m := range history {
		out = append(out, engine.Message{Role: m.Role, Content: m.Content})
	}
	return out
}
