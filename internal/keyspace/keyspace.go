// Package keyspace names every Redis key and channel specgate uses, in one
// place, so that the same code runs on one Redis, on a Redis Cluster and
// behind Sentinel.
//
// On a cluster, a Lua script, a MULTI and a multi-key command must touch
// keys of one hash slot only (else CROSSSLOT). A key's slot is the hash of
// its hash tag, the part between the first "{" and the next "}". So every
// key here carries a tag naming the unit that a script or a turn touches
// as a whole:
//
//	{s:<session>}   a session: record, history, request records, delta logs
//	{u:<tenant>:<user>}  one user's session index
//	{tenants}       the tenant directory: records, id set, kid index (one
//	                slot because a kid must be unique across tenants,
//	                checked in the same script that writes the record)
//	{t:<tenant>}    a tenant's rate-limit leases and token counters
//	{nodes}         the live-node directory: heartbeats and their index
//	{e:<engine>}    one engine's request stream ({shared}: the shared one)
//	{r:<request>}   one cluster request: fence record and output stream
//
// Sessions, users, tenants, engines and requests each spread over slots,
// so a cluster shares the load of many of them; only the small directories
// of tenants and nodes sit on one slot each.
//
// Every key starts with the deployment's prefix P ("" in production; tests
// use a private one). The prefix goes before the key, outside any tag.
//
// # Every key
//
// Sessions (gateway):
//
//	P sess:{s:<sid>}                  HASH   tenant, user, title, created, updated, system, params
//	P sess:{s:<sid>}:msgs             LIST   JSON messages, oldest first (the live path)
//	P sess:{s:<sid>}:alts             HASH   branch point → stored versions (regenerate, edit)
//	P sess:{s:<sid>}:req:<rid>        HASH   state running|done; expires
//	P sess:{s:<sid>}:req:<rid>:log    STREAM the request's deltas; capped, expires
//	P sess:{s:<sid>}:req:<rid>:log:cl:<key>      HASH   split mode: fence record of the
//	                                             cluster request writing the log
//	P sess:{s:<sid>}:req:<rid>:log:cl:<key>:out  STREAM its accepted/final entries
//	P sess:{s:<sid>}:req:<rid>:log:owner         STRING split mode: the key of the one
//	                                             cluster request that may append to the log
//	P idx:{u:<tenant>:<user>}         ZSET   session id → last activity (ms)
//	P {turns}:running                 ZSET   "<sid> <rid>" → owner's lease deadline (ms)
//
// A user's index lives on its own slot, so it is written after the session
// in a separate command and its readers skip entries whose session is gone.
//
// Tenants (tenants):
//
//	P {tenants}:tenant:<id>           STRING JSON tenant record
//	P {tenants}:ids                   SET    every tenant id
//	P {tenants}:kid:<kid>             STRING id of the tenant owning signing key kid
//	P rl:{t:<tenant>}:conns|reqs      ZSET   leases: holder → expiry (ms)
//	P rl:{t:<tenant>}:tpm:<minute>    STRING tokens counted in one minute; expires
//
// Scale-out (cluster):
//
//	P cl:{nodes}                      ZSET   "<role>/<id>" → heartbeat expiry (ms)
//	P cl:{nodes}:<role>/<id>          STRING JSON NodeInfo; expires (the heartbeat)
//	P cl:q:{e:<engine>}               STREAM requests routed to one engine
//	P cl:q:{shared}                   STREAM requests any engine may take
//	P cl:queues                       SET    every request stream written to
//	P cl:req:{r:<key>}                HASH   fence, owner, done, cancel; expires
//	P cl:req:{r:<key>}:out            STREAM accepted/delta/final entries; expires
//	P cl:gw:<gateway>                 channel "output of <key> grew"
//	P cl:ctl                          channel "cancel <key>"
//	P gw:ctl                          channel gateways' cancels and their acks (JSON)
//
// Schema (migrations):
//
//	P schema:version                  STRING the applied migration number
//	P schema:created                  STRING unix time of the first migration
//	P schema:lock                     STRING held while migrations run; expires
//
// Identifiers inside a tag are escaped (Tag), so a client-chosen id holding
// "{" or "}" cannot move a key to another slot than its siblings.
package keyspace

import "strings"

// Space names the keys of one deployment: everything under one prefix.
type Space struct{ prefix string }

// New returns the keyspace under prefix. The prefix must not hold "{" or
// "}" (it would change every key's slot).
func New(prefix string) Space { return Space{prefix: prefix} }

// Prefix is the key prefix of the space.
func (s Space) Prefix() string { return s.prefix }

// Tag escapes id for use inside a hash tag: "%" "{" "}" become "%25" "%7B"
// "%7D". The escape is one-to-one, so distinct ids stay distinct keys.
func Tag(id string) string {
	if !strings.ContainsAny(id, "%{}") {
		return id
	}
	return tagEscaper.Replace(id)
}

var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// Session is the session's record.
func (s Space) Session(sid string) string { return s.prefix + "sess:{s:" + Tag(sid) + "}" }

// Messages is the session's history.
func (s Space) Messages(sid string) string { return s.Session(sid) + ":msgs" }

// Branches holds the session's stored versions of regenerated or edited
// turns, by branch point.
func (s Space) Branches(sid string) string { return s.Session(sid) + ":alts" }

// Request is the record of chat request rid in session sid.
func (s Space) Request(sid, rid string) string { return s.Session(sid) + ":req:" + rid }

// RequestLog is the delta log of chat request rid in session sid.
func (s Space) RequestLog(sid, rid string) string { return s.Request(sid, rid) + ":log" }

// RunningTurns indexes the chat turns being generated, "<sid> <rid>" →
// the deadline (unix ms) by which the gateway running the turn must renew
// it; past that, any gateway finalizes the turn from its log.
func (s Space) RunningTurns() string { return s.prefix + "{turns}:running" }

// UserIndex is (tenant, user)'s index of sessions by activity.
func (s Space) UserIndex(tenant, user string) string {
	return s.prefix + "idx:{u:" + Tag(tenant) + ":" + Tag(user) + "}"
}

// Tenant is tenant id's record.
func (s Space) Tenant(id string) string { return s.prefix + "{tenants}:tenant:" + id }

// TenantIDs is the set of every tenant id.
func (s Space) TenantIDs() string { return s.prefix + "{tenants}:ids" }

// KidPrefix is what Kid puts before a kid, for scripts that name kids
// given as arguments.
func (s Space) KidPrefix() string { return s.prefix + "{tenants}:kid:" }

// Kid names the owner of signing key kid.
func (s Space) Kid(kid string) string { return s.KidPrefix() + kid }

// Lease is the set of tenant's leases of kind (conns, reqs).
func (s Space) Lease(tenant, kind string) string {
	return s.prefix + "rl:{t:" + Tag(tenant) + "}:" + kind
}

// TokensPrefix is what the token counters of tenant start with; the script
// that keeps them appends the minute.
func (s Space) TokensPrefix(tenant string) string { return s.Lease(tenant, "tpm:") }

// Nodes is the index of live nodes.
func (s Space) Nodes() string { return s.prefix + "cl:{nodes}" }

// Node is the heartbeat of node member ("<role>/<id>").
func (s Space) Node(member string) string { return s.Nodes() + ":" + member }

// Queue is engine's request stream.
func (s Space) Queue(engine string) string { return s.prefix + "cl:q:{e:" + Tag(engine) + "}" }

// SharedQueue is the request stream any engine reads.
func (s Space) SharedQueue() string { return s.prefix + "cl:q:{shared}" }

// QueueOwner returns the engine whose stream queue is; false for the shared
// stream or a key that is no engine's stream.
func (s Space) QueueOwner(queue string) (string, bool) {
	rest, ok := strings.CutPrefix(queue, s.prefix+"cl:q:{e:")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return untag(strings.TrimSuffix(rest, "}")), true
}

func untag(t string) string {
	if !strings.Contains(t, "%") {
		return t
	}
	return strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%").Replace(t)
}

// Queues is the set of every request stream written to.
func (s Space) Queues() string { return s.prefix + "cl:queues" }

// ClusterRequest is the fence record of cluster request key rk.
func (s Space) ClusterRequest(rk string) string { return s.prefix + "cl:req:{r:" + Tag(rk) + "}" }

// LoggedClusterRequest is the fence record of cluster request key rk
// when the request appends its deltas to stream log log itself (split
// mode): on the log's slot, so that one script checks the fence and
// appends. Its output stream is ClusterOutputOf of it.
func (s Space) LoggedClusterRequest(log, rk string) string { return log + ":cl:" + Tag(rk) }

// LogOwner names the one cluster request key that may append to stream
// log log (split mode): each submission to the log claims it, so a stale
// one (a request id used again) can neither write into the new reply nor
// be read as part of it, and a gateway that ends the reply releases it,
// so no delta lands after the stored reply.
func (s Space) LogOwner(log string) string { return log + ":owner" }

// ClusterOutputOf is the output stream of the fence record rec.
func (s Space) ClusterOutputOf(rec string) string { return rec + ":out" }

// ClusterOutput is the output stream of cluster request key rk.
func (s Space) ClusterOutput(rk string) string { return s.ClusterRequest(rk) + ":out" }

// GatewayChannel is where engines tell gateway id that an output grew.
func (s Space) GatewayChannel(id string) string { return s.prefix + "cl:gw:" + id }

// GatewayControl is the channel on which gateways forward a client's
// cancel to the gateway running the turn, and acknowledge it.
func (s Space) GatewayControl() string { return s.prefix + "gw:ctl" }

// Control is the channel of cancels.
func (s Space) Control() string { return s.prefix + "cl:ctl" }

// Warmth is the channel on which gateways tell engines which sessions
// have a live client.
func (s Space) Warmth() string { return s.prefix + "cl:warm" }

// SchemaVersion holds the applied migration number. Its name predates the
// tagged layout and must never change: it is how a binary finds out what
// layout a Redis holds.
func (s Space) SchemaVersion() string { return s.prefix + "schema:version" }

// SchemaCreated holds when the keyspace was first migrated.
func (s Space) SchemaCreated() string { return s.prefix + "schema:created" }

// SchemaLock is held by the process applying migrations.
func (s Space) SchemaLock() string { return s.prefix + "schema:lock" }

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
