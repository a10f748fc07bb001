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
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
)

// Serve roles.
const (
	roleAll     = "all"
	roleGateway = "gateway"
	roleEngine  = "engine"
)

// roleFlags are serve's flags for running gateways and engines apart.
type roleFlags struct {
	role     *string
	instance *string
	capacity *int
	claim    *time.Duration
}

func addRoleFlags(fs *flag.FlagSet) *roleFlags {
	return &roleFlags{
		role:     fs.String("role", envOr("SPECGATE_ROLE", roleAll), "all (one process), gateway (no model) or engine (no WebSocket) ($SPECGATE_ROLE)"),
		instance: fs.String("instance", os.Getenv("SPECGATE_INSTANCE"), "this process's id in Redis and the node label of specgate_node_info ($SPECGATE_INSTANCE; default host-pid-random)"),
		capacity: fs.Int("engine-capacity", 64, "requests an engine takes from Redis at once (role engine)"),
		claim:    fs.Duration("claim-timeout", 10*time.Second, "how long a request may go unrefreshed before another engine takes it over (role engine)"),
	}
}

// check validates the role and fills the instance id.
func (r *roleFlags) check() error {
	switch *r.role {
	case roleAll, roleGateway, roleEngine:
	default:
		return fmt.Errorf("--role %q: want all, gateway or engine", *r.role)
	}
	if *r.instance == "" {
		*r.instance = cluster.NewID()
	}
	return nil
}

// newClusterClient is the gateway role's engine.Generator: requests go to
// engines through Redis, which tokenize text prompts and keep live
// sessions warm as the in-process engine does. Close it after the
// gateway's Shutdown.
func newClusterClient(rdb redis.UniversalClient, r *roleFlags, addr string, log *slog.Logger) (*cluster.Client, error) {
	return cluster.NewClient(cluster.ClientOptions{Redis: rdb, ID: *r.instance, Addr: addr, Logger: log})
}

// runEngineRole serves eng's requests from Redis until ctx ends, with
// /metrics, /healthz and /readyz on addr.
func runEngineRole(ctx context.Context, log *slog.Logger, rdb redis.UniversalClient, eng *engine.Engine, probe *cluster.KVProbe, card engine.ModelCard, reg *prometheus.Registry, addr string, r *roleFlags) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		pctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if err := rdb.Ping(pctx).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("engine serving requests from Redis", "instance", *r.instance, "metrics", "http://"+ln.Addr().String()+"/metrics")

	err = cluster.RunEngine(ctx, cluster.EngineOptions{
		Redis: rdb, ID: *r.instance, Addr: ln.Addr().String(),
		Engine: eng, Capacity: *r.capacity,
		FreeKV: probe.Free, Model: &card, ClaimTimeout: *r.claim, Logger: log,
	})
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	herr := hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		herr = errors.Join(herr, serr)
	}
	return errors.Join(err, herr)
}

// runStatus lists the live gateways and engines with their load.
func runStatus(ctx context.Context, args []string) error {
	fs := newFlags("status", "[flags]")
	dial := redisFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb, err := dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ns, err := cluster.Nodes(ctx, rdb, "")
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		fmt.Println("no live gateways or engines (a single --role=all process does not register)")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tINSTANCE\tADDR\tLOAD\tCAPACITY\tFREE KV BLOCKS\tUP")
	for _, n := range ns {
		capacity, kv := "-", "-"
		if n.Capacity > 0 {
			capacity = fmt.Sprint(n.Capacity)
		}
		if n.FreeKV >= 0 {
			kv = fmt.Sprint(n.FreeKV)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Role, n.ID, n.Addr, n.Load, capacity, kv, time.Since(n.Started).Round(time.Second))
	}
	return tw.Flush()
}
