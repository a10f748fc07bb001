package cluster_test

import (
	"context"
	"errors"
	"io"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/cluster"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// clockEngine emits a delta every tick whose text is the time it was
// emitted, so the reader can measure transport latency alone.
type clockEngine struct{ tick time.Duration }

type clockEvents struct {
	tick time.Duration
	n, i int
	ctx  context.Context
	done bool
}

func (e clockEngine) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	return &clockEvents{tick: e.tick, n: r.MaxTokens, ctx: ctx}, nil
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
	select {
	case <-time.After(s.tick):
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

// BenchmarkDeltaLatency measures the time from the engine emitting a
// delta to the gateway receiving it, at 100 concurrent streams of a delta
// every 20ms: in process, and through Redis.
func BenchmarkDeltaLatency(b *testing.B) {
	const streams, deltas = 100, 50
	fe := clockEngine{tick: 20 * time.Millisecond}
	b.Run("inprocess", func(b *testing.B) {
		g := fe
		for b.Loop() {
			lat := runLatency(b, g, streams, deltas)
			b.ReportMetric(pct(lat, .5), "p50-ms")
			b.ReportMetric(pct(lat, .99), "p99-ms")
		}
	})
	b.Run("redis", func(b *testing.B) {
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
		g := c
		for b.Loop() {
			lat := runLatency(b, g, streams, deltas)
			b.ReportMetric(pct(lat, .5), "p50-ms")
			b.ReportMetric(pct(lat, .99), "p99-ms")
		}
	})
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
