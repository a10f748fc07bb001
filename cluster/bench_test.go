package cluster_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/specgate/specgate/cluster"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/keyspace"
	"github.com/specgate/specgate/internal/testredis"
)

// clockEngine emits a delta every tick whose text is the time it was
// emitted, so the reader can measure transport latency alone. With step
// set, every stream emits at the same instants (multiples of tick), as
// an engine's step emits the deltas of its whole batch at once.
type clockEngine struct {
	tick time.Duration
	step bool
}

type clockEvents struct {
	tick time.Duration
	step bool
	n, i int
	ctx  context.Context
	done bool
}

func (e clockEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return &clockEvents{tick: e.tick, step: e.step, n: r.MaxTokens, ctx: ctx}, nil
}

func (clockEngine) Cancel(string) {}

func (s *clockEvents) Recv(ctx context.Context) (engine.Event, error) {
	if s.done {
		return engine.Event{}, io.EOF
	}
	if s.i == s.n {
		s.done = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength}}, nil
	}
	wait := s.tick
	if s.step {
		now := time.Now()
		wait = now.Truncate(s.tick).Add(s.tick).Sub(now)
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return engine.Event{}, ctx.Err()
	}
	s.i++
	return engine.Event{Seq: s.i, Tokens: []int32{int32(s.i)}, Text: strconv.FormatInt(time.Now().UnixNano(), 10)}, nil
}

// runLatency runs streams concurrent requests of deltas deltas each and
// returns every delta's emit-to-receive latency, sorted.
func runLatency(b *testing.B, g engine.Generator, streams, deltas int) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := g.Generate(ctx, engine.Request{ID: "b" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), Tenant: "b", Session: strconv.Itoa(i), MaxTokens: deltas})
			if err != nil {
				b.Error(err)
				return
			}
			local := make([]time.Duration, 0, deltas)
			for {
				ev, err := s.Recv(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Error(err)
					return
				}
				if ev.Final == nil {
					at, _ := strconv.ParseInt(ev.Text, 10, 64)
					local = append(local, time.Since(time.Unix(0, at)))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

func pct(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000
}

// logGen submits through a client as a gateway that keeps stream logs
// does (SubmitToLog: the engine writes the deltas to the log).
type logGen struct {
	c      *cluster.Client
	prefix string
}

func (g logGen) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return g.c.GenerateToLog(ctx, r, keyspace.New(g.prefix).RequestLog(r.Session, r.ID), 10000, time.Minute)
}

func (g logGen) Cancel(id string) { g.c.Cancel(id) }

// BenchmarkDeltaLatency measures the time from the engine emitting a
// delta to the gateway receiving it, at 100 concurrent streams of a delta
// every 20ms: in process, and through Redis, into each request's output
// stream and (redis-log) into stream logs. -delta.streams and
// -delta.step change the load: with step, all streams emit at once, as
// an engine step does. redis-cpu-us/delta is Redis's own CPU (INFO) per
// delta.
func BenchmarkDeltaLatency(b *testing.B) {
	streams, deltas := *deltaStreams, 50
	fe := clockEngine{tick: 20 * time.Millisecond, step: *deltaStep}
	b.Run("inprocess", func(b *testing.B) {
		g := fe
		for b.Loop() {
			lat := runLatency(b, g, streams, deltas)
			b.ReportMetric(pct(lat, .5), "p50-ms")
			b.ReportMetric(pct(lat, .99), "p99-ms")
		}
	})
	for _, logged := range []bool{false, true} {
		name := "redis"
		if logged {
			name = "redis-log"
		}
		b.Run(name, func(b *testing.B) { benchRedisLatency(b, fe, streams, deltas, logged) })
	}
}

var (
	deltaStreams = flag.Int("delta.streams", 100, "BenchmarkDeltaLatency: concurrent streams")
	deltaStep    = flag.Bool("delta.step", false, "BenchmarkDeltaLatency: every stream emits at the same instants")
)

// redisCPU is Redis's CPU time so far (INFO cpu), in µs.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f * 1e6
		}
	}
	return total
}

func benchRedisLatency(b *testing.B, fe clockEngine, streams, deltas int, logged bool) {
	{
		rdb := testredis.Client(b)
		prefix := testredis.Prefix(b)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cluster.RunEngine(ctx, cluster.EngineOptions{Redis: rdb, Prefix: prefix, ID: "e1", Capacity: 256,
				Engine: fe, Logger: quiet})
		}()
		defer func() { cancel(); <-done }()
		c, err := cluster.NewClient(cluster.ClientOptions{Redis: rdb, Prefix: prefix, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for c.Ready() != nil {
			time.Sleep(20 * time.Millisecond)
		}
		var g engine.Generator = c
		if logged {
			g = logGen{c: c, prefix: prefix}
		}
		for b.Loop() {
			cpu := redisCPU(b, rdb)
			lat := runLatency(b, g, streams, deltas)
			b.ReportMetric(pct(lat, .5), "p50-ms")
			b.ReportMetric(pct(lat, .99), "p99-ms")
			b.ReportMetric((redisCPU(b, rdb)-cpu)/float64(len(lat)), "redis-cpu-us/delta")
		}
	}
}

// BenchmarkEngines measures aggregate completion tokens per second through
// the Redis path with one and with two engines on stories260K, at 32
// concurrent greedy requests.
func BenchmarkEngines(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rdb := testredis.Client(b)
			prefix := testredis.Prefix(b)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for i := range n {
				eng := newEngine(b, 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = cluster.RunEngine(ctx, cluster.EngineOptions{Redis: rdb, Prefix: prefix, ID: "e" + strconv.Itoa(i),
						Engine: eng, Logger: quiet})
				}()
			}
			c, err := cluster.NewClient(cluster.ClientOptions{Redis: rdb, Prefix: prefix, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for len(c.Engines()) != n {
				time.Sleep(20 * time.Millisecond)
			}
			for b.Loop() {
				start := time.Now()
				var tokens sync.WaitGroup
				var mu sync.Mutex
				total := 0
				for i := range 32 {
					tokens.Add(1)
					go func() {
						defer tokens.Done()
						s, err := c.Submit(ctx, engine.Request{Tenant: "b", Session: strconv.Itoa(i) + start.String(),
							Messages: story, MaxTokens: 64})
						if err != nil {
							b.Error(err)
							return
						}
						for {
							ev, err := s.Recv(ctx)
							if err != nil {
								return
							}
							if ev.Final != nil {
								mu.Lock()
								total += ev.Final.Usage.CompletionTokens
								mu.Unlock()
							}
						}
					}()
				}
				tokens.Wait()
				b.ReportMetric(float64(total)/time.Since(start).Seconds(), "tok/s")
			}
		})
	}
}

// BenchmarkRedisStreams drives 200 and 1,000 concurrent streams (a delta
// every 20ms, 50 each) through the Redis request path, and reports the
// deltas delivered per second and the p99 emit-to-receive latency. Run it
// with REDIS_URL naming one server, then a cluster
// (redis+cluster://…, deploy/redis-cluster.sh), to compare the two.
func BenchmarkRedisStreams(b *testing.B) {
	fe := clockEngine{tick: 20 * time.Millisecond}
	for _, streams := range []int{200, 1000} {
		b.Run("streams="+strconv.Itoa(streams), func(b *testing.B) {
			rdb := testredis.Client(b)
			prefix := testredis.Prefix(b)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- cluster.RunEngine(ctx, cluster.EngineOptions{Redis: rdb, Prefix: prefix, ID: "e1", Capacity: 2 * streams,
					Engine: fe, Logger: quiet})
			}()
			defer func() { cancel(); <-done }()
			c, err := cluster.NewClient(cluster.ClientOptions{Redis: rdb, Prefix: prefix, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for c.Ready() != nil {
				time.Sleep(20 * time.Millisecond)
			}
			g := c
			for b.Loop() {
				start := time.Now()
				lat := runLatency(b, g, streams, 50)
				b.ReportMetric(float64(len(lat))/time.Since(start).Seconds(), "deltas/s")
				b.ReportMetric(pct(lat, .99), "p99-ms")
			}
		})
	}
}
