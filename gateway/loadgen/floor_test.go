package loadgen

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkDeltaFloor is BenchmarkDeltaOverhead with no gateway and no
// Redis in between: what this machine's sockets and scheduler alone cost
// the same traffic, so the overhead figure can be read against it. A
// server sends each of -overhead.streams WebSocket connections one delta
// frame (the gateway's own encoding) per -overhead.interval, the emit time
// in its text, from one writer goroutine per connection, as the gateway
// does; each client reads its messages as the load generator does
// (NextReader into a kept buffer, parseDelta). Reported like
// BenchmarkDeltaOverhead: emit → client receive, p50, p99, max.
//
//	go test ./gateway/loadgen -run '^$' -bench DeltaFloor -benchtime 1x
func BenchmarkDeltaFloor(b *testing.B) {
	streams, steps, interval := *ovStreams, *ovTokens, *ovInterval
	base := time.Now()
	up := websocket.Upgrader{}
	var mu sync.Mutex // protects the fields below
	var outs []chan []byte
	var writers sync.WaitGroup
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		out := make(chan []byte, steps+1)
		mu.Lock()
		outs = append(outs, out)
		mu.Unlock()
		writers.Go(func() {
			defer ws.Close()
			for msg := range out {
				if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
					return
				}
			}
		})
	}))
	defer hs.Close()
	url := "ws" + strings.TrimPrefix(hs.URL, "http")

	for b.Loop() {
		var hist Histogram
		var readers sync.WaitGroup
		errs := make(chan error, streams)
		mu.Lock()
		outs = outs[:0]
		mu.Unlock()
		for range streams {
			ws, _, err := websocket.DefaultDialer.Dial(url, nil)
			if err != nil {
				b.Fatal(err)
			}
			readers.Go(func() {
				defer ws.Close()
				var buf bytes.Buffer
				for range steps {
					_, r, err := ws.NextReader()
					if err == nil {
						buf.Reset()
						_, err = buf.ReadFrom(r)
					}
					if err != nil {
						errs <- err
						return
					}
					at := time.Now()
					f, ok := parseDelta(buf.Bytes())
					ns, err := strconv.ParseInt(strings.TrimSpace(f.Text), 10, 64)
					if !ok || err != nil {
						errs <- &badFrame{buf.String()}
						return
					}
					mu.Lock()
					hist.Add(at.Sub(base.Add(time.Duration(ns))))
					mu.Unlock()
				}
			})
		}
		// Every dial has returned, so every upgrade was answered; their
		// handlers may still be registering. One that failed after its
		// answer would never register: give up rather than wait forever.
		for deadline := time.Now().Add(10 * time.Second); ; {
			mu.Lock()
			n := len(outs)
			mu.Unlock()
			if n == streams {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d connections registered by the server after 10s", n, streams)
			}
			time.Sleep(time.Millisecond)
		}
		tick := time.NewTicker(interval)
		for seq := 1; seq <= steps; seq++ {
			<-tick.C
			stamp := strconv.FormatInt(int64(time.Since(base)), 10) + " "
			mu.Lock()
			for i, out := range outs {
				out <- []byte(`{"type":"delta","request":"t` + strconv.Itoa(i) + `","seq":` + strconv.Itoa(seq) + `,"text":"` + stamp + `"}`)
			}
			mu.Unlock()
		}
		tick.Stop()
		readers.Wait()
		mu.Lock()
		for _, out := range outs {
			close(out)
		}
		mu.Unlock()
		writers.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(hist.Quantile(0.50))/1e3, "p50-µs")
		b.ReportMetric(float64(hist.Quantile(0.99))/1e3, "p99-µs")
		b.ReportMetric(float64(hist.Max())/1e3, "max-µs")
		b.ReportMetric(float64(hist.Count()), "deltas")
	}
}

type badFrame struct{ msg string }

func (e *badFrame) Error() string { return "loadgen: unexpected frame " + strconv.Quote(e.msg) }
