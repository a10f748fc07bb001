package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/keyspace"
)

// group is the consumer group every engine reads request streams in.
const group = "engines"

// Roles of a node.
const (
	RoleGateway = "gateway"
	RoleEngine  = "engine"
)

// keys names every Redis key of one deployment (internal/keyspace has the
// layout and its hash slots).
type keys struct{ ks keyspace.Space }

func newKeys(prefix string) keys { return keys{keyspace.New(prefix)} }

func (k keys) nodes() string                { return k.ks.Nodes() }
func (k keys) node(member string) string    { return k.ks.Node(member) }
func (k keys) queue(engineID string) string { return k.ks.Queue(engineID) }
func (k keys) shared() string               { return k.ks.SharedQueue() }
func (k keys) queues() string               { return k.ks.Queues() }
func (k keys) req(rk string) string         { return k.ks.ClusterRequest(rk) }
func (k keys) out(rk string) string         { return k.ks.ClusterOutput(rk) }

// forRequest is where request rk's entries go: its fence record and
// output stream, on the slot of the stream log its deltas go to when it
// has one (log != ""), else on its own.
func (k keys) forRequest(rk, log string) (rec, out string) {
	if log == "" {
		return k.req(rk), k.out(rk)
	}
	rec = k.ks.LoggedClusterRequest(log, rk)
	return rec, k.ks.ClusterOutputOf(rec)
}
func (k keys) gatewayChan(id string) string { return k.ks.GatewayChannel(id) }
func (k keys) control() string              { return k.ks.Control() }
func (k keys) warmth() string               { return k.ks.Warmth() }

// queueOwner is the engine whose stream queue is ("" for the shared one).
func (k keys) queueOwner(queue string) string {
	id, _ := k.ks.QueueOwner(queue)
	return id
}

// Output stream entry kinds (field "k").
const (
	kindAccepted = "a" // an engine took the request: "e" engine, "f" fence
	kindDelta    = "d" // "s" seq, "x" text, "t" tokens
	kindFinal    = "f" // "j" wireFinal
	kindRefused  = "r" // "j" wireError: Submit's refusal, terminal
)

// Queue stream entry fields.
const (
	fieldKey     = "k" // the request key (rk)
	fieldGateway = "g" // the submitting gateway's id
	fieldRequest = "r" // JSON wireRequest (wirereq.go)
	fieldVersion = "v" // its wire version ("": 0, engine.Request's JSON)
	// A request whose deltas go to a gateway's stream log (LogTarget):
	// its key, cap and TTL in ms. They are fields of the entry, not of
	// the request's body, so that even a request that does not decode is
	// refused where its gateway reads.
	fieldLog    = "l"
	fieldLogMax = "lm"
	fieldLogTTL = "lt"
	// "1": the submission claimed the log (keyspace LogOwner): the
	// engine appends only while the claim is its request's. Entries of
	// gateways that do not claim lack it.
	fieldLogOwned = "lo"
)

// Results of the append script.
const (
	appendOK        = 0
	appendCancelled = 1 // appended, and the request's cancel flag is set
	appendFenced    = -1
	appendDone      = -2
	appendLogEnded  = -3 // the stream log ends with a done record, or is no longer the request's: nobody reads on
)

// acquireScript makes the caller the owner of request KEYS[1] unless it is
// done: it bumps the fence, which invalidates every earlier owner's writes.
// ARGV: engine id, TTL in ms. Returns {fence, cancel flag}, or {-2, 0} when
// the request is already done.
var acquireScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'done') == 1 then return {-2, 0} end
local f = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {f, redis.call('HEXISTS', KEYS[1], 'cancel')}
`)

// appendScript appends one entry to output stream KEYS[2] of request
// KEYS[1], only while ARGV[1] is the request's fence and it is not done.
// It notifies the gateway the request's record names ("gw": the one that
// submitted it, or the one that attached to it since, Client.Attach).
// A delta carries its order (ARGV[6], outOrder; "0" for other entries):
// one whose order is not above the last the record holds is a retry of an
// append that reached Redis though its answer was lost (a primary that
// failed over after replicating it), and is not written again. The record
// and the entry change in one script, so a replica holds both or neither.
// ARGV: fence, "1" when the entry is the last one, TTL in ms, the gateway
// channels' prefix, the notification payload, the delta's order, then
// field/value pairs.
var appendScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return -1 end
if redis.call('HEXISTS', KEYS[1], 'done') == 1 then return -2 end
local order = tonumber(ARGV[6])
if order > 0 and order <= tonumber(redis.call('HGET', KEYS[1], 'order') or '0') then
  return redis.call('HEXISTS', KEYS[1], 'cancel')
end
if order > 0 then redis.call('HSET', KEYS[1], 'order', ARGV[6]) end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 7))
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'done', '1') end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local gw = redis.call('HGET', KEYS[1], 'gw')
if gw then redis.call('PUBLISH', ARGV[4] .. gw, ARGV[5]) end
return redis.call('HEXISTS', KEYS[1], 'cancel')
`)

// logAppendScript appends one delta to stream log KEYS[3] of request
// KEYS[1] (output stream KEYS[2]), under the fence as appendScript does.
// The entry's id is the delta's seq, the protocol's numbering, so the log
// is the one stream that both the gateway reading the generation and
// every resume read. A seq the log already holds (a retry of an append
// that reached Redis) is not written again; a log that ends with a done
// record (a gateway's crash recovery ended the reply) takes nothing more.
// When the submission claimed the log (KEYS[4] names the request key
// that owns it), only that request appends: a newer submission of the
// same request id, or the gateway that ended the reply, took the claim.
// It runs for every delta, so it is lean: one read of the record, a plain
// XADD (which refuses an id not above the log's last: only then is the
// log's end read), the TTLs renewed only when asked.
// The XADD has no MAXLEN: while a request runs its log is the only copy
// of its reply, which a takeover (gateway or engine) reads from delta 1,
// so nothing of it may be trimmed. Its length is bounded all the same:
// one entry per delta, at most one delta per generated token, so no more
// than the request's token budget (max_tokens, or what its context
// leaves), and the gateway's done record applies the cap once the reply
// is stored.
// ARGV: fence, TTL in ms, the gateway channels' prefix, the request key
// (the notification payload), seq, the log's TTL in ms, "1" to renew the
// TTLs, "1" when the log is claimed, then field/value pairs.
var logAppendScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'fence', 'done', 'gw', 'cancel')
if r[1] ~= ARGV[1] then return -1 end
if r[2] then return -2 end
if ARGV[8] == '1' and redis.call('GET', KEYS[4]) ~= ARGV[4] then return -3 end
local ok = redis.pcall('XADD', KEYS[3], ARGV[5] .. '-0', unpack(ARGV, 9))
if type(ok) == 'table' and ok.err then
  if not string.find(ok.err, 'equal or smaller', 1, true) then return ok end
  local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if #top > 0 and top[1][2][1] == 'done' then return -3 end
end
if ARGV[7] == '1' then
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  if ARGV[8] == '1' then redis.call('PEXPIRE', KEYS[4], ARGV[6]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
if r[3] then redis.call('PUBLISH', ARGV[3] .. r[3], ARGV[4]) end
if r[4] then return 1 end
return 0
`)

// Stream log entry fields, as the gateway reads them: "d" the text;
// the engine adds "t" the tokens and "l" the log probabilities, which
// only a takeover reads. The done record, the gateway's, has "done".
const (
	logText     = "d"
	logTokens   = "t"
	logLogprobs = "l"
	logDone     = "done"
)

// decodeLogDelta decodes a stream log entry the engine wrote; ok is
// false for the done record.
func decodeLogDelta(m redis.XMessage) (ev engine.Event, ok bool, err error) {
	if _, done := m.Values[logDone]; done {
		return engine.Event{}, false, nil
	}
	ms, _, _ := strings.Cut(m.ID, "-")
	seq, err := strconv.Atoi(ms)
	if err != nil {
		return ev, false, fmt.Errorf("cluster: log entry id %q", m.ID)
	}
	toks, err := decodeTokens(str(m.Values, logTokens))
	if err != nil {
		return ev, false, err
	}
	ev = engine.Event{Seq: seq, Tokens: toks, Text: str(m.Values, logText)}
	if l := str(m.Values, logLogprobs); l != "" {
		if err := json.Unmarshal([]byte(l), &ev.Logprobs); err != nil {
			return ev, false, fmt.Errorf("cluster: log entry %s logprobs: %w", m.ID, err)
		}
	}
	return ev, true, nil
}

// wireError is an error crossing Redis: engine errors keep their code.
type wireError struct {
	Code      string `json:"code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Temporary bool   `json:"temporary,omitempty"`
	// Closed marks engine.ErrClosed (the engine stopped).
	Closed bool `json:"closed,omitempty"`
}

func toWireError(err error) *wireError {
	if err == nil {
		return nil
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return &wireError{Code: ee.Code, Reason: ee.Reason, Message: ee.Message, Temporary: ee.Temporary}
	}
	if errors.Is(err, engine.ErrClosed) {
		return &wireError{Closed: true, Message: err.Error()}
	}
	return &wireError{Code: engine.CodeInternal, Message: err.Error()}
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	if w.Closed {
		return &UnavailableError{Reason: "the engine stopped: " + w.Message}
	}
	return &engine.Error{Code: w.Code, Reason: w.Reason, Message: w.Message, Temporary: w.Temporary}
}

// wireFinal is engine.Final crossing Redis (per-token gaps are dropped:
// they are the engine's metrics, not the client's).
type wireFinal struct {
	Reason          string       `json:"reason"`
	Usage           engine.Usage `json:"usage"`
	Queue           int64        `json:"queue_ns,omitempty"`
	TTFT            int64        `json:"ttft_ns,omitempty"`
	Total           int64        `json:"total_ns,omitempty"`
	TokensPerSecond float64      `json:"tps,omitempty"`
	AcceptedPerStep float64      `json:"aps,omitempty"`
	Preemptions     int          `json:"preemptions,omitempty"`
	Drafted         int          `json:"drafted,omitempty"`
	Accepted        int          `json:"accepted,omitempty"`
	Seed            uint64       `json:"seed,omitempty"`
	Dropped         int          `json:"dropped,omitempty"`
	Err             *wireError   `json:"err,omitempty"`
}

func toWireFinal(f *engine.Final) wireFinal {
	return wireFinal{
		Reason: f.FinishReason, Usage: f.Usage,
		Queue: int64(f.Stats.Queue), TTFT: int64(f.Stats.TTFT), Total: int64(f.Stats.Total),
		TokensPerSecond: f.Stats.TokensPerSecond, AcceptedPerStep: f.Stats.AcceptedPerStep,
		Preemptions: f.Stats.Preemptions, Drafted: f.Stats.Drafted, Accepted: f.Stats.Accepted, Seed: f.Stats.Seed, Dropped: f.DroppedMessages, Err: toWireError(f.Err),
	}
}

func (w wireFinal) final() *engine.Final {
	return &engine.Final{
		FinishReason: w.Reason, Usage: w.Usage,
		Stats: engine.Stats{
			Queue: time.Duration(w.Queue), TTFT: time.Duration(w.TTFT), Total: time.Duration(w.Total),
			TokensPerSecond: w.TokensPerSecond, AcceptedPerStep: w.AcceptedPerStep, Preemptions: w.Preemptions,
			Drafted: w.Drafted, Accepted: w.Accepted, Seed: w.Seed,
		},
		DroppedMessages: w.Dropped,
		Err:             w.Err.err(),
	}
}

// encodeTokens writes ids as decimal, comma-separated: compact for small
// vocabularies and readable in redis-cli.
func encodeTokens(ids []int32) string {
	b := make([]byte, 0, len(ids)*6)
	for i, t := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(t), 10)
	}
	return string(b)
}

func decodeTokens(s string) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int32, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("cluster: token %d of %q: %w", i, s, err)
		}
		out[i] = int32(v)
	}
	return out, nil
}

// outEntry is one decoded output stream entry.
type outEntry struct {
	ID     string
	Kind   string
	Engine string // accepted
	Event  engine.Event
	Refuse error // refused
}

func str(v map[string]any, k string) string {
	s, _ := v[k].(string)
	return s
}

// decodeOut decodes an output stream entry. Unknown kinds are an error:
// they mean a newer writer, and skipping them could lose text.
func decodeOut(m redis.XMessage) (outEntry, error) {
	e := outEntry{ID: m.ID, Kind: str(m.Values, "k")}
	switch e.Kind {
	case kindAccepted:
		e.Engine = str(m.Values, "e")
	case kindDelta:
		seq, err := strconv.Atoi(str(m.Values, "s"))
		if err != nil {
			return e, fmt.Errorf("cluster: delta %s seq: %w", m.ID, err)
		}
		toks, err := decodeTokens(str(m.Values, "t"))
		if err != nil {
			return e, err
		}
		e.Event = engine.Event{Seq: seq, Tokens: toks, Text: str(m.Values, "x")}
		if l := str(m.Values, "l"); l != "" { // log probabilities, when asked for
			if err := json.Unmarshal([]byte(l), &e.Event.Logprobs); err != nil {
				return e, fmt.Errorf("cluster: delta %s logprobs: %w", m.ID, err)
			}
		}
	case kindFinal:
		var w wireFinal
		if err := json.Unmarshal([]byte(str(m.Values, "j")), &w); err != nil {
			return e, fmt.Errorf("cluster: final %s: %w", m.ID, err)
		}
		e.Event = engine.Event{Final: w.final()}
	case kindRefused:
		var w wireError
		if err := json.Unmarshal([]byte(str(m.Values, "j")), &w); err != nil {
			return e, fmt.Errorf("cluster: refusal %s: %w", m.ID, err)
		}
		e.Refuse = w.err()
	default:
		return e, fmt.Errorf("cluster: output entry %s of unknown kind %q", m.ID, e.Kind)
	}
	return e, nil
}

// UnavailableError says a request could not be placed or finished because
// Redis or every engine was unreachable. It matches engine.ErrClosed with
// errors.Is, so the gateway reports the protocol's "unavailable" code, and
// retrying later may succeed.
type UnavailableError struct {
	Reason string
	Err    error // the cause, when there is one
}

func (e *UnavailableError) Error() string {
	s := "cluster: unavailable: " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap gives the cause and engine.ErrClosed.
func (e *UnavailableError) Unwrap() []error {
	if e.Err == nil {
		return []error{engine.ErrClosed}
	}
	return []error{engine.ErrClosed, e.Err}
}

// Temporary reports that retrying later may succeed.
func (e *UnavailableError) Temporary() bool { return true }
