package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Branches: regenerating or editing a turn keeps what it replaces.
//
// The session's message list (sess:<id>:msgs) is always the live path, so
// history, resume and the engine's prompt read one list as before. Each
// branch point, the index of a user message that has siblings, has an
// entry in the hash sess:<id>:alts, field "<index>":
//
//	{"current": k, "alts": [v0, v1, ..., null, ...]}
//
// where alts[current] is null (that version is the live one) and every
// other vi is {"msgs": [raw message JSON, ...], "alts": {"<index>": raw
// entry, ...}}: the messages from the branch point to the end of that
// version, with the branch points inside it. Switching versions swaps the
// live tail with a stored one in one script, so nested branches travel with
// their version, and the shared prefix (what the engine's prefix cache
// holds) is never touched.

// Errors of branch operations.
var (
	// ErrNoTurn: the named turn is not on the session's live path.
	ErrNoTurn = errors.New("gateway: no such turn in the session")
	// ErrNoBranch: the turn has no sibling with that index.
	ErrNoBranch = errors.New("gateway: no such branch")
	// ErrBusy: a reply is being generated in the session.
	ErrBusy = errors.New("gateway: a reply is still being generated in this session")
)

func (s *SessionStore) altsKey(id string) string { return s.ks.Branches(id) }

// branchLib is the Lua shared by the branch scripts: findTurn (1-based
// position of the live user message of a request), stash (moves the
// live tail from pos, with the branch points inside it, into a version)
// and busy (the live path's last turn is still generating: its reply
// would land on the wrong version). busy reads the last turn's request
// record, reqPrefix..request, a key of the session's hash slot that the
// caller cannot name before the script has read the list: checked
// anywhere but in the script that moves the branches, two tabs could
// both find the session idle and one move the other's running turn.
const branchLib = `
local function findTurn(msgs, request)
  for i = #msgs, 1, -1 do
    local m = cjson.decode(msgs[i])
    if m.role == 'user' and m.request == request then return i, m end
  end
  return nil, nil
end
local function stash(altsKey, msgs, pos)
  local tail = {}
  for i = pos, #msgs do tail[#tail + 1] = msgs[i] end
  local deeper = {}
  local n = 0
  local all = redis.call('HGETALL', altsKey)
  for i = 1, #all, 2 do
    if tonumber(all[i]) > pos - 1 then
      deeper[all[i]] = all[i + 1]
      n = n + 1
      redis.call('HDEL', altsKey, all[i])
    end
  end
  if n == 0 then deeper = cjson.decode('{}') end
  return {msgs = tail, alts = deeper}
end
local function busy(reqPrefix, msgs)
  local last = msgs[#msgs]
  if not last then return false end
  local ok, m = pcall(cjson.decode, last)
  if not ok or m.role ~= 'user' or type(m.request) ~= 'string' or m.request == '' then return false end
  return redis.call('HGET', reqPrefix .. m.request, 'state') == 'running'
end
local function cut(msgsKey, pos)
  if pos <= 1 then redis.call('DEL', msgsKey) else redis.call('LTRIM', msgsKey, 0, pos - 2) end
end
`

// replaceScript starts a turn that replaces the turn of request ARGV[3]:
// that turn and all after it become a stored version, and a new user
// message (content ARGV[4], or the old one's when empty) starts the new
// version. Returns the new history, or 0 (not found), -1 (duplicate
// request), -2 (no such turn), -4 (busy).
//
// KEYS: sess, msgs, req (the new request), alts. ARGV: tenant, user,
// replaced request, content, now ms, session id, record TTL ms, new
// request, request-record key prefix. (The user's index is another slot:
// the caller touches it.)
var replaceScript = redis.NewScript(ownerCheck + branchLib + `
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local msgs = redis.call('LRANGE', KEYS[2], 0, -1)
if busy(ARGV[9], msgs) then return -4 end
local pos, old = findTurn(msgs, ARGV[3])
if not pos then return -2 end
local field = tostring(pos - 1)
local raw = redis.call('HGET', KEYS[4], field)
local entry
if raw then entry = cjson.decode(raw) else entry = {current = 0, alts = {cjson.null}} end
entry.alts[entry.current + 1] = stash(KEYS[4], msgs, pos)
entry.alts[#entry.alts + 1] = cjson.null
entry.current = #entry.alts - 1
redis.call('HSET', KEYS[4], field, cjson.encode(entry))
cut(KEYS[2], pos)
local content = ARGV[4]
if content == '' then content = old.content end
local m = cjson.encode({role = 'user', content = content, request = ARGV[8], created = tonumber(ARGV[5])})
redis.call('RPUSH', KEYS[2], m)
redis.call('HSET', KEYS[3], 'state', 'running', 'created', ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
redis.call('HSET', KEYS[1], 'updated', ARGV[5])
return redis.call('LRANGE', KEYS[2], 0, -1)
`)

// switchScript makes version ARGV[4] of the branch point at the turn of
// request ARGV[3] the live one. Returns 1, or 0 (not found), -2 (no such
// turn), -3 (no such version), -4 (busy).
//
// KEYS: sess, msgs, alts. ARGV: tenant, user, request, version, now ms,
// request-record key prefix.
var switchScript = redis.NewScript(ownerCheck + branchLib + `
local msgs = redis.call('LRANGE', KEYS[2], 0, -1)
if busy(ARGV[6], msgs) then return -4 end
local pos = findTurn(msgs, ARGV[3])
if not pos then return -2 end
local field = tostring(pos - 1)
local raw = redis.call('HGET', KEYS[3], field)
if not raw then return -3 end
local entry = cjson.decode(raw)
local k = tonumber(ARGV[4])
if k >= #entry.alts then return -3 end
if k == entry.current then return 1 end
local v = entry.alts[k + 1]
entry.alts[entry.current + 1] = stash(KEYS[3], msgs, pos)
cut(KEYS[2], pos)
for _, m in ipairs(v.msgs) do redis.call('RPUSH', KEYS[2], m) end
for f, e in pairs(v.alts) do redis.call('HSET', KEYS[3], f, e) end
entry.alts[k + 1] = cjson.null
entry.current = k
redis.call('HSET', KEYS[3], field, cjson.encode(entry))
redis.call('HSET', KEYS[1], 'updated', ARGV[5])
return 1
`)

// abortScript undoes a turn the engine refused before it started: its user
// message leaves the history (a refusal is not a turn) and its request
// record goes. When the turn had replaced another, the version it
// replaced becomes live again. Returns 1, or 0 when the message is not
// the last one (left alone).
//
// KEYS: msgs, req, alts. ARGV: request.
var abortScript = redis.NewScript(`
redis.call('DEL', KEYS[2])
local last = redis.call('LINDEX', KEYS[1], -1)
if not last then return 0 end
local m = cjson.decode(last)
if m.role ~= 'user' or m.request ~= ARGV[1] then return 0 end
redis.call('RPOP', KEYS[1])
local field = tostring(redis.call('LLEN', KEYS[1]))
local raw = redis.call('HGET', KEYS[3], field)
if not raw then return 1 end
local entry = cjson.decode(raw)
if entry.current ~= #entry.alts - 1 or entry.alts[#entry.alts] ~= cjson.null then return 1 end
entry.alts[#entry.alts] = nil
local k = #entry.alts - 1
local v = entry.alts[k + 1]
for _, msg in ipairs(v.msgs) do redis.call('RPUSH', KEYS[1], msg) end
for f, e in pairs(v.alts) do redis.call('HSET', KEYS[3], f, e) end
if #entry.alts == 1 then
  redis.call('HDEL', KEYS[3], field)
else
  entry.alts[k + 1] = cjson.null
  entry.current = k
  redis.call('HSET', KEYS[3], field, cjson.encode(entry))
end
return 1
`)

// StartReplaceTurn starts a turn that replaces the turn of request
// replaced (regenerate when content is "", edit otherwise); the replaced
// turn and those after it stay as a sibling branch. It returns the new
// history, the new user message last.
func (s *SessionStore) StartReplaceTurn(ctx context.Context, tenant, user, sid, request, replaced, content string) ([]Message, error) {
	if ok, err := s.owns(ctx, tenant, user, sid); err != nil {
		return nil, err
	} else if !ok {
		return nil, ErrNotFound
	}
	now := s.now().UnixMilli()
	res, err := s.w.Run(ctx, replaceScript,
		[]string{s.sessKey(sid), s.msgsKey(sid), s.reqKey(sid, request), s.altsKey(sid)},
		tenant, user, replaced, content, now, sid, s.logTTL.Milliseconds(), request, s.reqKey(sid, "")).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: replace turn: %w", err)
	}
	if v, ok := res.(int64); ok {
		switch v {
		case 0:
			return nil, ErrNotFound
		case -1:
			return nil, ErrDuplicateRequest
		case -4:
			return nil, ErrBusy
		}
		return nil, ErrNoTurn
	}
	if err := s.touch(ctx, tenant, user, sid, now); err != nil {
		return nil, err
	}
	return decodeHistory(sid, res)
}

// SwitchBranch makes version branch of the turn of request the live one.
func (s *SessionStore) SwitchBranch(ctx context.Context, tenant, user, sid, request string, branch int) error {
	if ok, err := s.owns(ctx, tenant, user, sid); err != nil {
		return err
	} else if !ok {
		return ErrNotFound
	}
	now := s.now().UnixMilli()
	n, err := s.w.Run(ctx, switchScript,
		[]string{s.sessKey(sid), s.msgsKey(sid), s.altsKey(sid)},
		tenant, user, request, branch, now, s.reqKey(sid, "")).Int()
	if err != nil {
		return fmt.Errorf("gateway: switch branch: %w", err)
	}
	switch n {
	case 0:
		return ErrNotFound
	case -2:
		return ErrNoTurn
	case -3:
		return ErrNoBranch
	case -4:
		return ErrBusy
	}
	return s.touch(ctx, tenant, user, sid, now)
}

// AbortTurn removes a refused turn's user message (see abortScript).
func (s *SessionStore) AbortTurn(ctx context.Context, sid, request string) error {
	err := s.w.Run(ctx, abortScript, []string{s.msgsKey(sid), s.reqKey(sid, request), s.altsKey(sid)}, request).Err()
	if err != nil {
		return fmt.Errorf("gateway: undo refused turn: %w", err)
	}
	return nil
}

// branches reads the session's branch points for its view.
func (s *SessionStore) branches(ctx context.Context, sid string, msgs []Message) ([]BranchInfo, error) {
	all, err := s.rdb.HGetAll(ctx, s.altsKey(sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: read branches: %w", err)
	}
	var out []BranchInfo
	for field, raw := range all {
		at, err := strconv.Atoi(field)
		if err != nil || at < 0 || at >= len(msgs) {
			continue
		}
		var e struct {
			Current int               `json:"current"`
			Alts    []json.RawMessage `json:"alts"`
		}
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, fmt.Errorf("gateway: session %s: branch %s: %w", sid, field, err)
		}
		out = append(out, BranchInfo{At: at, Request: msgs[at].Request, Count: len(e.Alts), Current: e.Current})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// decodeHistory reads a script's LRANGE reply.
func decodeHistory(sid string, res any) ([]Message, error) {
	v, ok := res.([]any)
	if !ok {
		return nil, fmt.Errorf("gateway: session %s: unexpected reply %T", sid, res)
	}
	out := make([]Message, 0, len(v))
	for _, raw := range v {
		str, _ := raw.(string)
		var m Message
		if err := json.Unmarshal([]byte(str), &m); err != nil {
			return nil, fmt.Errorf("gateway: session %s: stored message: %w", sid, err)
		}
		out = append(out, m)
	}
	return out, nil
}
