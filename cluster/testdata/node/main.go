// Command node runs one specgate role over Redis for the cluster package's
// multi-process tests: a gateway (WebSocket front door, no model) or an
// engine (model and engine, no WebSocket). It prints one line to stdout
// when it is ready: "listening <host:port>" or "engine <id>".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/internal/redisurl"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

// slowModel sleeps before each forward pass so tests can act mid-stream.
type slowModel struct {
	model.Loaded
	delay time.Duration
}

func (m slowModel) Forward(kv kernels.KVCache, b *model.Batch) (kernels.Tensor, error) {
	time.Sleep(m.delay)
	return m.Loaded.Forward(kv, b)
}

// quietRedis drops go-redis's own log lines (a failed dial per retry while
// Redis is down); the node logs outages itself, once.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func run(ctx context.Context) error {
	redis.SetLogger(quietRedis{})
	role := flag.String("role", "", "gateway or engine")
	url := flag.String("redis", "", "Redis URL")
	prefix := flag.String("prefix", "", "Redis key prefix")
	id := flag.String("id", "", "node id")
	addr := flag.String("addr", "127.0.0.1:0", "gateway listen address")
	modelPath := flag.String("model", "", "GGUF model (engine)")
	delay := flag.Duration("step-delay", 0, "sleep before each forward pass (engine)")
	claim := flag.Duration("claim-timeout", 1500*time.Millisecond, "takeover timeout (engine)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rdb, err := redisurl.Open(ctx, *url)
	if err != nil {
		return err
	}
	defer rdb.Close()

	switch *role {
	case cluster.RoleEngine:
		be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
		if err != nil {
			return err
		}
		defer be.Close()
		m, err := model.Load(*modelPath, be)
		if err != nil {
			return err
		}
		defer m.Close()
		eng, err := engine.New(slowModel{m, *delay}, engine.Options{})
		if err != nil {
			return err
		}
		defer eng.Close()
		probe := cluster.NewKVProbe(eng)
		fmt.Println("engine", *id)
		return cluster.RunEngine(ctx, cluster.EngineOptions{
			Redis: rdb, Prefix: *prefix, ID: *id, Engine: eng,
			FreeKV: probe.Free, Logger: log,
			HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second,
			ClaimInterval: 200 * time.Millisecond, ClaimTimeout: *claim, DrainTimeout: 2 * time.Second,
		})
	case cluster.RoleGateway:
		c, err := cluster.NewClient(cluster.ClientOptions{Redis: rdb, Prefix: *prefix, ID: *id, Logger: log,
			PlaceTimeout: 3 * time.Second, IdleTimeout: 30 * time.Second, PollInterval: 100 * time.Millisecond,
			HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second, RefreshInterval: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		defer c.Close()
		gw, err := gateway.New(gateway.Options{Redis: rdb, Prefix: *prefix, Generator: c,
			Logger: log, ResumePoll: 100 * time.Millisecond, PersistTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 5 * time.Second}
		errc := make(chan error, 1)
		go func() { errc <- hs.Serve(ln) }()
		fmt.Println("listening", ln.Addr().String())
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		if err := gw.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", *role)
}
