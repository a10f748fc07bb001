//go:build unix

package loadgen

import (
	"bufio"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/specgate/specgate/tenants"
)

var (
	ovStreams  = flag.Int("overhead.streams", 200, "BenchmarkDeltaOverhead: concurrent streams")
	ovInterval = flag.Duration("overhead.interval", 50*time.Millisecond, "BenchmarkDeltaOverhead: the fake engine's step interval (one delta per stream per step)")
	ovTokens   = flag.Int("overhead.tokens", 60, "BenchmarkDeltaOverhead: deltas per stream")
	idleConns  = flag.Int("idle.conns", 5000, "BenchmarkIdleConnMemory: idle connections to open")
)

// BenchmarkDeltaOverhead measures the gateway's share of a delta's
// latency: from the moment the (fake) engine emits it to the moment the
// client reads the WebSocket message carrying it, with -overhead.streams
// streams (200) decoding at once over loopback. The fake engine emits one
// delta to every live stream per step, like the real step loop, and writes
// the emit time into the delta's text; the client is this package's load
// generator. Included: the gateway reading the event, handing its stream
// log append to Redis's connection (batched with the other streams', not
// waiting for Redis's answer), queueing, batching and writing the frame;
// the kernel's loopback; the client's read. The clients, Redis and the
// gateway share the machine's cores, so on a small or busy machine this is
// an upper bound: the step's deltas arrive together and queue for CPU.
//
// The first steps run while the rest of the streams are still being set
// up (200 sockets authenticated, sessions stored, chats started at the
// same moment), and the last while streams end and store their replies:
// p50/p99 count every delta, steady-p50/p99 only those of the steps at
// which all the streams were live, the state BenchmarkDeltaFloor measures
// (it opens every socket before its first step). One iteration is a whole
// run; use -benchtime=1x:
//
//	go test ./gateway/loadgen -run '^$' -bench DeltaOverhead -benchtime 1x
func BenchmarkDeltaOverhead(b *testing.B) {
	streams := *ovStreams
	nTenants := 1
	for _, k := range []int{4, 2} {
		if streams%k == 0 && streams >= k {
			nTenants = k
			break
		}
	}
	gen := newPacedGen(b, *ovInterval, *ovTokens)
	g := startGateway(b, gen)
	store := tenants.NewStore(g.rdb, g.prefix, nil)
	ctx := context.Background()
	var ts []Tenant
	for i := range nTenants {
		id := fmt.Sprintf("bench-%d", i)
		kid, secret, err := EnsureTenant(ctx, store, tenants.CreateSpec{ID: id, Priority: Interactive, Key: tenants.KeySpec{Alg: tenants.HS256}})
		if err != nil {
			b.Fatal(err)
		}
		ts = append(ts, Tenant{Name: id, Token: HS256Minter(kid, secret, "specgate", time.Hour), Mix: []Weighted{{Interactive, 1}}})
	}

	var mu sync.Mutex // protects the fields below
	var overhead, steady Histogram
	bad := 0
	onDelta := func(d Delta) {
		at, live, ok := gen.stampOf(d.Text)
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			bad++
			return
		}
		overhead.Add(d.At.Sub(at))
		if live == streams {
			steady.Add(d.At.Sub(at))
		}
	}
	var last *Report
	for b.Loop() {
		rep, err := Run(ctx, Config{
			URL: g.url, Tenants: ts, Users: streams / nTenants, Turns: 1,
			MaxTokens: *ovTokens, Duration: 2*time.Minute + time.Duration(*ovTokens)*(*ovInterval),
			OnDelta: onDelta,
		})
		if err != nil {
			b.Fatal(err)
		}
		if n := rep.Total.ErrorCount(); n > 0 || rep.Total.Completed != streams {
			b.Fatalf("have %+v; want %d completed requests, no errors", rep.Total, streams)
		}
		last = rep
	}
	mu.Lock()
	defer mu.Unlock()
	if bad > 0 {
		b.Fatalf("%d deltas without an emit stamp", bad)
	}
	b.ReportMetric(0, "ns/op") // an iteration is a whole run; its time means nothing
	b.ReportMetric(float64(overhead.Quantile(0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(overhead.Quantile(0.99))/1e3, "p99-µs")
	b.ReportMetric(float64(overhead.Max())/1e3, "max-µs")
	b.ReportMetric(float64(overhead.Count()), "deltas")
	if steady.Count() > 0 {
		// Not the bar's figure (that is p99 over every delta): the
		// state the floor measures, for reading against it.
		b.ReportMetric(float64(steady.Quantile(0.50))/1e3, "steady-p50-µs")
		b.ReportMetric(float64(steady.Quantile(0.99))/1e3, "steady-p99-µs")
	}
	b.ReportMetric(float64(steady.Count()), "steady-deltas")
	b.ReportMetric(float64(gen.peakLive()), "peak-streams")
	b.ReportMetric(last.Total.TTFTP99, "ttft-p99-ms")
}

// raiseFileLimit lifts the soft descriptor limit to need (within the hard
// limit); it fails when the hard limit is lower.
func raiseFileLimit(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= need {
		return nil
	}
	if lim.Max < need {
		return fmt.Errorf("descriptor hard limit %d < %d needed", lim.Max, need)
	}
	lim.Cur = need
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// Environment of the idle-connection child process.
const (
	idleEnvURL    = "LOADGEN_IDLE_URL"
	idleEnvN      = "LOADGEN_IDLE_N"
	idleEnvKid    = "LOADGEN_IDLE_KID"
	idleEnvSecret = "LOADGEN_IDLE_SECRET"
)

// BenchmarkIdleConnMemory measures what one idle, authenticated WebSocket
// costs the gateway: -idle.conns (5000) connections are opened, each gets
// ready, and nothing else happens on them. The clients run in a child
// process (this test binary, running TestIdleConnChild), so every byte and
// goroutine counted here is the server's: (heap in use + goroutine stacks)
// after, minus before, over the connection count, after a full GC both
// times. Kernel socket buffers are not Go memory and are not counted.
//
//	go test ./gateway/loadgen -run '^$' -bench IdleConnMemory -benchtime 1x
func BenchmarkIdleConnMemory(b *testing.B) {
	n := *idleConns
	if err := raiseFileLimit(uint64(n) + 1024); err != nil {
		b.Skipf("cannot open %d connections: %v", n, err)
	}
	gen := newPacedGen(b, time.Hour, 1)
	g := startGateway(b, gen)
	store := tenants.NewStore(g.rdb, g.prefix, nil)
	kid, secret, err := EnsureTenant(context.Background(), store, tenants.CreateSpec{ID: "idle", Key: tenants.KeySpec{Alg: tenants.HS256}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		measureIdle(b, g, n, kid, secret)
	}
}

type memSample struct {
	heapInuse, heapAlloc, stack uint64
	goroutines                  int
}

func sampleMem() memSample {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{ms.HeapInuse, ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()}
}

// waitSteady polls cond every 50ms until it holds, up to limit.
func waitSteady(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func measureIdle(b *testing.B, g *gw, n int, kid string, secret []byte) {
	before := sampleMem()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIdleConnChild$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		idleEnvURL+"="+g.url, idleEnvN+"="+strconv.Itoa(n),
		idleEnvKid+"="+kid, idleEnvSecret+"="+base64.StdEncoding.EncodeToString(secret))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// Closing stdin tells the child to hang up; its output is drained to
	// the end before Wait reaps it, as exec requires.
	drained := make(chan struct{})
	defer func() {
		_ = stdin.Close()
		<-drained
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	ready := false
	var out []string
	for sc.Scan() {
		line := sc.Text()
		out = append(out, line)
		if strings.HasPrefix(line, "idle-child: ready") {
			ready = true
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout); close(drained) }() // ends when the child exits
	if !ready {
		b.Fatalf("child did not get its connections ready:\n%s", strings.Join(out, "\n"))
	}
	setup := time.Since(start)

	// The server registers a connection before it sends ready, so by now
	// all n are open; wait for its goroutines to stop changing too.
	if !waitSteady(10*time.Second, func() bool { return g.openConns(b) >= n }) {
		b.Fatalf("gateway has %d connections; want %d", g.openConns(b), n)
	}
	prev := -1
	waitSteady(5*time.Second, func() bool {
		cur := runtime.NumGoroutine()
		same := cur == prev
		prev = cur
		return same
	})
	after := sampleMem()

	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	heap := per(after.heapInuse, before.heapInuse)
	stack := per(after.stack, before.stack)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(heap+stack, "B/conn")
	b.ReportMetric(heap, "heap-B/conn")
	b.ReportMetric(per(after.heapAlloc, before.heapAlloc), "live-B/conn")
	b.ReportMetric(stack, "stack-B/conn")
	b.ReportMetric(float64(after.goroutines-before.goroutines)/float64(n), "goroutines/conn")
	b.ReportMetric(setup.Seconds(), "connect-s")

	_ = stdin.Close()
	if !waitSteady(30*time.Second, func() bool { return g.openConns(b) == 0 }) {
		b.Errorf("gateway still has %d connections after the child hung up", g.openConns(b))
	}
}

// TestIdleConnChild is BenchmarkIdleConnMemory's client side, run in a
// child process; on its own it skips. It opens the connections, prints
// "idle-child: ready N", then holds them until stdin closes.
func TestIdleConnChild(t *testing.T) {
	url := os.Getenv(idleEnvURL)
	if url == "" {
		t.Skip("the client half of BenchmarkIdleConnMemory; runs only as its child process")
	}
	n, err := strconv.Atoi(os.Getenv(idleEnvN))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := base64.StdEncoding.DecodeString(os.Getenv(idleEnvSecret))
	if err != nil {
		t.Fatal(err)
	}
	if err := raiseFileLimit(uint64(n) + 256); err != nil {
		fmt.Printf("idle-child: error %v\n", err)
		t.Fatal(err)
	}
	mint := HS256Minter(os.Getenv(idleEnvKid), secret, "specgate", time.Hour)
	conns := make([]*websocket.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	// A few dozen dialers: enough to be quick, few enough not to overflow
	// the listen backlog.
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
			for i := range work {
				tok, err := mint(fmt.Sprintf("idle-u%d", i))
				if err == nil {
					var c *websocket.Conn
					c, _, err = d.Dial(url, http.Header{"Authorization": {"Bearer " + tok}})
					if err == nil {
						conns[i] = c
						_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
						var msg []byte
						_, msg, err = c.ReadMessage()
						if err == nil && !strings.Contains(string(msg), `"type":"ready"`) {
							err = fmt.Errorf("first message %.100q, want ready", msg)
						}
					}
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("connection %d: %w", i, err):
					default:
					}
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		fmt.Printf("idle-child: error %v\n", err)
		t.Fatal(err)
	default:
	}
	fmt.Printf("idle-child: ready %d\n", n)
	// Hold the connections until the parent closes stdin (or exits),
	// bounded in case it never does; the reader ends with the process.
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-eof:
	case <-time.After(5 * time.Minute):
	}
}
