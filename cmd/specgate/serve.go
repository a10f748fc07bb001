package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/engine/model/chat"
	"github.com/specgate/specgate/engine/model/download"
	"github.com/specgate/specgate/engine/model/synth"
	"github.com/specgate/specgate/engine/prom"
	"github.com/specgate/specgate/engine/specmode"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/tenants"
	"github.com/specgate/specgate/web"
)

func runServe(ctx context.Context, args []string) error {
	fs := newFlags("serve", "[flags]")
	addr := fs.String("addr", envOr("SPECGATE_ADDR", "127.0.0.1:8080"), "listen address ($SPECGATE_ADDR)")
	dial := redisFlag(fs)
	modelPath := fs.String("model", os.Getenv("MODEL"), "GGUF model file ($MODEL); empty fetches the default model")
	backend := fs.String("backend", "cpu", "compute backend")
	threads := fs.Int("threads", 0, "worker threads (0 = one per CPU)")
	kvMB := fs.Int64("kv-mb", 512, "device KV cache budget in MiB")
	hostKVMB := fs.Int64("host-kv-mb", 1024, "host KV tier budget in MiB (preempted sequences)")
	maxBatch := fs.Int("max-batch-tokens", 0, "token budget of one engine step (0 = engine default)")
	maxRunning := fs.Int("max-running", 0, "sequences running at once; more wait (0 = engine default, 64)")
	quantum := fs.Int("quantum", 0, "fair-share quantum: tokens a weight-1 tenant is credited per round (0 = engine default, 256)")
	aging := fs.Duration("aging", 0, "wait after which a request counts one priority class higher (0 = engine default, 5s)")
	kvType := kvTypeFlag(fs)
	specMode := fs.String("spec", specmode.Auto, "speculative decoding: off, ngram (drafts by n-gram lookup over the conversation), draft (drafts by --draft-model) or auto (draft with --draft-model, else ngram); the engine keeps it off where it measures a loss, and tenants and requests may narrow it")
	draftModel := fs.String("draft-model", "", "GGUF draft model for --spec draft or auto: a smaller model of the same vocabulary, or the target quantized (a self-draft)")
	adminToken := fs.String("admin-token", os.Getenv("SPECGATE_ADMIN_TOKEN"), "token guarding /admin/v1 ($SPECGATE_ADMIN_TOKEN); empty disables it")
	dev := fs.Bool("dev", false, "create a 'dev' tenant if missing and print a sign-in URL with a token")
	authTimeout := fs.Duration("auth-timeout", 5*time.Second, "how long a browser socket has to send its auth frame")
	turnLease := fs.Duration("turn-lease", 5*time.Second, "how long a running reply's gateway may go silent before another gateway (or this one restarted) takes it for dead and stores the reply from its stream log")
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long running replies may take to finish before they are stored partial")
	rf := addRoleFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := rf.check(); err != nil {
		return err
	}
	drafter, err := speculation(*specMode, *draftModel)
	if err != nil {
		return err
	}
	if *rf.role == roleGateway {
		if err := refuseEngineFlags(fs); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// Take the port before loading the model: a taken address fails in a
	// second, not after minutes of loading. (The engine role listens in
	// runEngineRole.)
	var ln net.Listener
	if *rf.role != roleEngine {
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w (pick another address with --addr, or ADDR=host:port / PORT=n with make run)", *addr, err)
		}
		defer l.Close()
		ln = l
	}

	rdb, err := dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := cluster.RegisterNode(reg, *rf.role, *rf.instance); err != nil {
		return err
	}
	var gen engine.Generator
	notice, modelName := "", ""
	var modelInfo *gateway.ModelInfo
	var toolFormat *chat.CallFormat // nil: tools described in a system message
	if *rf.role == roleGateway {
		// No model here: requests go to engines through Redis.
		cc, err := newClusterClient(rdb, rf, *addr, log)
		if err != nil {
			return err
		}
		defer cc.Close()
		gen = cc
	} else {
		eng, n, closeEngine, err := serveEngine(ctx, log, reg, *modelPath, *draftModel, *backend, kernels.Options{Threads: *threads}, engine.Options{
			KVBytes:        *kvMB << 20,
			HostKVBytes:    *hostKVMB << 20,
			MaxBatchTokens: *maxBatch,
			MaxRunning:     *maxRunning,
			Quantum:        *quantum,
			AgingAfter:     *aging,
			KVType:         *kvType,
			Speculation:    engine.Speculation{Drafter: drafter},
			// A request without max_tokens may use what the context has
			// left, as the protocol promises.
			DefaultMaxTokens: math.MaxInt32,
		})
		if err != nil {
			return err
		}
		defer closeEngine()
		card := modelCard(eng.model, *modelPath)
		if *rf.role == roleEngine {
			return runEngineRole(ctx, log, rdb, eng.eng, eng.probe, card, reg, *addr, rf)
		}
		gen, notice = eng.eng, n
		modelName = card.Name
		modelInfo = &gateway.ModelInfo{Name: card.Name, Arch: card.Arch, Context: card.Context, Quantization: card.Quantization, Demo: n != ""}
		if f, ok := eng.eng.NativeTools(); ok {
			toolFormat = &f
		}
	}

	gw, err := gateway.New(gateway.Options{
		Redis:       rdb,
		Generator:   gen,
		Registry:    reg,
		AdminToken:  *adminToken,
		Logger:      log,
		Notice:      notice,
		ModelName:   modelName,
		Model:       modelInfo,
		ToolFormat:  toolFormat,
		AuthTimeout: *authTimeout,
		TurnLease:   *turnLease,
	})
	if err != nil {
		return err
	}
	return serveGateway(ctx, log, gw, ln, *dev, *shutdownTimeout)
}

// engineFlags are serve's flags that configure the model and the engine.
var engineFlags = map[string]bool{
	"model": true, "backend": true, "threads": true, "kv-mb": true, "host-kv-mb": true,
	"max-batch-tokens": true, "max-running": true, "quantum": true, "aging": true,
	"kv-type": true, "spec": true, "draft-model": true,
}

// refuseEngineFlags names the engine flags given on fs. A gateway has no
// engine: such a flag would do nothing there, an operator's mistake
// (meant for the --role=engine processes) worth saying rather than
// ignoring. Environment defaults ($MODEL) are not flags given and pass.
func refuseEngineFlags(fs *flag.FlagSet) error {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if engineFlags[f.Name] {
			given = append(given, "--"+f.Name)
		}
	})
	switch len(given) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s belongs to the engines: with --role=gateway, give it to the --role=engine processes", given[0])
	}
	return fmt.Errorf("%s belong to the engines: with --role=gateway, give them to the --role=engine processes", strings.Join(given, ", "))
}

// servedEngine is the engine of roles all and engine.
type servedEngine struct {
	eng   *engine.Engine
	probe *cluster.KVProbe
	model model.Model
}

// speculation checks serve's --spec and --draft-model and returns the
// engine's drafter. A draft needs its model file: a self-draft (the target
// quantized) is a file of its own too, so --spec draft alone is refused
// rather than guessed at.
func speculation(mode, draftModel string) (string, error) {
	switch mode {
	case specmode.Off, specmode.NGram:
		if draftModel != "" {
			return "", fmt.Errorf("--draft-model drafts only with --spec draft or auto, not --spec %s", mode)
		}
		return mode, nil
	case specmode.Draft:
		if draftModel == "" {
			return "", errors.New("--spec draft needs --draft-model FILE: a smaller model of the same vocabulary, or the target quantized")
		}
		return engine.DraftModel, nil
	case specmode.Auto:
		if draftModel != "" {
			return engine.DraftModel, nil
		}
		return engine.DraftNGram, nil
	}
	return "", fmt.Errorf("--spec %q: want off, ngram, draft or auto", mode)
}

// serveEngine loads the model (and the draft model, when draftPath is
// set) on the backend and starts the engine with eo (its metrics wired to
// reg); closeEngine stops them all.
func serveEngine(ctx context.Context, log *slog.Logger, reg *prometheus.Registry, modelPath, draftPath, backend string, bo kernels.Options, eo engine.Options) (e servedEngine, notice string, closeEngine func(), err error) {
	be, err := kernels.Open(backend, bo)
	if err != nil {
		return e, "", nil, err
	}
	m, notice, err := serveModel(ctx, log, modelPath, be)
	if err != nil {
		be.Close()
		return e, "", nil, err
	}
	c := m.Config()
	log.Info("model loaded", "name", c.Name, "arch", c.Arch, "type", c.WeightType.String(),
		"params_M", float64(c.Params)/1e6, "layers", c.Layers, "vocab", c.Vocab, "context", c.Context)

	var draft model.Model
	if draftPath != "" {
		draft, err = model.Load(draftPath, be)
		if err != nil {
			m.Close()
			be.Close()
			return e, "", nil, fmt.Errorf("draft model %s: %w", draftPath, err)
		}
		dc := draft.Config()
		if dc.Vocab != c.Vocab {
			draft.Close()
			m.Close()
			be.Close()
			return e, "", nil, fmt.Errorf("draft model %s: a vocabulary of %d tokens, the model's has %d (a draft must share the model's tokenizer)", draftPath, dc.Vocab, c.Vocab)
		}
		log.Info("draft model loaded", "name", dc.Name, "type", dc.WeightType.String(), "params_M", float64(dc.Params)/1e6, "layers", dc.Layers, "vocab", dc.Vocab)
		eo.Speculation.Model = draft
	}
	fail := func(err error) (servedEngine, string, func(), error) {
		if draft != nil {
			draft.Close()
		}
		m.Close()
		be.Close()
		return e, "", nil, err
	}
	pc := prom.New(prom.Options{ModelName: modelNameOf(m, modelPath)})
	if err := reg.Register(pc); err != nil {
		return fail(err)
	}
	eo.Observer = pc
	e.model = m
	e.eng, err = engine.New(m, eo)
	if err != nil {
		return fail(err)
	}
	e.probe = cluster.NewKVProbe(e.eng)
	o := e.eng.Options()
	log.Info("KV cache", "type", model.KVTypeOf(m).String(), "block_size", o.BlockSize, "device_blocks", o.KVBlocks, "host_blocks", o.HostKVBlocks)
	log.Info("speculation", "drafter", eo.Speculation.Drafter)
	return e, notice, func() {
		e.eng.Close()
		if draft != nil {
			draft.Close()
		}
		m.Close()
		be.Close()
	}, nil
}

// serveGateway serves the web UI and the gateway on ln until ctx ends,
// then shuts down gracefully: no new connections or turns, running turns
// get up to shutdownTimeout to finish, every socket gets its done frames
// and a 1001 close before the process exits.
func serveGateway(ctx context.Context, log *slog.Logger, gw *gateway.Server, ln net.Listener, dev bool, shutdownTimeout time.Duration) error {
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	for _, p := range []string{"/v1/", "/metrics", "/healthz", "/readyz", "/admin/"} {
		mux.Handle(p, gw.Handler())
	}
	base := "http://" + ln.Addr().String() + "/"
	if dev {
		tok, err := devToken(ctx, gw.Tenants())
		if err != nil {
			return err
		}
		fmt.Printf("\n  specgate is up: open %s#token=%s\n\n", base, tok)
	} else {
		log.Info("listening", "url", base)
	}

	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing or storing in-flight generations", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	// Both at once: the HTTP server stops accepting and waits for plain
	// requests, while the gateway drains turns and closes the sockets
	// (which the HTTP server no longer tracks once upgraded).
	herrc := make(chan error, 1)
	go func() { herrc <- hs.Shutdown(sctx) }()
	gerr := gw.Shutdown(sctx)
	if errors.Is(gerr, context.DeadlineExceeded) {
		log.Warn("shutdown timeout passed: the replies still running were stored partial (interrupted: shutdown)")
		gerr = nil
	}
	herr := <-herrc
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("shut down")
	return errors.Join(herr, gerr)
}

// modelCard describes the served model for clients: a process without the
// model (--role=gateway) learns it from the engines' heartbeats.
func modelCard(m model.Model, path string) engine.ModelCard {
	c := m.Config()
	return engine.ModelCard{Name: modelNameOf(m, path), Arch: c.Arch, Context: c.Context, Quantization: c.WeightType.String()}
}

// modelNameOf names the served model in the OpenAI API: the file's
// general.name, else its file name.
func modelNameOf(m model.Model, path string) string {
	if n := m.Config().Name; n != "" && n != "llama" {
		return n
	}
	if path != "" {
		return strings.TrimSuffix(filepath.Base(path), ".gguf")
	}
	return "specgate"
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// serveModel loads path, or without one the default model (downloaded once
// into the user's cache), or, when that cannot be had, a generated demo
// model whose random weights make noise; the returned notice says so to
// every client.
func serveModel(ctx context.Context, log *slog.Logger, path string, be kernels.Backend) (model.Model, string, error) {
	if path != "" {
		m, err := model.Load(path, be)
		return m, "", err
	}
	d := download.Default
	log.Info("no --model given: fetching the default model", "name", d.Name, "url", d.URL)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	p, err := download.Fetch(fctx, download.Options{URL: d.URL, SHA256: d.SHA256, Progress: os.Stderr})
	cancel()
	if err == nil {
		m, err := model.Load(p, be)
		return m, "", err
	}
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	dir, derr := os.UserCacheDir()
	if derr != nil {
		dir = os.TempDir()
	}
	demo := filepath.Join(dir, "specgate", "models", "demo-random.gguf")
	log.Warn("cannot fetch the default model; falling back to a generated DEMO model with random weights (its answers are noise); set MODEL=path.gguf for a real one", "error", err, "demo", demo)
	if _, serr := os.Stat(demo); serr != nil {
		if err := os.MkdirAll(filepath.Dir(demo), 0o755); err != nil {
			return nil, "", err
		}
		o := synth.Options{Layers: 4, Dim: 256, Heads: 8, KVHeads: 4, FFN: 768, Vocab: 4096, Context: 2048, Seed: 1}
		if err := synth.WriteFile(demo, o); err != nil {
			return nil, "", fmt.Errorf("write demo model: %w", err)
		}
	}
	m, lerr := model.Load(demo, be)
	return m, "Demo model: random weights, so answers are noise. Start with MODEL=path/to/model.gguf for a real model.", lerr
}

// devToken makes sure a "dev" tenant with an HS256 key exists and signs a
// day-long token for user "dev" with it.
func devToken(ctx context.Context, ts *tenants.Store) (string, error) {
	t, err := ts.Get(ctx, "dev")
	if errors.Is(err, tenants.ErrNotFound) {
		if _, err = ts.CreateFromSpec(ctx, tenants.CreateSpec{ID: "dev", Name: "Development", Priority: "interactive", Key: tenants.KeySpec{Alg: "HS256"}}); err != nil {
			return "", fmt.Errorf("create dev tenant: %w", err)
		}
		t, err = ts.Get(ctx, "dev")
	}
	if err != nil {
		return "", fmt.Errorf("dev tenant: %w", err)
	}
	return signToken(t, "dev", 24*time.Hour, time.Now())
}
