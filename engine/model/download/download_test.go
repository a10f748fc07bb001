package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// payload is a deterministic file larger than one read buffer.
var payload = func() []byte {
	b := make([]byte, 700<<10)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}()

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// server serves payload at /model.gguf with Range support (http.ServeContent)
// and records the Range header of each request.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	ranges []string // protects nothing else; one entry per request
	// first, if set, handles the first request instead.
	first http.HandlerFunc
}

func newServer(t *testing.T, first http.HandlerFunc) *server {
	s := &server{first: first}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ranges = append(s.ranges, r.Header.Get("Range"))
		n := len(s.ranges)
		s.mu.Unlock()
		if n == 1 && s.first != nil {
			s.first(w, r)
			return
		}
		http.ServeContent(w, r, "model.gguf", time.Time{}, bytes.NewReader(payload))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

func (s *server) url() string { return s.URL + "/files/model.gguf" }

func checkFile(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, payload) {
		t.Fatalf("have %d bytes with digest %s; want %d bytes with %s", len(b), digest(b), len(payload), digest(payload))
	}
	if _, err := os.Stat(p + ".part"); !os.IsNotExist(err) {
		t.Errorf("have a leftover partial file (stat error %v); want none", err)
	}
}

func TestFetchSuccess(t *testing.T) {
	s := newServer(t, nil)
	dir := t.TempDir()
	var progress bytes.Buffer
	p, err := Fetch(context.Background(), Options{URL: s.url(), SHA256: strings.ToUpper(digest(payload)), CacheDir: dir, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "model.gguf"); p != want {
		t.Errorf("have path %q; want %q", p, want)
	}
	checkFile(t, p)
	side, err := os.ReadFile(p + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s  %d\n", digest(payload), len(payload)); string(side) != want {
		t.Errorf("have sidecar %q; want %q", side, want)
	}
	out := progress.String()
	for _, want := range []string{"\rdownloading model.gguf", "100.0%", "/s", "700.0 KiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("have progress %q; want it to contain %q", out, want)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("have progress %q; want it to end the line", out)
	}
	if strings.Contains(out, "warning") {
		t.Errorf("have progress %q; want no warning when a digest is given", out)
	}
}

func TestFetchCacheHit(t *testing.T) {
	s := newServer(t, nil)
	dir := t.TempDir()
	opts := Options{URL: s.url(), SHA256: digest(payload), CacheDir: dir}
	if _, err := Fetch(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	s.Close() // any request now fails
	for _, sum := range []string{digest(payload), ""} {
		opts.SHA256 = sum
		p, err := Fetch(context.Background(), opts)
		if err != nil {
			t.Fatalf("SHA256 %q: have error %v; want the cached file without network", sum, err)
		}
		checkFile(t, p)
	}
	if have := len(s.requests()); have != 1 {
		t.Errorf("have %d requests; want 1", have)
	}
}

func TestFetchCachedWithoutSidecar(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(p, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	// The URL is unreachable: a hit must not touch it.
	have, err := Fetch(context.Background(), Options{URL: "http://127.0.0.1:1/model.gguf", SHA256: digest(payload), CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, have)
	if _, err := os.Stat(p + ".sha256"); err != nil {
		t.Errorf("have no sidecar (%v); want one written after hashing", err)
	}
}

func TestFetchStaleCacheDownloadsAgain(t *testing.T) {
	s := newServer(t, nil)
	dir := t.TempDir()
	p := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(p, []byte("old version"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSidecar(p+".sha256", digest([]byte("old version"))); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(context.Background(), Options{URL: s.url(), SHA256: digest(payload), CacheDir: dir}); err != nil {
		t.Fatal(err)
	}
	checkFile(t, p)
}

func TestFetchChecksumMismatch(t *testing.T) {
	s := newServer(t, nil)
	dir := t.TempDir()
	wrong := digest([]byte("something else"))
	_, err := Fetch(context.Background(), Options{URL: s.url(), SHA256: wrong, CacheDir: dir})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("have error %v; want %v", err, ErrChecksum)
	}
	for _, want := range []string{wrong, digest(payload), "deleted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("have error %q; want it to contain %q", err, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("have %d files left in the cache; want 0", len(entries))
	}
}

func TestFetchHTTPErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		want   string
	}{
		{"not found", http.StatusNotFound, "404 Not Found"},
		{"server error", http.StatusInternalServerError, "500 Internal Server Error"},
		{"forbidden", http.StatusForbidden, "403 Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "no", tt.status)
			}))
			defer s.Close()
			_, err := Fetch(context.Background(), Options{URL: s.URL + "/m.gguf", CacheDir: t.TempDir()})
			if !errors.Is(err, ErrStatus) {
				t.Fatalf("have error %v; want %v", err, ErrStatus)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("have error %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestFetchConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = Fetch(context.Background(), Options{URL: "http://" + addr + "/m.gguf", CacheDir: t.TempDir()})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("have error %v; want %v", err, ErrUnreachable)
	}
	for _, want := range []string{"cannot reach " + addr, "falling back is the caller's job"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("have error %q; want it to contain %q", err, want)
		}
	}
}

// breakAfter sends the full length but only n bytes of the body, then drops
// the connection.
func breakAfter(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
		w.WriteHeader(http.StatusOK)
		w.Write(payload[:n])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
}

func TestFetchResumesInterruptedTransfer(t *testing.T) {
	const half = 300 << 10
	s := newServer(t, breakAfter(half))
	p, err := Fetch(context.Background(), Options{URL: s.url(), SHA256: digest(payload), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, p)
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0] != "" || reqs[1] != fmt.Sprintf("bytes=%d-", half) {
		t.Errorf("have requests with Range %q; want [\"\" \"bytes=%d-\"]", reqs, half)
	}
}

func TestFetchResumesAcrossCalls(t *testing.T) {
	const half = 200 << 10
	s := newServer(t, breakAfter(half))
	dir := t.TempDir()
	opts := Options{URL: s.url(), SHA256: digest(payload), CacheDir: dir, Retries: -1}
	_, err := Fetch(context.Background(), opts)
	if !errors.Is(err, ErrTransfer) {
		t.Fatalf("have error %v; want %v", err, ErrTransfer)
	}
	st, err := os.Stat(filepath.Join(dir, "model.gguf.part"))
	if err != nil || st.Size() != half {
		t.Fatalf("have partial file %v (err %v); want %d bytes kept", st, err, half)
	}
	p, err := Fetch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, p)
	if reqs := s.requests(); reqs[len(reqs)-1] != fmt.Sprintf("bytes=%d-", half) {
		t.Errorf("have last Range %q; want bytes=%d-", reqs[len(reqs)-1], half)
	}
}

func TestFetchPartialStates(t *testing.T) {
	tests := []struct {
		name    string
		partial []byte
		handler http.HandlerFunc // nil: Range-capable server
	}{
		{"server ignores Range", payload[:1000], func(w http.ResponseWriter, r *http.Request) {
			w.Write(payload) // 200 with the whole file
		}},
		{"partial longer than file", append(append([]byte{}, payload...), "junk"...), nil},
		{"partial complete before rename", payload, nil},
		{"partial garbage prefix resumed then rejected", []byte("garbage"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.ServeContent(w, r, "model.gguf", time.Time{}, bytes.NewReader(payload))
			})
			if tt.handler != nil {
				h = tt.handler
			}
			s := httptest.NewServer(h)
			defer s.Close()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "model.gguf.part"), tt.partial, 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := Fetch(context.Background(), Options{URL: s.URL + "/model.gguf", SHA256: digest(payload), CacheDir: dir})
			if strings.Contains(tt.name, "rejected") {
				// A corrupt prefix is caught by the digest, and the
				// file is deleted so the next call starts clean.
				if !errors.Is(err, ErrChecksum) {
					t.Fatalf("have error %v; want %v", err, ErrChecksum)
				}
				p, err = Fetch(context.Background(), Options{URL: s.URL + "/model.gguf", SHA256: digest(payload), CacheDir: dir})
			}
			if err != nil {
				t.Fatal(err)
			}
			checkFile(t, p)
		})
	}
}

// cancelOnWrite cancels a context at the first progress line, that is once
// bytes have arrived.
type cancelOnWrite struct{ cancel context.CancelFunc }

func (c cancelOnWrite) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("downloading")) {
		c.cancel()
	}
	return len(b), nil
}

func TestFetchContextCancel(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
		w.Write(payload[:1000])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // stall until the client goes away
	}))
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	_, err := Fetch(ctx, Options{URL: s.URL + "/model.gguf", CacheDir: dir, Progress: cancelOnWrite{cancel}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("have error %v; want %v", err, context.Canceled)
	}
	if st, err := os.Stat(filepath.Join(dir, "model.gguf.part")); err != nil || st.Size() == 0 || st.Size() > 1000 {
		t.Errorf("have partial %v (err %v); want the bytes received kept for resuming", st, err)
	}
}

func TestFetchWithoutChecksumWarns(t *testing.T) {
	s := newServer(t, nil)
	var progress bytes.Buffer
	p, err := Fetch(context.Background(), Options{URL: s.url(), CacheDir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, p)
	if !strings.Contains(progress.String(), "warning: no SHA-256") {
		t.Errorf("have progress %q; want a warning", progress.String())
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"empty URL", Options{}},
		{"not http", Options{URL: "ftp://example.com/m.gguf"}},
		{"no host", Options{URL: "http:///m.gguf"}},
		{"bad digest", Options{URL: "http://example.com/m.gguf", SHA256: "abc"}},
		{"no file name", Options{URL: "http://example.com/"}},
		{"name with slash", Options{URL: "http://example.com/m.gguf", Name: "../m.gguf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.CacheDir = t.TempDir()
			_, err := Fetch(context.Background(), tt.opts)
			if !errors.Is(err, ErrOptions) {
				t.Errorf("have error %v; want %v", err, ErrOptions)
			}
		})
	}
}

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in          string
		start, size int64
		ok          bool
	}{
		{"bytes 100-199/200", 100, 200, true},
		{"bytes 0-0/*", 0, -1, true},
		{"bytes 300-399/200", 0, 0, false},
		{"bytes */200", 0, 0, false},
		{"items 1-2/3", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		start, size, ok := parseContentRange(tt.in)
		if start != tt.start || size != tt.size || ok != tt.ok {
			t.Errorf("parseContentRange(%q): have %d, %d, %v; want %d, %d, %v", tt.in, start, size, ok, tt.start, tt.size, tt.ok)
		}
	}
}

func TestDefault(t *testing.T) {
	o := Default.Options()
	f, err := newFetcher(Options{URL: o.URL, SHA256: o.SHA256, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Default does not make valid options: %v", err)
	}
	if !strings.HasSuffix(f.final, ".gguf") {
		t.Errorf("have cache file %q; want a .gguf name", f.final)
	}
}

func TestHumanBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {145 << 20, "145.0 MiB"}, {3 << 30, "3.0 GiB"},
	}
	for _, tt := range tests {
		if have := humanBytes(tt.n); have != tt.want {
			t.Errorf("humanBytes(%d): have %q; want %q", tt.n, have, tt.want)
		}
	}
}
