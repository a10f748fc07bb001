// Package cluster runs specgate's request path over Redis, so gateways and
// engines can be separate processes on separate machines.
//
// The gateway side is Client: an engine.Generator, like the in-process
// engine (with engine.Readier and engine.SessionWarmer), and the same
// conformance suite (gateway/generatortest) runs against both. The engine
// side is RunEngine: it feeds requests from Redis to a local engine and
// writes the results back; the engine tokenizes text prompts there. This package imports the engine API
// but never the gateway: dependencies point gateway → engine.
//
// # Keys
//
// Every key starts with the deployment's prefix P (gateway.Options.Prefix);
// internal/keyspace names them all, with their hash tags:
//
//	P cl:{nodes}              ZSET  "<role>/<id>" → heartbeat expiry (unix ms)
//	P cl:{nodes}:<role>/<id>  STRING JSON NodeInfo, with a TTL (the heartbeat)
//	P cl:q:{e:<engine>}       STREAM routed requests of one engine
//	P cl:q:{shared}           STREAM requests any engine may take
//	P cl:queues               SET   every request stream ever written to
//	P cl:req:{r:<key>}        HASH  fence, owner, done, cancel, gw of one request
//	P cl:req:{r:<key>}:out    STREAM the request's accepted/delta/final entries
//	<log>:cl:<key>            HASH  the same, for a request with a stream log
//	<log>:cl:<key>:out        STREAM its accepted/final entries; deltas go to <log>
//	P cl:gw:<gateway>         pub/sub channel: "entry appended for <key>"
//	P cl:ctl                  pub/sub channel: "cancel <key>"
//	P cl:warm                 pub/sub channel: sessions with live clients (warmth.go)
//
// <key> is the engine request id plus a random suffix, unique per Submit, so
// a request id reused after its request ended never meets old state.
//
// On a Redis Cluster the tags spread the streams over slots by engine and
// by request; each script and transaction touches one slot: a request's
// record with its output (and its stream log, on whose slot, the
// session's, both then live), the node directory with its heartbeats.
//
// # One delta stream
//
// A gateway that keeps a stream log per chat request (the log that
// session.resume reads; internal/keyspace RequestLog) submits with
// SubmitToLog: the engine then appends each delta to that log itself,
// entry id "<seq>-0" with the protocol's seq (1, 2, ... for the deltas
// with text; tokens that make no text yet wait for the next that does),
// fields "d" text, "t" tokens, "l" log probabilities. The output stream
// keeps only accepted and final entries. So each delta crosses Redis
// once, under one numbering, and is in Redis before any gateway reads it:
// the gateway running the turn reads the deltas back from the log and
// writes only the done record after them. The log's key, cap and TTL ride
// in the queue entry (fields "l", "lm", "lt"; wire version 2, which an
// engine of an earlier version refuses rather than write the deltas
// where nobody reads them). A log that ends with a done record (the
// gateway's crash recovery ended the reply) takes no more deltas, and the
// engine stops the request. A log has one owner: SubmitToLog empties it
// and claims it for its request key (keyspace LogOwner, entry field
// "lo"), and an engine appends only while its request holds the claim,
// so a stale submission of the same request id (given up on, its cancel
// lost) can neither write into the new reply nor be read as part of it.
// The gateway that stores the reply seals the log first (Stream.Seal):
// it releases the claim, which stops the engine at its next delta, and
// takes the deltas written since its last read, so the stored reply is
// exactly the log's deltas and the done record follows the last. An engine appends the deltas of all its logged
// requests in rounds, one pipeline per Redis primary with one replica
// WAIT, rather than a round trip and a WAIT per delta (deltas.go).
//
// # Routing
//
// Engines heartbeat every second (NodeInfo: load, capacity, free KV blocks).
// A gateway routes a request by rendezvous hashing of "tenant/session" over
// the live engines: the highest hash wins, so a conversation's next turn
// goes where its prefix is cached, and when an engine joins or leaves only
// the sessions it wins or held move. When the winner is saturated (load ≥
// capacity) the least-loaded unsaturated engine takes the request instead;
// when every engine is saturated, or none is live, the request goes to the
// shared stream, which every engine reads when it has a free slot. One
// stream per engine (rather than one shared stream) is what makes affinity
// hold: an engine reads only its own stream and the shared one.
//
// Engines read with XREADGROUP in one consumer group ("engines"), each
// engine its own consumer, and take no more entries than they have free
// slots. An entry stays pending until its request's final entry is written;
// then it is acknowledged and deleted, so an idle cluster has empty streams
// and empty pending lists.
//
// # Output, fencing and failover
//
// An engine that takes an entry first acquires the request (Lua): it bumps
// the request's fence and becomes owner, unless the request is already done.
// Every entry it then appends to the request's output stream goes through a
// second script that appends only while the writer's fence is the current
// one and the request is not done, and marks it done with the final entry.
// So a zombie engine (paused, partitioned, presumed dead) can write nothing
// after another engine took over, and a request ends exactly once.
//
// A running engine refreshes its pending entries (XCLAIM to itself with
// JUSTID, which resets their idle time) every ClaimInterval. An engine with
// free slots runs XAUTOCLAIM over every request stream with ClaimTimeout as
// the minimum idle time, so the entries of a dead engine move to a live one
// after ClaimTimeout; it also reads the never-delivered entries of a dead
// engine's stream. The new owner reads the output stream (or the stream
// log), takes the tokens of every delta as Request.Generated, and
// resubmits: the engine re-prefills prompt plus generated tokens and
// numbers its deltas after them (a logged request's seq goes on after the
// log's last), so the client's text continues with no gap and no
// duplicate. Engines never trim the log of a running request (its cap
// applies with the gateway's done record), so every reply, however long,
// can be taken over; a log that lost entries anyway (a Redis failover)
// cannot give the tokens back: the request then ends with an error. A
// request that was
// taken over MaxAttempts times ends with an error instead of killing more
// engines.
//
// Deltas are written only with the tokens that produced their text (text
// the engine emits early while it holds tokens back for a stop string waits
// for those tokens), so Generated always accounts for every character the
// client saw.
//
// The gateway side reads the output stream with XRANGE after the last entry
// it saw (a logged request: the output, then the log after the last seq,
// in one round trip; a final is passed on once the log is read to its end,
// so it comes after every delta). A notification on the channel of the gateway the request's record
// names (gw; published by the append script) wakes it at once; a poll every
// PollInterval covers notifications lost while Redis was unreachable.
//
// A request outlives its gateway: Client.Handle names it (its key, and
// its log's), and
// when that gateway dies another one Attaches to it by that name, which
// points gw at itself, and reads the output from its first entry.
//
// # Cancels
//
// Cancel sets the request's cancel flag and publishes on the control
// channel; the owning engine cancels at once. Because pub/sub loses messages
// while a connection is down, the flag is also checked when an engine
// acquires the request, on every append, and on every refresh.
//
// # Redis outages
//
// Submit fails with an *UnavailableError (errors.Is engine.ErrClosed, so
// the gateway reports the protocol's "unavailable" code) when it cannot
// place the request. A stream already running keeps retrying its reads, and
// an engine keeps retrying its appends (the local stream coalesces the
// backlog), for up to IdleTimeout; nothing is lost because every write is
// an append that is retried until Redis takes it.
package cluster
