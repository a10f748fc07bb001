package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/internal/durable"
	"github.com/specgate/specgate/internal/keyspace"
)

// streamLog is the per-request log of deltas in a Redis stream, read by
// session.resume on any gateway. Entry ids are "<seq>-0", so a resume after
// seq n is an exclusive XRANGE from "n-0": no gap, no duplicate. The last
// entry is the done record (id lastSeq+1). The stream is capped (MAXLEN ~)
// and expires, so an abandoned request costs nothing forever.
type streamLog struct {
	rdb    redis.UniversalClient
	ks     keyspace.Space
	w      *durable.Writer // appends wait for replicas
	maxLen int64
	ttl    time.Duration
	// sent, when set, sees the log writer's appends go out (logwriter.go).
	sent *sentTracker
}

func (l *streamLog) key(sid, rid string) string {
	return l.ks.RequestLog(sid, rid)
}

// logEntry is one decoded entry.
type logEntry struct {
	Seq  int
	Text string
	Done *ServerFrame // the done frame, on the last entry
}

// appendScript adds deltas after the log's newest entry: a delta whose seq
// is already there (a retried batch that half reached Redis) is skipped,
// and a log that ends with a done record (crash recovery finalized the
// turn) takes nothing more and answers 0. The TTL is renewed with every
// batch, so a log outlives its request by ttl. KEYS: the log. ARGV: max
// length, ttl ms, seq and text of each delta.
var appendScript = redis.NewScript(`
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local last = 0
if #top > 0 then
  if top[1][2][1] == 'done' then return 0 end
  last = tonumber(string.match(top[1][1], '^(%d+)'))
end
for i = 3, #ARGV - 1, 2 do
  if tonumber(ARGV[i]) > last then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[i] .. '-0', 'd', ARGV[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// appendDeltas adds deltas (in seq order) to the log; open is false when
// the log was already ended by a done record.
func (l *streamLog) appendDeltas(ctx context.Context, sid, rid string, deltas []logEntry) (open bool, err error) {
	args := l.appendArgs(deltas)
	// Through the durable writer: a delta counts as logged once a replica
	// holds it too, so a primary's failover cannot take it back.
	n, err := l.w.Run(ctx, appendScript, []string{l.key(sid, rid)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("gateway: append deltas %d.. of %s: %w", deltas[0].Seq, rid, err)
	}
	return n == 1, nil
}

// appendDone adds the done record after the last delta (seq lastSeq).
func (l *streamLog) appendDone(ctx context.Context, sid, rid string, lastSeq int, done ServerFrame) error {
	key := l.key(sid, rid)
	b, _ := json.Marshal(done)
	err := l.w.Pipelined(ctx, key, func(p redis.Pipeliner) {
		p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: strconv.Itoa(lastSeq+1) + "-0", MaxLen: l.maxLen, Approx: true, Values: []any{"done", string(b)}})
		p.PExpire(ctx, key, l.ttl)
	})
	if err != nil {
		return fmt.Errorf("gateway: append done of %s: %w", rid, err)
	}
	return nil
}

func decodeEntries(msgs []redis.XMessage) ([]logEntry, error) {
	out := make([]logEntry, 0, len(msgs))
	for _, m := range msgs {
		ms, _, _ := strings.Cut(m.ID, "-")
		seq, err := strconv.Atoi(ms)
		if err != nil {
			return nil, fmt.Errorf("gateway: log entry id %q", m.ID)
		}
		e := logEntry{Seq: seq}
		if d, ok := m.Values["done"].(string); ok {
			var f ServerFrame
			if err := json.Unmarshal([]byte(d), &f); err != nil {
				return nil, fmt.Errorf("gateway: log done entry: %w", err)
			}
			e.Done = &f
		} else {
			e.Text, _ = m.Values["d"].(string)
		}
		out = append(out, e)
	}
	return out, nil
}

// readAfter returns up to count entries with seq > after (count <= 0:
// all of them).
func (l *streamLog) readAfter(ctx context.Context, sid, rid string, after int, count int64) ([]logEntry, error) {
	var msgs []redis.XMessage
	var err error
	if count <= 0 {
		msgs, err = l.rdb.XRange(ctx, l.key(sid, rid), "("+strconv.Itoa(after)+"-0", "+").Result()
	} else {
		msgs, err = l.rdb.XRangeN(ctx, l.key(sid, rid), "("+strconv.Itoa(after)+"-0", "+", count).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: read log of %s: %w", rid, err)
	}
	return decodeEntries(msgs)
}

// waitAfter blocks up to block for entries with seq > after; none is not
// an error.
func (l *streamLog) waitAfter(ctx context.Context, sid, rid string, after int, count int64, block time.Duration) ([]logEntry, error) {
	res, err := l.rdb.XRead(ctx, &redis.XReadArgs{
		Streams: []string{l.key(sid, rid), strconv.Itoa(after) + "-0"},
		Count:   count,
		Block:   block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: wait on log of %s: %w", rid, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return decodeEntries(res[0].Messages)
}

// first returns the seq of the oldest entry, 0 when the log is empty.
func (l *streamLog) first(ctx context.Context, sid, rid string) (int, error) {
	msgs, err := l.rdb.XRangeN(ctx, l.key(sid, rid), "-", "+", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("gateway: read log of %s: %w", rid, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	es, err := decodeEntries(msgs)
	if err != nil {
		return 0, err
	}
	return es[0].Seq, nil
}

// last returns the newest entry, nil when the log is empty.
func (l *streamLog) last(ctx context.Context, sid, rid string) (*logEntry, error) {
	msgs, err := l.rdb.XRevRangeN(ctx, l.key(sid, rid), "+", "-", 1).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: read log of %s: %w", rid, err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	es, err := decodeEntries(msgs)
	if err != nil {
		return nil, err
	}
	return &es[0], nil
}

// logBatch is deltas for one log; logResult what became of them.
type logBatch struct {
	sid, rid string
	key      string // the log's key; empty: appendBatches works it out
	entries  []logEntry
	// mark is closed once the batch's bytes are written to Redis (nil:
	// nobody waits for that).
	mark *sentMark
	// expire: renew the log's TTL with this batch.
	expire bool
}

type logResult struct {
	open bool // false: the log already ended with a done record
	err  error
}

// appendBatches appends each batch to its log with one pipeline per Redis
// primary (one replica WAIT each) rather than a round trip per batch.
func (l *streamLog) appendBatches(ctx context.Context, bs []logBatch) []logResult {
	res := make([]logResult, len(bs))
	groups := map[string][]int{} // primary → batches
	var order []string
	cc, isCluster := l.rdb.(*redis.ClusterClient)
	for i := range bs {
		b := &bs[i]
		if b.key == "" {
			b.key = l.key(b.sid, b.rid)
		}
		node := ""
		if isCluster {
			m, err := cc.MasterForKey(ctx, b.key)
			if err != nil {
				res[i].err = fmt.Errorf("gateway: primary of the log of %s: %w", b.rid, err)
				continue
			}
			node = m.Options().Addr
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	failed := false
	for _, node := range order {
		l.appendGroup(ctx, bs, groups[node], res)
		for _, i := range groups[node] {
			failed = failed || res[i].err != nil
		}
	}
	if failed && isCluster {
		// The appends go to primaries' own connections, past the
		// client's redirect handling: after a failover only a reload
		// makes MasterForKey name the promoted replica.
		cc.ReloadState(ctx)
	}
	return res
}

// appendGroup pipelines the batches idx, whose logs share a primary.
//
// A batch of one delta, the steady state, is a plain XADD with the
// delta's id: the log holds every earlier delta of the turn (a queue's
// entries leave it only once appended, and one log is never in two rounds
// at once), so the XADD fails exactly when its id is already there,
// either a half-applied earlier attempt or the done record with which
// crash recovery ended the log. Only then, and for a backlog of several
// deltas, does the append script run, which tells the two apart; the
// script costs Redis about ten times the XADD.
//
// The group ends with a command carrying the sent tracker's tag, so the
// write that carries it has carried every append before it (the writer
// releases deltas to clients then). The script goes as its body (EVAL),
// never only its hash: a NOSCRIPT answer (a fresh or newly promoted
// primary) would have let clients see deltas that Redis then did not
// append. Redis keeps the compiled script; the body costs bytes on the
// wire, not a compile.
func (l *streamLog) appendGroup(ctx context.Context, bs []logBatch, idx []int, res []logResult) {
	var tag string
	if l.sent != nil {
		var marks []*sentMark
		for _, i := range idx {
			if bs[i].mark != nil {
				marks = append(marks, bs[i].mark)
			}
		}
		if len(marks) > 0 {
			tag = l.sent.add(marks)
			defer l.sent.drop(tag)
		}
	}
	first := bs[idx[0]].key
	cmds := make([]redis.Cmder, len(idx))
	err := l.w.Pipelined(ctx, first, func(p redis.Pipeliner) {
		for j, i := range idx {
			b := &bs[i]
			key := b.key
			if len(b.entries) == 1 {
				e := b.entries[0]
				// XAdd with XAddArgs, built by hand: a round makes one
				// per delta, and the generic builder's argument slice,
				// argument struct and values slice were a third of the
				// gateway's garbage per delta.
				cmd := redis.NewStringCmd(ctx, "xadd", key, "maxlen", "~", l.maxLen, strconv.Itoa(e.Seq)+"-0", "d", e.Text)
				_ = p.Process(ctx, cmd)
				cmds[j] = cmd
				if b.expire {
					p.PExpire(ctx, key, l.ttl)
				}
			} else {
				cmds[j] = appendScript.Eval(ctx, p, []string{key}, l.appendArgs(b.entries)...)
			}
		}
		if tag != "" {
			// Same slot as the group's first log (its hash tag): a
			// cluster pipeline sends it to the same primary, last.
			p.Exists(ctx, first, first+":"+tag)
		}
	})
	var again []int // XADDs refused: already there, or the log was ended
	for j, i := range idx {
		if cmds[j] == nil { // the pipeline never started
			res[i].err = fmt.Errorf("gateway: append deltas %d.. of %s: %w", bs[i].entries[0].Seq, bs[i].rid, err)
			continue
		}
		cerr := cmds[j].Err()
		if _, ok := cmds[j].(*redis.StringCmd); ok && cerr != nil && strings.Contains(cerr.Error(), "equal or smaller") {
			again = append(again, i)
			continue
		}
		if cerr == nil {
			cerr = groupErr(err)
		}
		if cerr != nil {
			res[i].err = fmt.Errorf("gateway: append deltas %d.. of %s: %w", bs[i].entries[0].Seq, bs[i].rid, cerr)
			continue
		}
		if c, ok := cmds[j].(*redis.Cmd); ok {
			n, _ := c.Int()
			res[i].open = n == 1
		} else {
			res[i].open = true
		}
	}
	if len(again) > 0 {
		l.appendScripted(ctx, bs, again, res)
	}
}

// groupErr is what a pipeline's error says of a command that itself
// succeeded. A Redis reply is another command's refusal (the pipeline
// reports the first one) and says nothing of this command's write, which
// landed; anything else (the connection, the replicas' WAIT) fails every
// command of the pipeline.
func groupErr(err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil
	}
	return err
}

// appendScripted runs the append script for the batches idx (one primary).
func (l *streamLog) appendScripted(ctx context.Context, bs []logBatch, idx []int, res []logResult) {
	cmds := make([]*redis.Cmd, len(idx))
	err := l.w.Pipelined(ctx, bs[idx[0]].key, func(p redis.Pipeliner) {
		for j, i := range idx {
			cmds[j] = appendScript.Eval(ctx, p, []string{bs[i].key}, l.appendArgs(bs[i].entries)...)
		}
	})
	for j, i := range idx {
		var n int
		cerr := err
		if cmds[j] != nil {
			if n, cerr = cmds[j].Int(); cerr == nil {
				cerr = groupErr(err)
			}
		}
		if cerr != nil {
			res[i].err = fmt.Errorf("gateway: append deltas %d.. of %s: %w", bs[i].entries[0].Seq, bs[i].rid, cerr)
			continue
		}
		res[i].open = n == 1
	}
}

func (l *streamLog) appendArgs(deltas []logEntry) []any {
	args := make([]any, 0, 2+2*len(deltas))
	args = append(args, l.maxLen, l.ttl.Milliseconds())
	for _, d := range deltas {
		args = append(args, d.Seq, d.Text)
	}
	return args
}
