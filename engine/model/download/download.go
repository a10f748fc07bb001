// Package download fetches a model file over HTTP into a local cache, so that
// a first run works without the user hunting for weights.
//
// A download goes to "<name>.part" in the cache directory, resumes from there
// with an HTTP Range request after an interruption, is checked against its
// SHA-256, and is renamed into place only when complete and verified. A small
// "<name>.sha256" sidecar records the verified digest so that later runs
// return the cached path without touching the network or re-reading the file.
package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Model describes a downloadable model file.
type Model struct {
	Name string // human-readable name
	URL  string
	// SHA256 is the lowercase hex digest of the file; "" means unknown.
	SHA256 string
	// Size is the approximate size in bytes, for messages only.
	Size int64
}

// Options returns Fetch options for m with the package defaults for
// everything else.
func (m Model) Options() Options { return Options{URL: m.URL, SHA256: m.SHA256} }

// Default is the small instruct model a first run downloads when no model is
// given: SmolLM2-135M-Instruct (Apache-2.0) in Q8_0, published by its authors.
//
// The checksum is to be verified: it was not available when this was
// written, so SHA256 is empty and Fetch downloads it unverified (with a
// warning on Progress). Fill it in from the file's page on the hub.
var Default = Model{
	Name:   "SmolLM2-135M-Instruct Q8_0",
	URL:    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/resolve/main/smollm2-135m-instruct-q8_0.gguf",
	SHA256: "", // to be verified
	Size:   145 << 20,
}

// Options configure Fetch. Only URL is required.
type Options struct {
	// URL is an http or https URL of the file.
	URL string
	// SHA256 is the expected lowercase (or uppercase) hex digest. "" skips
	// verification and writes a warning to Progress.
	SHA256 string
	// CacheDir holds downloads. "" means os.UserCacheDir()/specgate/models.
	CacheDir string
	// Name is the file name in CacheDir. "" means the last element of the
	// URL's path.
	Name string
	// Progress, when non-nil, receives a one-line progress bar redrawn with
	// "\r" (bytes, percent, rate), ended by "\n", and warnings.
	Progress io.Writer
	// HTTPClient makes the requests. nil means a client without an overall
	// timeout (a model is large; cancel through ctx instead).
	HTTPClient *http.Client
	// Retries is how many times one Fetch resumes a transfer that broke
	// after making progress. 0 means 3; negative means none.
	Retries int
}

// Errors. Fetch's errors wrap one of these (or the context's error); check
// with errors.Is.
var (
	// ErrUnreachable: the server could not be reached (DNS, refused,
	// TLS, reset before any response). The caller decides how to fall back.
	ErrUnreachable = errors.New("download: server unreachable")
	// ErrStatus: the server answered with an HTTP status other than 200/206.
	ErrStatus = errors.New("download: unexpected HTTP status")
	// ErrChecksum: the downloaded bytes do not have the expected SHA-256.
	// The bad file has been deleted.
	ErrChecksum = errors.New("download: checksum mismatch")
	// ErrTransfer: the body broke off and retries are used up. The partial
	// file is kept, and the next Fetch resumes it.
	ErrTransfer = errors.New("download: transfer interrupted")
	// ErrOptions: the options are invalid.
	ErrOptions = errors.New("download: invalid options")
)

// fetchMu serialises Fetch calls in this process, so that two callers never
// append to the same partial file. Processes sharing a cache directory are
// not coordinated.
var fetchMu sync.Mutex

// Fetch returns the local path of the file at opts.URL, downloading it into
// the cache first unless a verified copy is already there (then no request
// is made). It is safe for concurrent use; concurrent calls run one at a
// time. Cancelling ctx stops the transfer and keeps the partial file for the
// next call to resume.
func Fetch(ctx context.Context, opts Options) (string, error) {
	f, err := newFetcher(opts)
	if err != nil {
		return "", err
	}
	fetchMu.Lock()
	defer fetchMu.Unlock()
	if ok, err := f.cached(); err != nil {
		return "", err
	} else if ok {
		return f.final, nil
	}
	if f.want == "" {
		f.printf("warning: no SHA-256 known for %s; the download will not be verified\n", f.url.Redacted())
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return "", fmt.Errorf("download: create cache directory: %w", err)
	}
	sum, err := f.download(ctx)
	if err != nil {
		return "", err
	}
	if f.want != "" && sum != f.want {
		os.Remove(f.part)
		return "", fmt.Errorf("%w for %s: have %s; want %s (the file was deleted; check the URL and the expected digest)",
			ErrChecksum, f.url.Redacted(), sum, f.want)
	}
	if err := os.Rename(f.part, f.final); err != nil {
		return "", fmt.Errorf("download: move into cache: %w", err)
	}
	if err := writeSidecar(f.sidecar, sum); err != nil {
		return "", err
	}
	syncDir(f.dir)
	return f.final, nil
}

type fetcher struct {
	url                  *url.URL
	want                 string // expected digest, lowercase hex, or ""
	dir, final, part     string
	sidecar              string
	client               *http.Client
	progress             io.Writer
	retries              int
	lastDraw, rateStart  time.Time
	rateBytes, drawTotal int64
}

func newFetcher(opts Options) (*fetcher, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q is not an http(s) URL", ErrOptions, opts.URL)
	}
	want := strings.ToLower(strings.TrimSpace(opts.SHA256))
	if want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%w: SHA256 %q is not 64 hex digits", ErrOptions, opts.SHA256)
		}
	}
	name := opts.Name
	if name == "" {
		name = path.Base(u.Path)
	}
	if name == "" || name == "." || name == "/" || name == ".." || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("%w: cannot name the file for %q; set Options.Name", ErrOptions, opts.URL)
	}
	dir := opts.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("%w: no cache directory (set Options.CacheDir): %w", ErrOptions, err)
		}
		dir = filepath.Join(base, "specgate", "models")
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	retries := opts.Retries
	switch {
	case retries == 0:
		retries = 3
	case retries < 0:
		retries = 0
	}
	final := filepath.Join(dir, name)
	return &fetcher{
		url: u, want: want, dir: dir, final: final,
		part: final + ".part", sidecar: final + ".sha256",
		client: client, progress: opts.Progress, retries: retries,
	}, nil
}

// cached reports whether f.final is present and verified. A file without a
// sidecar (copied in by hand, or a crash between rename and sidecar) is
// hashed once and accepted if it matches (or if no digest is expected).
func (f *fetcher) cached() (bool, error) {
	st, err := os.Stat(f.final)
	if err != nil || !st.Mode().IsRegular() {
		return false, nil
	}
	if have, size, err := readSidecar(f.sidecar); err == nil && size == st.Size() {
		return f.want == "" || have == f.want, nil
	}
	sum, err := hashFile(f.final)
	if err != nil {
		return false, nil
	}
	if f.want != "" && sum != f.want {
		return false, nil // stale or corrupt: download again over it
	}
	return true, writeSidecar(f.sidecar, sum)
}

// download fetches into f.part, resuming it, and returns the digest of the
// whole file.
func (f *fetcher) download(ctx context.Context) (string, error) {
	file, err := os.OpenFile(f.part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("download: open partial file: %w", err)
	}
	defer file.Close()
	h := sha256.New()
	// Hash what an earlier attempt left, so the digest covers the whole file.
	offset, err := io.Copy(h, file)
	if err != nil {
		return "", fmt.Errorf("download: read partial file: %w", err)
	}
	retries := f.retries
	for {
		n, done, err := f.attempt(ctx, file, h, offset)
		offset += n
		if err == nil && done {
			break
		}
		if err == nil { // server answered 200 to a Range request, or 416: start over
			if err := restart(file, h); err != nil {
				return "", err
			}
			offset = 0
			continue
		}
		if ctx.Err() != nil {
			f.endLine()
			return "", fmt.Errorf("download: %s: %w", f.url.Redacted(), ctx.Err())
		}
		var te *transferError
		if !errors.As(err, &te) || n == 0 || retries == 0 {
			f.endLine()
			return "", err
		}
		retries--
		select {
		case <-ctx.Done():
			f.endLine()
			return "", fmt.Errorf("download: %s: %w", f.url.Redacted(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := file.Sync(); err != nil {
		return "", fmt.Errorf("download: sync: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// transferError marks a body that broke off after the response began.
type transferError struct{ err error }

func (e *transferError) Error() string { return e.err.Error() }
func (e *transferError) Unwrap() error { return e.err }

// attempt makes one request for the bytes from offset on and appends them to
// file. It returns how many bytes it appended; done is false (with a nil
// error) when the server cannot resume and the file must start over.
func (f *fetcher) attempt(ctx context.Context, file *os.File, h hash.Hash, offset int64) (n int64, done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url.String(), nil)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, false, fmt.Errorf("%w: cannot reach %s: %w; falling back is the caller's job", ErrUnreachable, f.url.Host, err)
	}
	defer resp.Body.Close()
	total := int64(-1)
	switch {
	case resp.StatusCode == http.StatusOK:
		if offset > 0 {
			return 0, false, nil // Range ignored: the body is the whole file
		}
		total = resp.ContentLength
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		start, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != offset {
			return 0, false, nil // not the range we asked for: start over
		}
		total = size
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
		// "bytes */SIZE": an earlier run got every byte but stopped
		// before the rename. Anything else: start over.
		if sz, ok := strings.CutPrefix(resp.Header.Get("Content-Range"), "bytes */"); ok && sz == strconv.FormatInt(offset, 10) {
			return 0, true, nil
		}
		return 0, false, nil
	default:
		return 0, false, fmt.Errorf("%w: GET %s: server answered %s", ErrStatus, f.url.Redacted(), resp.Status)
	}
	f.rateStart, f.rateBytes, f.drawTotal = time.Now(), offset, total
	w := io.MultiWriter(file, h)
	buf := make([]byte, 256<<10)
	for {
		m, rerr := resp.Body.Read(buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, false, fmt.Errorf("download: write %s: %w", f.part, werr)
			}
			n += int64(m)
			f.draw(offset+n, false)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return n, false, ctx.Err()
			}
			return n, false, &transferError{fmt.Errorf("%w: %s after %d bytes: %w", ErrTransfer, f.url.Redacted(), offset+n, rerr)}
		}
	}
	if total >= 0 && offset+n != total {
		return n, false, &transferError{fmt.Errorf("%w: %s: have %d bytes; want %d", ErrTransfer, f.url.Redacted(), offset+n, total)}
	}
	f.draw(offset+n, true)
	return n, true, nil
}

// restart empties the partial file and the running digest.
func restart(file *os.File, h hash.Hash) error {
	if err := file.Truncate(0); err != nil {
		return fmt.Errorf("download: truncate partial file: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("download: rewind partial file: %w", err)
	}
	h.Reset()
	return nil
}

// parseContentRange reads "bytes START-END/SIZE" (SIZE may be "*", which
// gives -1).
func parseContentRange(s string) (start, size int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	a, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	if sz == "*" {
		return start, -1, true
	}
	size, err = strconv.ParseInt(sz, 10, 64)
	if err != nil || size < start {
		return 0, 0, false
	}
	return start, size, true
}

// draw redraws the progress line at most five times a second, and always
// for the final state.
func (f *fetcher) draw(have int64, final bool) {
	if f.progress == nil {
		return
	}
	now := time.Now()
	if !final && now.Sub(f.lastDraw) < 200*time.Millisecond {
		return
	}
	f.lastDraw = now
	line := "\rdownloading " + path.Base(f.final) + "  " + humanBytes(have)
	if f.drawTotal > 0 {
		line += " / " + humanBytes(f.drawTotal) + fmt.Sprintf("  %5.1f%%", 100*float64(have)/float64(f.drawTotal))
	}
	if secs := now.Sub(f.rateStart).Seconds(); secs > 0 {
		line += "  " + humanBytes(int64(float64(have-f.rateBytes)/secs)) + "/s"
	}
	line += "   " // wipe what a longer previous line left
	if final {
		line += "\n"
	}
	io.WriteString(f.progress, line)
}

// endLine ends a progress line that an error interrupted.
func (f *fetcher) endLine() {
	if f.progress != nil && !f.lastDraw.IsZero() {
		io.WriteString(f.progress, "\n")
	}
}

func (f *fetcher) printf(format string, args ...any) {
	if f.progress != nil {
		fmt.Fprintf(f.progress, format, args...)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, suffix := float64(n), []string{"KiB", "MiB", "GiB", "TiB"}
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffix[i])
}

func hashFile(name string) (string, error) {
	file, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer file.Close()
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// The sidecar is "<hex digest>  <size>\n"; the size catches a cached file
// that was truncated or replaced after it was verified.
func readSidecar(name string) (sum string, size int64, err error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 || len(fields[0]) != 2*sha256.Size {
		return "", 0, fmt.Errorf("download: malformed %s", name)
	}
	size, err = strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("download: malformed %s: %w", name, err)
	}
	return strings.ToLower(fields[0]), size, nil
}

func writeSidecar(name, sum string) error {
	st, err := os.Stat(strings.TrimSuffix(name, ".sha256"))
	if err != nil {
		return fmt.Errorf("download: stat cached file: %w", err)
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(sum+"  "+strconv.FormatInt(st.Size(), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("download: write checksum file: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("download: write checksum file: %w", err)
	}
	return nil
}

// syncDir makes a rename durable where the platform allows; failure only
// costs durability, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
