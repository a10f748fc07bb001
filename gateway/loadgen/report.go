package loadgen

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Histogram records durations in logarithmic buckets, 100 per decade from
// 1µs to 1000s, so a quantile is within about 1.2% of the exact sample
// whatever the run's length: memory stays constant, where keeping every
// inter-token gap of a long run would not. The zero value is ready to use.
// Not safe for concurrent use.
type Histogram struct {
	counts []uint64 // by bucket; grown on demand
	n      uint64
	min    time.Duration
	max    time.Duration
}

const (
	histPerDecade = 100
	histBuckets   = 9*histPerDecade + 1 // 1µs .. 1000s; the last takes the rest
)

func histBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return min(int(math.Log10(us)*histPerDecade), histBuckets-1)
}

// histValue is a bucket's geometric middle.
func histValue(i int) time.Duration {
	return time.Duration(math.Pow(10, (float64(i)+0.5)/histPerDecade) * float64(time.Microsecond))
}

// Add records one sample; negative durations count as zero.
func (h *Histogram) Add(d time.Duration) {
	d = max(d, 0)
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	i := histBucket(d)
	if i >= len(h.counts) {
		h.counts = slices.Grow(h.counts, i+1-len(h.counts))[:i+1]
	}
	h.counts[i]++
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	if len(o.counts) > len(h.counts) {
		h.counts = slices.Grow(h.counts, len(o.counts)-len(h.counts))[:len(o.counts)]
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest sample (0 when empty).
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 < q <= 1): the sample of rank
// ceil(q·n), to the bucket's precision and clamped to [min, max]. It is 0
// when there are no samples.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}

// stats are the figures of one group of requests (a user's requests of one
// priority, then merged into tenants, priorities and the total).
type stats struct {
	requests   int // chat frames sent
	completed  int // ended with done, finish_reason stop or length
	unfinished int // still running when the run stopped (not errors)
	tokens     int // completion tokens of done frames (deltas when absent)
	errors     map[string]int
	ttft       Histogram
	itl        Histogram
}

func (s *stats) fail(code string) {
	if s.errors == nil {
		s.errors = map[string]int{}
	}
	s.errors[code]++
}

func (s *stats) merge(o *stats) {
	s.requests += o.requests
	s.completed += o.completed
	s.unfinished += o.unfinished
	s.tokens += o.tokens
	for k, v := range o.errors {
		if s.errors == nil {
			s.errors = map[string]int{}
		}
		s.errors[k] += v
	}
	s.ttft.Merge(&o.ttft)
	s.itl.Merge(&o.itl)
}

// Row is one line of the report. Latencies are in milliseconds, measured at
// the client: TTFT from sending the chat frame to receiving the first
// delta, ITL between consecutive deltas of a request as received (deltas
// that arrive batched in one WebSocket message have a gap of ~0).
type Row struct {
	Name       string         `json:"name"`
	Requests   int            `json:"requests"`
	Completed  int            `json:"completed"`
	Unfinished int            `json:"unfinished"`
	Errors     map[string]int `json:"errors,omitempty"`
	TTFTP50    float64        `json:"ttft_p50_ms"`
	TTFTP99    float64        `json:"ttft_p99_ms"`
	ITLP50     float64        `json:"itl_p50_ms"`
	ITLP99     float64        `json:"itl_p99_ms"`
	ITLMax     float64        `json:"itl_max_ms"`
	Tokens     int            `json:"tokens"`
	// TokensPerSecond is Tokens over the whole run's wall time (the
	// throughput the group got, not one stream's speed).
	TokensPerSecond float64 `json:"tokens_per_s"`
}

// ErrorCount is the sum of Errors.
func (r Row) ErrorCount() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// Report is what a run measured.
type Report struct {
	URL      string  `json:"url"`
	Elapsed  float64 `json:"elapsed_s"`
	Users    int     `json:"users"`
	Connects int     `json:"connects"` // successful connections, reconnects included
	// StopReason says why the run ended: "done" (every user finished its
	// turns), "requests" (the request budget ran out), "duration" or
	// "cancelled".
	StopReason string `json:"stop_reason"`
	Tenants    []Row  `json:"tenants"`
	Priorities []Row  `json:"priorities"`
	Total      Row    `json:"total"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *stats) row(name string, elapsed time.Duration) Row {
	r := Row{
		Name: name, Requests: s.requests, Completed: s.completed, Unfinished: s.unfinished,
		Errors: s.errors, Tokens: s.tokens,
		TTFTP50: ms(s.ttft.Quantile(0.50)), TTFTP99: ms(s.ttft.Quantile(0.99)),
		ITLP50: ms(s.itl.Quantile(0.50)), ITLP99: ms(s.itl.Quantile(0.99)), ITLMax: ms(s.itl.Max()),
	}
	if elapsed > 0 {
		r.TokensPerSecond = float64(s.tokens) / elapsed.Seconds()
	}
	return r
}

// WriteTable prints the report as aligned text: a header, one row per
// tenant, the total, then one row per priority class.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "url %s: %d users, %d connects, %.2fs, stopped: %s\n", r.URL, r.Users, r.Connects, r.Elapsed, r.StopReason)
	header := "\trequests\tok\tunfinished\terrors\tTTFT p50\tTTFT p99\tITL p50\tITL p99\ttokens\ttok/s\terrors by code\t\n"
	line := func(x Row) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%.1f\t%s\t\n",
			x.Name, x.Requests, x.Completed, x.Unfinished, x.ErrorCount(),
			fmtMS(x.TTFTP50), fmtMS(x.TTFTP99), fmtMS(x.ITLP50), fmtMS(x.ITLP99),
			x.Tokens, x.TokensPerSecond, fmtErrors(x.Errors))
	}
	fmt.Fprint(tw, "tenant"+header)
	for _, x := range r.Tenants {
		line(x)
	}
	line(r.Total)
	// A line without cells ends the tenants' column block: the two
	// tables align on their own.
	fmt.Fprint(tw, "\n")
	fmt.Fprint(tw, "priority"+header)
	for _, x := range r.Priorities {
		line(x)
	}
	return tw.Flush()
}

func fmtMS(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	default:
		return fmt.Sprintf("%.0fms", v)
	}
}

func fmtErrors(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
