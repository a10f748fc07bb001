package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/durable"
	"github.com/specgate/specgate/internal/keyspace"
)

// Sentinel errors of the session store.
var (
	// ErrNotFound: no such session for this (tenant, user). Another
	// tenant's or user's session reads as not found, never as forbidden.
	ErrNotFound = errors.New("gateway: session not found")
	// ErrDuplicateRequest: the request id was already used in the session.
	ErrDuplicateRequest = errors.New("gateway: request id already used in this session")
)

// Message is one stored turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Request is the chat request that produced the turn.
	Request string `json:"request,omitempty"`
	// FinishReason is set on assistant messages: stop, length, cancelled,
	// error.
	FinishReason string `json:"finish_reason,omitempty"`
	// Partial marks an assistant message that ended before the model
	// finished; Interrupted says why: cancel, shutdown, error.
	Partial     bool   `json:"partial,omitempty"`
	Interrupted string `json:"interrupted,omitempty"`
	// Error is the message of the error that ended a reply, so the
	// history shows why after a reload.
	Error string `json:"error,omitempty"`
	// Usage and Stats are the done frame's, kept so a reloaded history
	// still shows them.
	Usage   *Usage `json:"usage,omitempty"`
	Stats   *Stats `json:"stats,omitempty"`
	Created int64  `json:"created"` // Unix milliseconds
}

// SessionStore keeps sessions in Redis. Safe for concurrent use.
//
// Its keys are internal/keyspace's: a session's record, history, request
// records and delta logs share one hash slot, so each script below touches
// one slot; the user's session index lives on another and is written by a
// separate command after the script (readers skip stale entries).
type SessionStore struct {
	rdb    redis.UniversalClient
	ks     keyspace.Space
	w      *durable.Writer // turns' writes wait for replicas
	now    func() time.Time
	logTTL time.Duration
}

func (s *SessionStore) sessKey(id string) string { return s.ks.Session(id) }
func (s *SessionStore) msgsKey(id string) string { return s.ks.Messages(id) }
func (s *SessionStore) idxKey(tenant, user string) string {
	return s.ks.UserIndex(tenant, user)
}
func (s *SessionStore) reqKey(sid, rid string) string { return s.ks.Request(sid, rid) }

// touch moves session id up (tenant, user)'s index. XX: a session deleted
// meanwhile is not brought back into the index.
func (s *SessionStore) touch(ctx context.Context, tenant, user, id string, now int64) error {
	err := s.rdb.ZAddXX(ctx, s.idxKey(tenant, user), redis.Z{Score: float64(now), Member: id}).Err()
	if err != nil {
		return fmt.Errorf("gateway: update session index: %w", err)
	}
	return nil
}

// validKeyPart guards every store method that puts a caller's id into a key
// name: an id that is not one the protocol allows cannot name a session, so
// it reads as not found without touching Redis. Whatever the key it would
// have named holds, the answer is the same: no existence oracle.
func validKeyPart(ids ...string) bool {
	for _, id := range ids {
		if id == "" || len(id) > MaxIDLen || !idPattern.MatchString(id) {
			return false
		}
	}
	return true
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "s_" + hex.EncodeToString(b[:])
}

// ownerCheck is the Lua prologue that ends a script with 0 when the
// session (KEYS[1]) does not belong to tenant ARGV[1], user ARGV[2].
const ownerCheck = `
local owner = redis.call('HMGET', KEYS[1], 'tenant', 'user')
if owner[1] ~= ARGV[1] or owner[2] ~= ARGV[2] then return 0 end
`

// Create makes a new session for (tenant, user).
func (s *SessionStore) Create(ctx context.Context, tenant, user, title string) (*SessionView, error) {
	id := newSessionID()
	now := s.now().UnixMilli()
	// The record first: an index entry without a record would list a
	// session that is not there, a record without an entry only hides it.
	if err := s.rdb.HSet(ctx, s.sessKey(id), "tenant", tenant, "user", user, "title", title, "created", now, "updated", now).Err(); err != nil {
		return nil, fmt.Errorf("gateway: create session: %w", err)
	}
	if err := s.rdb.ZAdd(ctx, s.idxKey(tenant, user), redis.Z{Score: float64(now), Member: id}).Err(); err != nil {
		return nil, fmt.Errorf("gateway: create session: index: %w", err)
	}
	return &SessionView{ID: id, Title: title, Created: now, Updated: now, Messages: []Message{}}, nil
}

// Get returns a session with its history; ErrNotFound unless it belongs to
// (tenant, user).
func (s *SessionStore) Get(ctx context.Context, tenant, user, id string) (*SessionView, error) {
	if !validKeyPart(id) {
		return nil, ErrNotFound
	}
	var h *redis.MapStringStringCmd
	var msgs *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, s.sessKey(id))
		msgs = p.LRange(ctx, s.msgsKey(id), 0, -1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: read session: %w", err)
	}
	m := h.Val()
	if m["tenant"] != tenant || m["user"] != user {
		return nil, ErrNotFound
	}
	v := &SessionView{ID: id, Title: m["title"], Messages: []Message{}}
	v.Created, _ = strconv.ParseInt(m["created"], 10, 64)
	v.Updated, _ = strconv.ParseInt(m["updated"], 10, 64)
	for _, raw := range msgs.Val() {
		var msg Message
		if err := json.Unmarshal([]byte(raw), &msg); err != nil {
			return nil, fmt.Errorf("gateway: session %s: stored message: %w", id, err)
		}
		v.Messages = append(v.Messages, msg)
	}
	if err := s.decorate(ctx, v, m); err != nil {
		return nil, err
	}
	return v, nil
}

// Session list sizes: the default, and the most one list returns.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// List returns (tenant, user)'s sessions, most recently active first, at
// most limit (0: DefaultListLimit; above MaxListLimit: MaxListLimit).
func (s *SessionStore) List(ctx context.Context, tenant, user string, limit int) ([]SessionInfo, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	ids, err := s.rdb.ZRevRange(ctx, s.idxKey(tenant, user), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: list sessions: %w", err)
	}
	hs := make([]*redis.SliceCmd, len(ids))
	ns := make([]*redis.IntCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hs[i] = p.HMGet(ctx, s.sessKey(id), "tenant", "user", "title", "created", "updated")
			ns[i] = p.LLen(ctx, s.msgsKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: list sessions: %w", err)
	}
	out := make([]SessionInfo, 0, len(ids))
	for i, id := range ids {
		v := hs[i].Val()
		if len(v) != 5 || v[0] != tenant || v[1] != user {
			continue // deleted meanwhile
		}
		info := SessionInfo{ID: id, Messages: int(ns[i].Val())}
		info.Title, _ = v[2].(string)
		c, _ := v[3].(string)
		u, _ := v[4].(string)
		info.Created, _ = strconv.ParseInt(c, 10, 64)
		info.Updated, _ = strconv.ParseInt(u, 10, 64)
		out = append(out, info)
	}
	return out, nil
}

var deleteScript = redis.NewScript(ownerCheck + `
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
`)

// Delete removes a session and its history. Its request logs expire on
// their own; a resume of them reads as not found once the session is gone.
func (s *SessionStore) Delete(ctx context.Context, tenant, user, id string) error {
	if !validKeyPart(id) {
		return ErrNotFound
	}
	n, err := deleteScript.Run(ctx, s.rdb, []string{s.sessKey(id), s.msgsKey(id), s.altsKey(id)}, tenant, user).Int()
	if err != nil {
		return fmt.Errorf("gateway: delete session: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	// After the record: a failure here leaves an entry List skips.
	if err := s.rdb.ZRem(ctx, s.idxKey(tenant, user), id).Err(); err != nil {
		return fmt.Errorf("gateway: delete session: index: %w", err)
	}
	return nil
}

// startScript begins a turn atomically: owner check, request id unused,
// request record, user message appended. Returns the history (JSON
// messages) including the new one, or 0 (not found) or -1 (duplicate
// request).
//
// KEYS: sess, msgs, req. ARGV: tenant, user, message JSON, now ms,
// request-record TTL ms.
var startScript = redis.NewScript(ownerCheck + `
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
redis.call('HSET', KEYS[3], 'state', 'running', 'created', ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'updated', ARGV[4])
return redis.call('LRANGE', KEYS[2], 0, -1)
`)

// StartTurn stores the user's message before generation starts and returns
// the whole history, the new message last. ErrNotFound unless the session
// is (tenant, user)'s; ErrDuplicateRequest when request was used before.
func (s *SessionStore) StartTurn(ctx context.Context, tenant, user, sid, request, content string) ([]Message, error) {
	if !validKeyPart(sid, request) {
		return nil, ErrNotFound
	}
	now := s.now().UnixMilli()
	msg, _ := json.Marshal(Message{Role: "user", Content: content, Request: request, Created: now})
	res, err := s.w.Run(ctx, startScript,
		[]string{s.sessKey(sid), s.msgsKey(sid), s.reqKey(sid, request)},
		tenant, user, msg, now, s.logTTL.Milliseconds()).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: store user message: %w", err)
	}
	if _, ok := res.([]any); ok {
		if err := s.touch(ctx, tenant, user, sid, now); err != nil {
			return nil, err
		}
	}
	switch v := res.(type) {
	case int64:
		if v == 0 {
			return nil, ErrNotFound
		}
		return nil, ErrDuplicateRequest
	case []any:
		return decodeHistory(sid, v)
	}
	return nil, fmt.Errorf("gateway: store user message: unexpected reply %T", res)
}

// finishScript appends the assistant message when the session still
// exists (it may have been deleted during generation: then the message is
// dropped) and marks the request done. When crash recovery finalized the
// turn first (reaped: its owner was taken for dead), the owner's reply
// replaces the recovered partial one, so a finished reply is never left
// stored as partial. A turn already finished by an owner (state done, not
// reaped) is left as it is: the second of two gateways that both read the
// generation to its end (one attached to it after taking the other for
// dead) stores nothing twice, and the script answers 2; a retry by the
// finisher itself (its first answer lost) answers 3. KEYS: sess, msgs,
// req. ARGV: message JSON, now ms, record TTL ms, request id, finish
// reason, finisher (the gateway's id).
var finishScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[3], 'state', 'reaped', 'by')
if rec[1] == 'done' and rec[2] == '0' then
  if rec[3] == ARGV[6] then return 3 end
  return 2
end
redis.call('HSET', KEYS[3], 'state', 'done', 'finish', ARGV[5], 'reaped', '0', 'by', ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if rec[1] == 'done' and rec[2] == '1' then
  local msgs = redis.call('LRANGE', KEYS[2], 0, -1)
  for i = #msgs, 1, -1 do
    local ok, m = pcall(cjson.decode, msgs[i])
    if ok and m.role == 'assistant' and m.request == ARGV[4] then
      redis.call('LSET', KEYS[2], i - 1, ARGV[1])
      redis.call('HSET', KEYS[1], 'updated', ARGV[2])
      return 1
    end
  end
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'updated', ARGV[2])
return 1
`)

// FinishTurn stores the assistant message of a turn and marks the request
// done, on behalf of finisher (one id per gateway). It reports whether
// finisher ended the turn, in this call or an earlier try: false means
// another gateway reading the same generation did, and owns its end (the
// done record, the tenant's charge).
func (s *SessionStore) FinishTurn(ctx context.Context, finisher, tenant, user, sid string, m Message) (ended bool, err error) {
	m.Role = "assistant"
	if m.Created == 0 {
		m.Created = s.now().UnixMilli()
	}
	b, _ := json.Marshal(m)
	n, err := s.w.Run(ctx, finishScript,
		[]string{s.sessKey(sid), s.msgsKey(sid), s.reqKey(sid, m.Request)},
		b, m.Created, s.logTTL.Milliseconds(), m.Request, m.FinishReason, finisher).Int()
	if err != nil {
		return false, fmt.Errorf("gateway: store assistant message: %w", err)
	}
	if n != 1 {
		return n != 2, nil
	}
	return true, s.touch(ctx, tenant, user, sid, m.Created)
}

// recoverEndScript is finishScript for crash recovery: it stores the
// reply only while the request is still running, marks the record
// reaped, and ends the log with its done record, all together, and only if
// the log still ends with the delta the reply was read up to. In split
// mode an engine may append to the log until its done record is there
// (the dead gateway had not recorded the handle that a takeover needs);
// a delta that came after the read would be in the log and not in the
// stored reply, and a done before the reply is stored would let a resumer
// find the session without it. KEYS: session, messages, request record,
// log. ARGV: message JSON, created ms, TTL ms, finish reason, the last
// delta's seq, the log's cap, the done frame JSON. Returns -1 when the
// request is not running, -2 when the log already ends with a done
// record, -3 when the log's newest delta is not the one given, 0 when the
// session is gone (the log is ended all the same), 1 when stored.
var recoverEndScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], 'state') ~= 'running' then return -1 end
local top = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
local last = 0
if #top > 0 then
  if top[1][2][1] == 'done' then return -2 end
  last = tonumber(string.match(top[1][1], '^(%d+)'))
end
if last ~= tonumber(ARGV[5]) then return -3 end
redis.call('HSET', KEYS[3], 'state', 'done', 'finish', ARGV[4], 'reaped', '1')
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], (last + 1) .. '-0', 'done', ARGV[7])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'updated', ARGV[2])
return 1
`)

// errLogMoved: the log grew past the delta a recovered reply was read up
// to; read it again.
var errLogMoved = errors.New("gateway: the stream log grew while the reply was recovered")

// RecoverEnd stores the reply of a turn whose gateway died and ends its
// log (key log, capped near maxLen) with done after delta lastSeq, in one
// step; it reports whether it ended the turn (false: not running any
// more, or the log was ended already), and errLogMoved when the log has
// deltas past lastSeq.
func (s *SessionStore) RecoverEnd(ctx context.Context, tenant, user, sid string, m Message, log string, maxLen int64, lastSeq int, done ServerFrame) (bool, error) {
	m.Role = "assistant"
	if m.Created == 0 {
		m.Created = s.now().UnixMilli()
	}
	b, _ := json.Marshal(m)
	d, _ := json.Marshal(done)
	n, err := s.w.Run(ctx, recoverEndScript,
		[]string{s.sessKey(sid), s.msgsKey(sid), s.reqKey(sid, m.Request), log},
		b, m.Created, s.logTTL.Milliseconds(), m.FinishReason, lastSeq, maxLen, d).Int()
	if err != nil {
		return false, fmt.Errorf("gateway: store recovered reply: %w", err)
	}
	if n == -3 {
		return false, errLogMoved
	}
	if n == 1 && tenant != "" {
		if err := s.touch(ctx, tenant, user, sid, m.Created); err != nil {
			return true, err
		}
	}
	return n >= 0, nil
}

// requestFinish returns a request's state ("" when unknown or expired),
// the finish reason it was stored with, and the handle under which another
// gateway may attach to its generation ("" none, see setAttach).
func (s *SessionStore) requestFinish(ctx context.Context, sid, rid string) (state, finish, attach string, err error) {
	v, err := s.rdb.HMGet(ctx, s.reqKey(sid, rid), "state", "finish", "attach").Result()
	if err != nil {
		return "", "", "", fmt.Errorf("gateway: read request %s: %w", rid, err)
	}
	state, _ = v[0].(string)
	finish, _ = v[1].(string)
	attach, _ = v[2].(string)
	return state, finish, attach, nil
}

// attachScript sets a request record's generation handle, only on a
// record that exists: one deleted with its session meanwhile must not
// come back as a stray hash without a TTL. KEYS: req. ARGV: handle.
var attachScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'attach', ARGV[1])
return 1
`)

// setAttach records, on a running request, the handle of its generation
// (attacher.Handle), for crash recovery to attach to.
func (s *SessionStore) setAttach(ctx context.Context, sid, rid, handle string) error {
	if err := attachScript.Run(ctx, s.rdb, []string{s.reqKey(sid, rid)}, handle).Err(); err != nil {
		return fmt.Errorf("gateway: record the generation of %s: %w", rid, err)
	}
	return nil
}

// ownerOf returns the tenant and user of session sid ("" when it is gone).
func (s *SessionStore) ownerOf(ctx context.Context, sid string) (tenant, user string, err error) {
	v, err := s.rdb.HMGet(ctx, s.sessKey(sid), "tenant", "user").Result()
	if err != nil {
		return "", "", fmt.Errorf("gateway: read session: %w", err)
	}
	tenant, _ = v[0].(string)
	user, _ = v[1].(string)
	return tenant, user, nil
}

// requestState returns "running", "done" or "" (unknown or expired).
func (s *SessionStore) requestState(ctx context.Context, sid, rid string) (string, error) {
	st, err := s.rdb.HGet(ctx, s.reqKey(sid, rid), "state").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("gateway: read request %s: %w", rid, err)
	}
	return st, nil
}

// owns reports whether session sid is (tenant, user)'s.
func (s *SessionStore) owns(ctx context.Context, tenant, user, sid string) (bool, error) {
	v, err := s.rdb.HMGet(ctx, s.sessKey(sid), "tenant", "user").Result()
	if err != nil {
		return false, fmt.Errorf("gateway: read session: %w", err)
	}
	t, _ := v[0].(string)
	u, _ := v[1].(string)
	return t == tenant && u == user, nil
}
