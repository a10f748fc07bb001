// Package gateway is specgate's front door: the WebSocket chat protocol
// (PROTOCOL.md), authentication of tenants' JWTs, sessions and their
// history in Redis, the per-request stream log that lets a client resume on
// any gateway, the session HTTP API, health and metrics.
//
// The split follows transport / connection / node: Connection owns a socket
// and its bounded write queue; client handles one authenticated socket's
// frames; Server (the node) owns generations (turns), which outlive the
// sockets that started them.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model/chat"
	"github.com/specgate/specgate/internal/durable"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/migrations"
	"github.com/specgate/specgate/tenants"
)

// Clock tells the time (JWT validation, timestamps). Tests pass a fake.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Options configure a Server. Redis and Generator are required; every other
// zero field takes the default noted on it.
type Options struct {
	// Redis holds sessions, tenants, rate limits and stream logs.
	Redis redis.UniversalClient
	// Generator runs generations: the in-process *engine.Engine, or the
	// cluster client. What it optionally implements (engine.Readier,
	// engine.SessionWarmer) is used.
	Generator engine.Generator
	// Prefix is put before every Redis key ("": none). Tests use it to
	// share one Redis.
	Prefix string
	// Audience is the JWT aud required unless a tenant sets its own
	// ("specgate").
	Audience string
	// Leeway is the clock skew allowed on exp/nbf/iat (30s).
	Leeway time.Duration
	// AuthTimeout is how long a socket without an Authorization header has
	// to send its auth frame (5s).
	AuthTimeout time.Duration
	// AdminToken guards /admin/v1/...; "" leaves the admin API off.
	AdminToken string
	// Registry receives the gateway's metrics and is served on /metrics
	// (a new registry). Pass the one the engine's metrics are in.
	Registry *prometheus.Registry
	// Clock is the time source (the wall clock).
	Clock Clock
	// Logger (slog.Default()).
	Logger *slog.Logger
	// MaxFrameBytes is the read limit of one WebSocket message (1 MiB).
	MaxFrameBytes int64
	// WriteQueueFrames and WriteQueueBytes bound a connection's write queue
	// (1024 frames, 4 MiB); a client over either is disconnected.
	WriteQueueFrames int
	WriteQueueBytes  int
	// MaxBatch caps the frames written in one WebSocket message (64).
	MaxBatch int
	// WriteTimeout bounds one write to a client (10s).
	WriteTimeout time.Duration
	// PingInterval is how often the server pings (25s); a client that
	// sends nothing, not even a pong, for PongWait (60s) is dropped.
	PingInterval time.Duration
	PongWait     time.Duration
	// LogMaxLen caps a request's stream log, in entries (~10000, trimmed
	// approximately); LogTTL is how long it lives after its last write (1h).
	LogMaxLen int64
	LogTTL    time.Duration
	// WaitReplicas is how many Redis replicas must hold a stored message
	// or a logged delta before it counts as written (WAIT), so that a
	// primary's failover (Redis Cluster, Sentinel) loses nothing a client
	// was shown. A primary with fewer replicas is waited on for the ones
	// it has: one server without replicas waits for none. Default 1; -1
	// never waits. A delta is sent to the client once its append is on
	// its way to Redis, without waiting for Redis or the replicas.
	WaitReplicas int
	// ResumePoll is how long one blocking read of a stream log waits before
	// checking the connection again (1s); ResumeIdle is how long a resume
	// waits for a running request's next entry before giving up (2m).
	ResumePoll time.Duration
	ResumeIdle time.Duration
	// PersistTimeout is how long the end of a turn keeps retrying to store
	// the assistant message while Redis is unreachable (15s).
	PersistTimeout time.Duration
	// TurnLease is how long a running turn may go without its gateway
	// renewing it (every fifth of it) before another gateway takes the
	// gateway for dead and finalizes the turn from its stream log (5s).
	// Recovery waits two renew intervals more, so a turn is finalized
	// within about 1.5 TurnLease of its gateway's death.
	TurnLease time.Duration
	// ControlTimeout is how long a gateway waits for another gateway to
	// acknowledge a cancel it forwarded before answering not_found (1s).
	ControlTimeout time.Duration
	// LeaseTTL is the lifetime of a connection or request slot in the
	// tenant's Redis counters without a refresh (60s); refreshed every
	// third of it.
	LeaseTTL time.Duration
	// Notice, when set, is sent in every ready frame for clients to show
	// (e.g. "demo model: random weights").
	Notice string
	// SkipMigrate makes New only check the Redis schema instead of applying
	// pending migrations. Either way New refuses a newer schema.
	SkipMigrate bool
	// ModelName is the served model's name in the OpenAI-compatible API
	// (openai.go): /v1/models lists it and requests name it or leave
	// "model" out. Empty: the name the Generator reports when it is an
	// engine.ModelReporter (the cluster client, from the engines), else
	// "specgate".
	ModelName string
	// Model describes the served model in ready frames and /v1/models
	// (nil: only ModelName is known).
	Model *ModelInfo
	// ToolFormat is the served chat template's own function-call format
	// (engine.NativeTools): tools and tool turns then go through the
	// template and calls are generated as the model family writes them.
	// nil describes tools in a system message in the <tool_call>
	// convention, which any model can read.
	ToolFormat *chat.CallFormat
}

func (o *Options) validate() error {
	if o.Redis == nil {
		return errors.New("gateway: Options.Redis is required")
	}
	if o.Generator == nil {
		return errors.New("gateway: Options.Generator is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Audience == "" {
		o.Audience = "specgate"
	}
	def(&o.Leeway, 30*time.Second)
	def(&o.AuthTimeout, 5*time.Second)
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 1 << 20
	}
	defInt(&o.WriteQueueFrames, 1024)
	defInt(&o.WriteQueueBytes, 4<<20)
	defInt(&o.MaxBatch, 64)
	def(&o.WriteTimeout, 10*time.Second)
	def(&o.PingInterval, 25*time.Second)
	def(&o.PongWait, 60*time.Second)
	if o.LogMaxLen <= 0 {
		o.LogMaxLen = 10000
	}
	def(&o.LogTTL, time.Hour)
	if o.WaitReplicas == 0 {
		o.WaitReplicas = 1
	}
	def(&o.ResumePoll, time.Second)
	def(&o.ResumeIdle, 2*time.Minute)
	def(&o.PersistTimeout, 15*time.Second)
	def(&o.LeaseTTL, 60*time.Second)
	def(&o.TurnLease, 5*time.Second)
	def(&o.ControlTimeout, time.Second)
	return nil
}

// Server is the gateway node. Create it with New, serve Handler, stop it
// with Shutdown.
type Server struct {
	o        Options
	tenants  *tenants.Store
	limiter  *tenants.Limiter
	sessions *SessionStore
	log      *streamLog
	logw     *logWriter
	closeLog func() error // the log writer's own client (nil: it has none)
	auth     *authenticator
	metrics  *metrics
	upgrader websocket.Upgrader
	handler  http.Handler

	// runCtx lives until Shutdown gives up on in-flight turns; generations
	// and lease refreshes run under it, not under a connection's context,
	// because they outlive sockets.
	runCtx    context.Context
	runCancel context.CancelFunc
	bg        sync.WaitGroup // the log writer, the lease refresher, the turn watcher, the control listener
	ks        keyspace.Space
	gwID      string // this gateway, on the control channel

	mu       sync.Mutex // protects the fields below
	draining bool
	turns    map[string]*turn        // by engine request id
	conns    map[*Connection]*client // open sockets
	// ctlWaiters are the forwarded cancels waiting for an ack, by nonce.
	ctlWaiters map[string]chan struct{}
	turnsWG    sync.WaitGroup
}

// New checks options, migrates (or checks) the Redis schema, and returns a
// Server. It refuses to start against a schema newer than this binary.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if opts.SkipMigrate {
		if err := migrations.Check(ctx, opts.Redis, opts.Prefix); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	} else if _, _, err := migrations.Apply(ctx, opts.Redis, opts.Prefix, func(f string, a ...any) {
		opts.Logger.Info(fmt.Sprintf(f, a...))
	}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	now := opts.Clock.Now
	writer := durable.New(opts.Redis, durable.Options{Replicas: opts.WaitReplicas})
	s := &Server{
		o:        opts,
		tenants:  tenants.NewStore(opts.Redis, opts.Prefix, now),
		limiter:  tenants.NewLimiter(opts.Redis, opts.Prefix),
		sessions: &SessionStore{rdb: opts.Redis, ks: keyspace.New(opts.Prefix), now: now, logTTL: opts.LogTTL, w: writer},
		log:      &streamLog{rdb: opts.Redis, ks: keyspace.New(opts.Prefix), maxLen: opts.LogMaxLen, ttl: opts.LogTTL, w: writer},
		metrics:  m,
		ks:       keyspace.New(opts.Prefix),
		gwID:     randomID("g_"),
		turns:    map[string]*turn{},
		conns:    map[*Connection]*client{},
	}
	s.auth = &authenticator{tenants: s.tenants, audience: opts.Audience, leeway: opts.Leeway, now: now, log: opts.Logger}
	s.upgrader = websocket.Upgrader{
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		// Origins are checked per tenant after authentication (the tenant
		// is not known at the upgrade), see client.checkOrigin.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	s.runCtx, s.runCancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	s.ctlWaiters = map[string]chan struct{}{}
	// Subscribed before New returns, so no cancel forwarded to this
	// gateway once it serves is missed.
	ps := opts.Redis.Subscribe(ctx, s.ks.GatewayControl())
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		s.runCancel()
		return nil, fmt.Errorf("gateway: subscribe to the control channel: %w", err)
	}
	// The log writer's own client (logwriter.go): it sees its appends
	// go out, which is what a turn waits for before a send.
	tracker := newSentTracker()
	lrdb, own := logClient(opts.Redis, tracker)
	if own {
		s.closeLog = lrdb.Close
	}
	s.logw = newLogWriter(&streamLog{rdb: lrdb, ks: s.ks, maxLen: opts.LogMaxLen, ttl: opts.LogTTL, sent: tracker,
		w: durable.New(lrdb, durable.Options{Replicas: opts.WaitReplicas})}, opts.Logger, opts.WriteTimeout)
	s.bg.Add(4)
	go func() { defer s.bg.Done(); s.logw.run(s.runCtx) }()
	go s.refreshLeases()
	go s.watchTurns()
	go s.listenControl(ps)
	return s, nil
}

// Tenants is the tenant store the server reads (for wiring the CLI).
func (s *Server) Tenants() *tenants.Store { return s.tenants }

// Sessions is the session store.
func (s *Server) Sessions() *SessionStore { return s.sessions }

// Handler serves every route:
//
//	GET  /v1/ws                  the WebSocket protocol (PROTOCOL.md)
//	     /v1/sessions[/{id}]     session HTTP API (Bearer JWT)
//	POST /v1/chat/completions    OpenAI-compatible API (openai.go)
//	POST /v1/completions
//	GET  /v1/models[/{model}]
//	GET  /metrics                Prometheus
//	GET  /healthz                the process is up
//	GET  /readyz                 Redis answers and the model is loaded
//	     /admin/v1/...           tenant admin API (when AdminToken is set)
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", s.serveWS)
	s.sessionRoutes(mux)
	s.openaiRoutes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.o.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	if s.o.AdminToken != "" {
		mux.Handle("/admin/", tenants.AdminHandler(s.tenants, s.o.AdminToken))
	}
	return apiResponses(mux)
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var problems []string
	if err := s.o.Redis.Ping(ctx).Err(); err != nil {
		problems = append(problems, "redis: "+err.Error())
	}
	if rd, ok := s.o.Generator.(engine.Readier); ok {
		if err := rd.Ready(); err != nil {
			problems = append(problems, "model: "+err.Error())
		}
	}
	s.mu.Lock()
	if s.draining {
		problems = append(problems, "shutting down")
	}
	s.mu.Unlock()
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		for _, p := range problems {
			_, _ = fmt.Fprintln(w, p)
		}
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Shutdown stops taking new turns, waits for in-flight generations to
// finish until ctx ends, then cancels the rest and stores their partial
// replies (marked interrupted: shutdown), and closes every socket with
// 1001. It returns ctx's error when it had to cancel generations. It does
// not close Options.Redis or stop the http.Server (the caller owns both).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()

	finished := make(chan struct{})
	go func() { s.turnsWG.Wait(); close(finished) }()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
		s.mu.Lock()
		for id, t := range s.turns {
			t.interrupt(interruptShutdown)
			s.o.Generator.Cancel(id)
		}
		s.mu.Unlock()
		// The turns now end with "cancelled" and persist what they have;
		// persisting is bounded by PersistTimeout.
		<-finished
	}
	s.runCancel()
	s.bg.Wait()
	if s.closeLog != nil {
		_ = s.closeLog()
	}

	s.mu.Lock()
	conns := make([]*Connection, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseGoingAway, ReasonShutdown)
	}
	// Each socket flushes its frames, sends the close and waits for the
	// client's; all of them within one WriteTimeout (plus a little for the
	// writer's own timeout), so the caller may exit once this returns.
	wait := time.NewTimer(s.o.WriteTimeout + time.Second)
	defer wait.Stop()
	for _, c := range conns {
		select {
		case <-c.Done():
		case <-wait.C:
			return err
		}
	}
	return err
}

// refreshLeases keeps this gateway's connection and request slots alive
// in the tenants' Redis counters.
func (s *Server) refreshLeases() {
	defer s.bg.Done()
	t := time.NewTicker(s.o.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
		type lease struct{ tenant, kind string }
		held := map[lease][]string{}
		s.mu.Lock()
		for c, cl := range s.conns {
			_ = c
			if cl.ident.Tenant != nil && cl.ident.Tenant.Limits.MaxConnections > 0 {
				k := lease{cl.ident.Tenant.ID, tenants.LeaseConnections}
				held[k] = append(held[k], cl.id)
			}
		}
		for id, tr := range s.turns {
			if tr.leased {
				k := lease{tr.tenant.ID, tenants.LeaseRequests}
				held[k] = append(held[k], id)
			}
		}
		s.mu.Unlock()
		for k, ids := range held {
			ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
			if err := s.limiter.Refresh(ctx, k.tenant, k.kind, s.o.LeaseTTL, ids...); err != nil {
				s.o.Logger.Warn("gateway: refresh leases", "err", err)
			}
			cancel()
		}
	}
}
