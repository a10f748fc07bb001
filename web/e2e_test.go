package web_test

// The browser end-to-end test: the real page in headless Chromium against a
// real gateway, Redis and engine. It needs a Chromium (or Chrome) binary on
// PATH; without one it skips, except under CI=true, where it fails.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/engine/spec"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/internal/testmodels"
	"github.com/specgate/specgate/internal/testredis"
	"github.com/specgate/specgate/kernels"
	_ "github.com/specgate/specgate/kernels/cpu"
	"github.com/specgate/specgate/tenants"
	"github.com/specgate/specgate/web"
)

// ArtifactsEnv names the directory that screenshots are written to (a
// fresh temporary directory when unset).
const ArtifactsEnv = "SPECGATE_ARTIFACTS"

// Messages that the test's generator routes to its fakes; anything else
// goes to the real engine.
const (
	slowMarker   = "slow"
	xssMarker    = "markup"
	stuckMarker  = "stuck"   // a few words, then nothing: its server died
	fastMarker   = "flood"   // many long lines as fast as possible
	refuseMarker = "refuse"  // the engine refuses the request
	failMarker   = "explode" // the engine fails after a few words
	tableMarker  = "table"   // a Markdown table and a code block
)

// tableReply is an answer with a table and highlighted code.
var tableReply = []string{
	"Scores:\n\n| Name | Score |\n|:-----|------:|\n| Ada | 10 |\n| Bob | 7 |\n\n",
	"```go\nfunc main() {\n\treturn \"<b>hi</b>\" // done\n}\n```\n",
}

// floodReply is an answer far taller than the window, in big pieces.
func floodReply() []string {
	var out []string
	for i := range 60 {
		out = append(out, fmt.Sprintf("Line %d of a long answer that keeps going and going so that it wraps.\n\n", i))
	}
	return out
}

// xssReply is model output that would run script if the page ever let
// model text become markup. It streams in pieces that split the tags.
var xssReply = []string{
	"Here is markup: ", "<scr", "ipt>alert(1)</scr", "ipt> and <img src=x on", "error=alert(1)> done.",
}

// findChromium returns the browser binary, or skips (fails under CI).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH: CI must run the browser test (install the chromium package)")
	}
	t.Skip("no Chromium on PATH (install chromium to run the browser test)")
	return ""
}

// testGenerator sends messages naming slowMarker to the engine but holds
// their streams after the first word until release is closed, so the test
// can reload mid-answer; messages naming xssMarker get xssReply; the rest
// go to the engine as they are.
type testGenerator struct {
	engine.Generator
	release chan struct{}
	once    sync.Once

	mu   sync.Mutex // protects the field below
	last engine.Request
}

func (g *testGenerator) lastRequest() engine.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

func (g *testGenerator) releaseHeld() { g.once.Do(func() { close(g.release) }) }

func (g *testGenerator) Generate(ctx context.Context, r engine.Request) (engine.Events, error) {
	last := ""
	if n := len(r.Messages); n > 0 {
		last = r.Messages[n-1].Content
	}
	g.mu.Lock()
	g.last = r
	g.mu.Unlock()
	switch {
	case strings.Contains(last, xssMarker):
		return &scriptedStream{ctx: ctx, deltas: xssReply}, nil
	case strings.Contains(last, tableMarker):
		return &scriptedStream{ctx: ctx, deltas: tableReply}, nil
	case strings.Contains(last, fastMarker):
		return &scriptedStream{ctx: ctx, deltas: floodReply()}, nil
	case strings.Contains(last, failMarker):
		return &scriptedStream{ctx: ctx, deltas: []string{"Half an ", "answer"}, fail: &engine.Error{Code: engine.CodeInternal, Message: "the engine failed on purpose"}}, nil
	case strings.Contains(last, stuckMarker):
		return &scriptedStream{ctx: ctx, deltas: []string{"These words ", "arrived before ", "the crash"}, stuck: g.release}, nil
	case strings.Contains(last, refuseMarker):
		return nil, &engine.Error{Code: engine.CodeQueueFull, Message: "the queue is full", Temporary: true}
	case strings.Contains(last, slowMarker):
		s, err := g.Generator.Generate(ctx, r)
		if err != nil {
			return nil, err
		}
		return &heldStream{Events: s, release: g.release}, nil
	}
	return g.Generator.Generate(ctx, r)
}

// heldStream passes the first word of the answer, then waits for release
// before the rest. The engine coalesces deltas that its reader has not
// taken, so the first delta may hold the whole answer: it is split.
type heldStream struct {
	engine.Events
	release <-chan struct{}
	started bool
	rest    string // of the first delta, sent after release
}

func (s *heldStream) Recv(ctx context.Context) (engine.Event, error) {
	if s.started {
		select {
		case <-s.release:
		case <-ctx.Done():
			return engine.Event{}, ctx.Err()
		}
		if s.rest != "" {
			ev := engine.Event{Text: s.rest}
			s.rest = ""
			return ev, nil
		}
		return s.Events.Recv(ctx)
	}
	ev, err := s.Events.Recv(ctx)
	word := strings.IndexFunc(ev.Text, func(r rune) bool { return !unicode.IsSpace(r) })
	if err != nil || word < 0 {
		return ev, err // nothing visible yet
	}
	s.started = true
	if cut := strings.IndexFunc(ev.Text[word:], unicode.IsSpace); cut > 0 {
		cut += word
		s.rest = ev.Text[cut:]
		ev = engine.Event{Seq: ev.Seq, Text: ev.Text[:cut]}
	}
	return ev, nil
}

// scriptedStream plays fixed deltas, then stops; with fail set it ends
// with that error; with stuck set it then sends nothing until stuck is
// closed (a generation whose server died: cancel does not reach it).
type scriptedStream struct {
	ctx    context.Context
	deltas []string
	fail   error
	stuck  <-chan struct{}
	i      int
	ended  bool
}

func (s *scriptedStream) Recv(ctx context.Context) (engine.Event, error) {
	if s.stuck != nil && !s.ended && s.i == len(s.deltas) {
		select {
		case <-s.stuck:
		case <-ctx.Done():
		}
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}}, nil
	}
	switch {
	case s.ended:
		return engine.Event{}, io.EOF
	case s.ctx.Err() != nil:
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}}, nil
	case s.i == len(s.deltas) && s.fail != nil:
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishError, Err: s.fail}}, nil
	case s.i == len(s.deltas):
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 4, CompletionTokens: s.i}}}, nil
	}
	s.i++
	return engine.Event{Seq: s.i, Text: s.deltas[s.i-1]}, nil
}

// chatServer is the service as `specgate serve` wires it: the UI at / and
// the gateway for the API, with one tenant and a signed-in user's token.
type chatServer struct {
	url   string
	token string
	gen   *testGenerator
	gw    *gateway.Server
	model gateway.ModelInfo
	// sign makes a token for another user of the tenant.
	sign func(user string) string
}

// startChatServer serves on the shared test Redis, or on redisSrv when it
// is set (a private server the test may kill).
func startChatServer(t *testing.T, redisSrv ...*testredis.Server) *chatServer {
	t.Helper()
	path := testmodels.Path(t, testmodels.Stories260K)
	var rdb redis.UniversalClient
	prefix := ""
	if len(redisSrv) > 0 {
		rdb = redisSrv[0].Client()
	} else {
		rdb = testredis.Client(t)
		prefix = testredis.Prefix(t)
	}
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	// The model's Q8_0 file drafts a fixed chain for it, so every answer
	// has speculation's counts to show (the default dispatcher may leave
	// drafting off on a model this small).
	draft, err := model.Load(testmodels.Path(t, testmodels.Stories260KQ8_0), be)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(m, engine.Options{Speculation: engine.Speculation{Drafter: engine.DraftModel, Model: draft, Dispatcher: spec.Fixed(spec.Chain(4))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	gen := &testGenerator{Generator: eng, release: make(chan struct{})}
	c := m.Config()
	info := gateway.ModelInfo{Name: "stories260K", Arch: c.Arch, Context: c.Context, Quantization: c.WeightType.String()}
	gw, err := gateway.New(gateway.Options{
		Redis:          rdb,
		Prefix:         prefix,
		Generator:      gen,
		Model:          &info,
		ModelName:      info.Name,
		PersistTimeout: 2 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	for _, p := range []string{"/v1/", "/metrics", "/healthz", "/readyz"} {
		mux.Handle(p, gw.Handler())
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		hs.Close()
	})
	// Registered after Shutdown's cleanup, so it runs before it: a held
	// turn must end for Shutdown to finish.
	t.Cleanup(gen.releaseHeld)

	key, err := tenants.NewHS256Key("web-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Tenants().Create(context.Background(), tenants.Tenant{ID: "webco", Priority: tenants.Interactive, Keys: []tenants.Key{key}}); err != nil {
		t.Fatal(err)
	}
	sign := func(user string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": user, "aud": "specgate", "exp": time.Now().Add(10 * time.Minute).Unix(),
		})
		tok.Header["kid"] = key.ID
		signed, err := tok.SignedString(key.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	return &chatServer{url: hs.URL + "/", token: sign("tester"), gen: gen, gw: gw, model: info, sign: sign}
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context. Dialogs (alert) and uncaught page errors are counted.
type browser struct {
	t       *testing.T
	ctx     context.Context
	dir     string // artifacts
	dialogs atomic.Int32
	mu      sync.Mutex // protects the field below
	errs    []string
}

func startBrowser(t *testing.T, exe, artifacts string) *browser {
	t.Helper()
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 800),
		chromedp.DisableGPU,
		chromedp.NoSandbox,
		// The machine may have no network: without these Chromium keeps
		// trying to reach its services and its connections are refused.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t, dir: artifacts}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.dialogs.Add(1)
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := fmt.Sprintf("%s (%s:%d:%d)", d.Text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
			if d.Exception != nil && d.Exception.Description != "" {
				msg = d.Exception.Description + " " + msg
			}
			b.mu.Lock()
			b.errs = append(b.errs, msg)
			b.mu.Unlock()
		}
	}))
	// Cleanups run last-in first-out: the browser exits before its profile
	// directory is removed.
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	b.ctx = ctx
	return b
}

// do runs steps, failing the test with what.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v%s%s", what, err, b.pageErrors(), b.failureArtifacts())
	}
}

// failureArtifacts saves a screenshot and the messages' HTML of a failed
// step, for the failure message; it never fails the test itself.
func (b *browser) failureArtifacts() string {
	if b.dir == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var out strings.Builder
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		p := filepath.Join(b.dir, "failure.png")
		if os.WriteFile(p, png, 0o644) == nil {
			fmt.Fprintf(&out, "\nscreenshot: %s", p)
		}
	}
	if html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("app")?.outerHTML ?? document.body.outerHTML`)); err == nil {
		p := filepath.Join(b.dir, "failure.html")
		if os.WriteFile(p, []byte(html), 0o644) == nil {
			fmt.Fprintf(&out, "\npage: %s", p)
		}
	}
	return out.String()
}

// waitJS waits until the JavaScript expression is truthy.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	b.do("wait for "+what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second)))
}

func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v%s", expr, err, b.pageErrors())
	}
	return v
}

func (b *browser) pageErrors() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) == 0 {
		return ""
	}
	return "\npage errors:\n  " + strings.Join(b.errs, "\n  ")
}

// screenshot writes the viewport as a PNG into the artifacts directory.
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}

func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// JavaScript snippets over the page's stable test ids.
const (
	jsConnected  = `!!document.querySelector('[data-testid=conn-status][data-state=connected]')`
	jsAssistants = `[...document.querySelectorAll('[data-testid=message][data-role=assistant]')]`
	jsUsers      = `[...document.querySelectorAll('[data-testid=message][data-role=user]')]`
	jsLast       = jsAssistants + `.at(-1)`
)

// bubble is what the test reads of one assistant message.
type bubble struct {
	State string `json:"state"`
	Text  string `json:"text"`
}

func (b *browser) assistants() []bubble {
	b.t.Helper()
	return evalJS[[]bubble](b, jsAssistants+`.map(a => ({state: a.dataset.state || "", text: a.querySelector('[data-testid=message-body]').textContent}))`)
}

func (b *browser) send(text string) {
	b.t.Helper()
	b.do("type "+text,
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=message-input]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=message-input]`), text),
		chromedp.WaitEnabled(chromedp.CSS(`[data-testid=send]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
	)
}

// sendAndFinish sends text as a new message of the open chat and waits for
// its answer to end; it returns the answer.
func (b *browser) sendAndFinish(text string) bubble {
	b.t.Helper()
	before := len(b.assistants())
	b.send(text)
	b.waitJS("the answer to "+text, fmt.Sprintf(`%s.length === %d && %s.dataset.state !== "streaming"`, jsAssistants, before+1, jsLast))
	all := b.assistants()
	last := all[len(all)-1]
	if last.State != "done" || strings.TrimSpace(last.Text) == "" {
		b.t.Fatalf("have answer %+v to %q; want a done answer with text%s", last, text, b.pageErrors())
	}
	return last
}

func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestBrowserChat(t *testing.T) {
	exe := findChromium(t)
	srv := startChatServer(t)
	art := artifactsDir(t)
	b := startBrowser(t, exe, art)
	start := time.Now()

	// Sign in by pasting the token.
	b.do("sign in",
		chromedp.Navigate(srv.url),
		chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.SetValue(chromedp.ID("token-input"), srv.token),
		chromedp.Click(chromedp.ID("signin-button")),
	)
	b.waitJS("connected", jsConnected)
	// The composer was sized while the sign-in screen hid it: it must
	// still show a whole line (it once came up 0 px tall, its text cut).
	if !evalJS[bool](b, `(() => { const i = document.querySelector('[data-testid=message-input]'); return i.clientHeight >= parseFloat(getComputedStyle(i).lineHeight); })()`) {
		t.Fatalf("the message box is shorter than one line after sign-in: %s", b.failureArtifacts())
	}
	// Short answers keep the test fast and the history inside the tiny
	// model's context.
	b.do("set max tokens",
		chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=set-max-tokens]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=set-max-tokens]`), "40"),
		chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)),
	)

	// A first message: the real model's answer streams in and completes.
	first := b.sendAndFinish("Once upon a time there was a cat")
	t.Logf("answer: %q", first.Text)
	// Its stats show what speculation did: the draft tokens verified and
	// the ones kept.
	stats := evalJS[string](b, jsLast+`.querySelector('[data-testid=message-stats]')?.textContent ?? ""`)
	kept, drafted := -1, -1
	for _, part := range strings.Split(stats, " · ") {
		if strings.HasSuffix(part, " drafts accepted") {
			fmt.Sscanf(part, "%d of %d drafts accepted", &kept, &drafted)
		}
	}
	if drafted <= 0 || kept < 0 || kept > drafted {
		t.Errorf("have stats %q; want \"K of N drafts accepted\" with 0 ≤ K ≤ N, N > 0", stats)
	}
	if n := evalJS[int](b, `document.querySelectorAll('[data-testid=session-item]').length`); n != 1 {
		t.Fatalf("have %d chats in the list; want 1", n)
	}
	firstSession := evalJS[string](b, `document.querySelector('[data-testid=session-item]').dataset.sessionId`)

	// Reload while an answer streams: the page resumes it to the end.
	b.send("Tell me a slow story about a dog")
	b.waitJS("the held answer's first text", jsLast+`?.dataset.state === "streaming" && `+jsLast+`.textContent.trim().length > 0`)
	partial := evalJS[string](b, jsLast+`.querySelector('[data-testid=message-body]').textContent`)
	b.do("reload", chromedp.Reload())
	b.waitJS("connected after reload", jsConnected)
	b.waitJS("the resumed answer", jsLast+`?.dataset.state === "streaming"`)
	srv.gen.releaseHeld()
	b.waitJS("the resumed answer to finish", jsLast+`?.dataset.state !== "streaming"`)
	all := b.assistants()
	if len(all) != 2 {
		t.Fatalf("have %d answers after the reload; want 2: %+v", len(all), all)
	}
	resumed := all[1]
	if resumed.State != "done" || !strings.HasPrefix(normalize(resumed.Text), normalize(partial)) || len(resumed.Text) <= len(partial) {
		t.Fatalf("have %+v; want a done answer that continues %q", resumed, partial)
	}
	if n := evalJS[int](b, jsUsers+`.length`); n != 2 {
		t.Fatalf("have %d user messages; want 2", n)
	}
	// What the page shows is what the server stored.
	v, err := srv.gw.Sessions().Get(context.Background(), "webco", "tester", firstSession)
	if err != nil || len(v.Messages) != 4 || normalize(v.Messages[3].Content) != normalize(resumed.Text) {
		t.Fatalf("have stored %+v, %v; want the resumed answer %q", v, err, resumed.Text)
	}

	// A new chat whose answer is hostile markup: shown as text, never run.
	b.do("new chat", chromedp.Click(chromedp.CSS(`[data-testid=new-session]`)))
	b.waitJS("an empty chat", jsAssistants+`.length === 0`)
	xss := b.sendAndFinish("Show me some markup")
	checkNoMarkup := func(when string) {
		t.Helper()
		body := evalJS[string](b, jsLast+`.querySelector('[data-testid=message-body]').textContent`)
		for _, want := range []string{"<script>alert(1)</script>", "<img src=x onerror=alert(1)>"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: have %q; want the literal text %q", when, body, want)
			}
		}
		if n := evalJS[int](b, `document.querySelectorAll('#messages script, #messages img, #messages [onerror]').length`); n != 0 {
			t.Errorf("%s: have %d script/img elements in the messages; want none", when, n)
		}
		if n := b.dialogs.Load(); n != 0 {
			t.Errorf("%s: have %d dialogs opened; want none", when, n)
		}
	}
	checkNoMarkup("live")
	if want := strings.Join(xssReply, ""); normalize(xss.Text) != normalize(want) {
		t.Errorf("have %q; want %q", xss.Text, want)
	}
	b.screenshot(art, "chat-desktop.png")
	// A long chat title ellipsizes; it does not widen the sidebar.
	if wide := evalJS[bool](b, `(() => { const n = document.querySelector('.session-nav'); return n.scrollWidth > n.clientWidth })()`); wide {
		t.Errorf("have the chat list wider than the sidebar; want long titles cut short")
	}

	// Switch between the two chats: each shows its own history.
	if n := evalJS[int](b, `document.querySelectorAll('[data-testid=session-item]').length`); n != 2 {
		t.Fatalf("have %d chats in the list; want 2", n)
	}
	b.do("open the first chat", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid=session-item][data-session-id=%q] [data-testid=session-open]`, firstSession))))
	b.waitJS("the first chat's history", jsAssistants+`.length === 2 && `+jsUsers+`[0]?.textContent.includes("Once upon a time there was a cat")`)
	got := b.assistants()
	if normalize(got[0].Text) != normalize(first.Text) || normalize(got[1].Text) != normalize(resumed.Text) || got[0].State != "done" || got[1].State != "done" {
		t.Fatalf("have %+v; want the first chat's two answers", got)
	}
	if title := evalJS[string](b, `document.querySelector('[data-testid=session-title]').textContent`); !strings.Contains(title, "Once upon a time") {
		t.Errorf("have title %q; want the first chat's", title)
	}
	// A chat opened from its history is idle: Send, not Stop, and it takes
	// a new message.
	if idle := evalJS[bool](b, `!document.querySelector('[data-testid=send]').hidden && document.querySelector('[data-testid=stop]').hidden`); !idle {
		t.Fatalf("have the composer offering Stop in an idle chat; want Send")
	}
	third := b.sendAndFinish("And then the cat")
	if n := len(b.assistants()); n != 3 || third.Text == "" {
		t.Fatalf("have %d answers; want 3", n)
	}
	b.do("open the markup chat", chromedp.Click(chromedp.CSS(`[data-testid=session-item]:not([aria-current]) [data-testid=session-open]`)))
	b.waitJS("the markup chat's history", jsAssistants+`.length === 1 && `+jsUsers+`[0]?.textContent.includes("Show me some markup")`)
	checkNoMarkup("from history")

	// The phone layout: the same chat in a narrow viewport.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	// The sidebar slides off screen (a transition) when the width shrinks.
	b.waitJS("the phone layout", `innerWidth === 390 && document.getElementById("sidebar").getBoundingClientRect().right <= 0`)
	if overflow := evalJS[bool](b, `document.documentElement.scrollWidth > innerWidth`); overflow {
		t.Errorf("have a page wider than the phone's viewport; want no horizontal scroll")
	}
	b.screenshot(art, "chat-phone.png")
	b.do("open the chats on the phone", chromedp.Click(chromedp.ID("sidebar-toggle")))
	b.waitJS("the sidebar", `document.getElementById("sidebar").getBoundingClientRect().left === 0`)
	b.screenshot(art, "chat-phone-sidebar.png")
	// A tap on the dimmed chat beside the sidebar closes it.
	b.do("close the chats", chromedp.MouseClickXY(375, 400))
	b.waitJS("the sidebar to close", `document.getElementById("sidebar").getBoundingClientRect().right <= 0`)

	if errs := b.pageErrors(); errs != "" {
		t.Errorf("have uncaught page errors; want none%s", errs)
	}
	t.Logf("browser flow took %v", time.Since(start).Round(time.Millisecond))
}

// waitAnswer waits until the page shows n answers and the last has ended.
func (b *browser) waitAnswer(what string, n int) bubble {
	b.t.Helper()
	b.waitJS(what, fmt.Sprintf(`%s.length === %d && %s.dataset.state !== "streaming"`, jsAssistants, n, jsLast))
	all := b.assistants()
	return all[len(all)-1]
}

// colorScheme emulates the system's light or dark preference.
func (b *browser) colorScheme(v string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}},
	})
	if err != nil {
		b.t.Fatalf("color scheme %s: %v", v, err)
	}
}

// setInput replaces the composer's text as typing would.
func (b *browser) setInput(text string) {
	b.t.Helper()
	b.do("set the input", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const i = document.querySelector('[data-testid=message-input]'); i.value = %q; i.dispatchEvent(new Event("input")); })()`, text)))
}

func (b *browser) reload() {
	b.t.Helper()
	b.do("reload", chromedp.Reload())
	b.waitJS("connected after reload", jsConnected)
}

const jsNote = jsLast + `.querySelector('[data-testid=message-note]')?.textContent ?? ""`

// TestBrowserChatItems walks through what users of a chat UI expect, each
// as a user would do it: the model's name, a system prompt, regenerate and
// edit kept as versions on the server, tables and highlighted code with a
// copy button, following a fast answer, refusals that lose nothing, an
// error that survives a reload, a sign-in link pasted into an open tab,
// answers cut by a dead server, Redis going away and coming back, and the
// layout at desktop and phone sizes.
func TestBrowserChatItems(t *testing.T) {
	exe := findChromium(t)
	rs := testredis.Start(t)
	srv := startChatServer(t, rs)
	art := artifactsDir(t)
	b := startBrowser(t, exe, art)
	ctx := context.Background()
	start := time.Now()

	b.do("open the sign-in link", chromedp.Navigate(srv.url+"#token="+srv.token))
	b.waitJS("connected", jsConnected)
	if h := evalJS[string](b, `location.hash`); h != "" {
		t.Errorf("have hash %q after sign-in; want the token out of the address bar", h)
	}
	// A dead server's answer is given up after 1.5 s instead of 45 s.
	b.do("shorten the stall timeout", chromedp.Evaluate[chromedp.Void](`localStorage.setItem("specgate.stallMs", "1500")`))
	b.reload()

	// The model is named in the top bar.
	model := evalJS[string](b, `document.querySelector('[data-testid=model-info]').textContent`)
	for _, want := range []string{srv.model.Name, srv.model.Arch, srv.model.Quantization, fmt.Sprint(srv.model.Context)} {
		if !strings.Contains(model, want) {
			t.Errorf("have model %q; want it to name %q", model, want)
		}
	}

	// A system prompt and settings for the new chat go with it to the
	// server and, through the chat template, to the model.
	b.do("settings",
		chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=set-system]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=set-system]`), "You tell short stories."),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=set-max-tokens]`), "30"),
		chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)),
	)
	b.sendAndFinish("Once upon a time there was a cat")
	sid := evalJS[string](b, `localStorage.getItem("specgate.session")`)
	req := srv.gen.lastRequest()
	if len(req.Messages) < 2 || req.Messages[0].Role != "system" || req.Messages[0].Content != "You tell short stories." || req.MaxTokens != 30 {
		t.Fatalf("have engine request %+v; want the system prompt first and max_tokens 30", req)
	}
	if v, err := srv.gw.Sessions().Get(ctx, "webco", "tester", sid); err != nil || v.System != "You tell short stories." || v.Params == nil || v.Params.MaxTokens != 30 {
		t.Fatalf("have stored session %+v, %v; want its system prompt and settings", v, err)
	}

	// Regenerate replaces the answer on the server; the old one is the
	// previous version of the turn, a click away.
	old := b.sendAndFinish("The cat saw a dog")
	b.do("regenerate", chromedp.Click(chromedp.CSS(`[data-testid=message][data-role=assistant]:last-of-type [data-testid=regenerate]`)))
	b.waitJS("the version pager", `document.querySelector('[data-testid=branch-label]')?.textContent === "2/2"`)
	regen := b.assistants()
	if len(regen) != 2 || regen[1].State != "done" {
		t.Fatalf("have %+v after regenerate; want two answers", regen)
	}
	stored := func() *gateway.SessionView {
		t.Helper()
		v, err := srv.gw.Sessions().Get(ctx, "webco", "tester", sid)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := stored(); len(v.Messages) != 4 || v.Messages[2].Content != "The cat saw a dog" || len(v.Branches) != 1 || v.Branches[0].Count != 2 {
		t.Fatalf("have stored %+v; want the question once and two versions of its answer", v)
	}
	b.do("previous version", chromedp.Click(chromedp.CSS(`[data-testid=branch-prev]`)))
	b.waitJS("version 1", `document.querySelector('[data-testid=branch-label]')?.textContent === "1/2"`)
	b.reload()
	b.waitJS("version 1 after reload", `document.querySelector('[data-testid=branch-label]')?.textContent === "1/2" && `+jsUsers+`.length === 2`)
	if got := b.assistants(); normalize(got[1].Text) != normalize(old.Text) {
		t.Errorf("have %q as version 1; want the first answer %q", got[1].Text, old.Text)
	}
	// Edit the second question: a third version of that turn.
	b.do("edit",
		chromedp.Click(chromedp.CSS(`[data-testid=message][data-role=user]:nth-last-of-type(2) [data-testid=edit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=edit-input]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=edit-input]`), "The cat saw a bird"),
		chromedp.Click(chromedp.CSS(`[data-testid=edit-send]`)),
	)
	b.waitJS("the edited turn", `document.querySelector('[data-testid=branch-label]')?.textContent === "3/3" && `+jsLast+`.dataset.state === "done"`)
	if users := evalJS[[]string](b, jsUsers+`.map(u => u.querySelector('[data-testid=message-body]').textContent)`); len(users) != 2 || users[1] != "The cat saw a bird" {
		t.Fatalf("have questions %q; want the edited one second", users)
	}
	if v := stored(); len(v.Messages) != 4 || v.Messages[2].Content != "The cat saw a bird" || v.Branches[0].Count != 3 {
		t.Fatalf("have stored %+v; want the edit as the third version", v)
	}
	b.screenshot(art, "branches-desktop.png")

	// Tables and highlighted code with a copy button; markup stays text.
	b.sendAndFinish("Show a table")
	if pager := evalJS[[]bool](b, `[...document.querySelectorAll('[data-testid=branch-prev], [data-testid=branch-next]')].map(x => x.disabled)`); len(pager) != 2 || pager[0] || !pager[1] {
		t.Errorf("have pager buttons disabled %v after an answer; want previous enabled, next at the end", pager)
	}
	cells := evalJS[[]string](b, jsLast+` && [...`+jsLast+`.querySelectorAll('table th, table td')].map(c => c.textContent + "|" + (c.dataset.align || ""))`)
	if want := []string{"Name|left", "Score|right", "Ada|left", "10|right", "Bob|left", "7|right"}; strings.Join(cells, ",") != strings.Join(want, ",") {
		t.Errorf("have table cells %q; want %q", cells, want)
	}
	if n := evalJS[int](b, jsLast+`.querySelectorAll('pre code span.tok-kw, pre code span.tok-str, pre code span.tok-com').length`); n < 3 {
		t.Errorf("have %d highlighted tokens; want keywords, strings and comments marked", n)
	}
	if n := evalJS[int](b, `document.querySelectorAll('#messages b, #messages script').length`); n != 0 {
		t.Errorf("have %d elements made from model text; want none", n)
	}
	b.do("copy the code", chromedp.Click(chromedp.CSS(`[data-testid=message][data-role=assistant]:last-of-type [data-testid=code-copy]`)))
	b.waitJS("copied", jsLast+`.querySelector('[data-testid=code-copy]').dataset.copied === "true"`)
	b.screenshot(art, "table-code-desktop.png")
	b.colorScheme("dark")
	b.screenshot(art, "table-code-desktop-dark.png")
	b.colorScheme("light")

	// A fast answer, many lines a frame: the view follows it to the end.
	b.sendAndFinish("Give me a flood of text")
	if gap := evalJS[float64](b, `(() => { const m = document.getElementById("messages"); return m.scrollHeight - m.scrollTop - m.clientHeight })()`); gap > 2 {
		t.Errorf("have the view %v px above the end of a fast answer; want it followed", gap)
	}

	// An answer cut by an engine error keeps its text and says why, also
	// after a reload; notes and stats of earlier answers stay too.
	b.send("Now explode")
	failed := b.waitAnswer("the failed answer", 5)
	if failed.State != "error" || !strings.Contains(failed.Text, "Half an answer") || !strings.Contains(evalJS[string](b, jsNote), "the engine failed on purpose") {
		t.Fatalf("have %+v, note %q; want the partial text and the error", failed, evalJS[string](b, jsNote))
	}
	stats := evalJS[int](b, `document.querySelectorAll('[data-testid=message-stats]').length`)
	b.reload()
	b.waitJS("the history", jsAssistants+`.length === 5`)
	if note := evalJS[string](b, jsNote); !strings.Contains(note, "the engine failed on purpose") {
		t.Errorf("have note %q after reload; want the error text", note)
	}
	if n := evalJS[int](b, `document.querySelectorAll('[data-testid=message-stats]').length`); n < stats || n < 4 {
		t.Errorf("have %d answers with stats after reload; want %d", n, stats)
	}

	// A refused request is not history: the question goes back to the
	// input and the reason is said once.
	b.send("Please refuse this")
	b.waitJS("the refusal", `!document.getElementById("banner").hidden && document.getElementById("banner-text").textContent.includes("the queue is full")`)
	if in := evalJS[string](b, `document.querySelector('[data-testid=message-input]').value`); in != "Please refuse this" {
		t.Errorf("have input %q; want the refused question back", in)
	}
	for _, when := range []string{"after the refusal", "after a reload"} {
		if n := evalJS[int](b, jsUsers+`.filter(u => u.textContent.includes("refuse")).length`); n != 0 {
			t.Errorf("%s: have the refused question on the page %d times; want 0", when, n)
		}
		if when == "after the refusal" {
			b.reload()
			b.waitJS("the history", jsAssistants+`.length === 5`)
		}
	}
	for _, m := range stored().Messages {
		if strings.Contains(m.Content, "refuse") {
			t.Fatalf("have the refused question stored: %+v", m)
		}
	}
	b.setInput("")

	// A sign-in link pasted into the open tab signs in at once.
	b.do("paste another user's link", chromedp.Navigate(srv.url+"#token="+srv.sign("second")))
	b.waitJS("the second user", `document.querySelector('[data-testid=whoami]').textContent.startsWith("second") && `+jsConnected)
	if n := evalJS[int](b, `document.querySelectorAll('[data-testid=session-item]').length`); n != 0 {
		t.Errorf("have %d chats for a new user; want 0", n)
	}
	b.do("back to the first user", chromedp.Navigate(srv.url+"#token="+srv.token))
	b.waitJS("the first user", `document.querySelector('[data-testid=whoami]').textContent.startsWith("tester") && `+jsConnected+` && document.querySelectorAll('[data-testid=session-item]').length === 1`)

	// An answer whose server died mid-way does not stream forever: it is
	// marked, with its text, also after a reload; Stop keeps the text too.
	b.do("new chat", chromedp.Click(chromedp.CSS(`[data-testid=new-session]`)))
	b.send("Tell a stuck story")
	// A reload while it streams resumes it; then it falls silent.
	b.waitJS("the stuck answer's text", jsLast+`?.textContent.includes("before the crash")`)
	b.reload()
	cut := b.waitAnswer("the cut answer", 1)
	if cut.State != "interrupted" || !strings.Contains(cut.Text, "before the crash") {
		t.Fatalf("have %+v; want the answer marked interrupted with its text", cut)
	}
	b.send("Another stuck story")
	b.waitJS("the second cut answer's text", jsLast+`?.textContent.includes("before the crash") && `+jsAssistants+`.length === 2`)
	b.do("stop", chromedp.Click(chromedp.CSS(`[data-testid=stop]`)))
	stopped := b.waitAnswer("the stopped answer", 2)
	if stopped.State != "cancelled" || !strings.Contains(stopped.Text, "before the crash") || evalJS[string](b, jsNote) != "Stopped." {
		t.Fatalf("have %+v, note %q; want it stopped with its text", stopped, evalJS[string](b, jsNote))
	}
	b.reload()
	b.waitJS("the cut answers after reload", jsAssistants+`.length === 2`)
	for i, a := range b.assistants() {
		if a.State == "streaming" || !strings.Contains(a.Text, "before the crash") {
			t.Errorf("answer %d after reload: have %+v; want its text, not streaming", i, a)
		}
	}
	if idle := evalJS[bool](b, `!document.querySelector('[data-testid=send]').hidden`); !idle {
		t.Errorf("have Stop offered after reload; want Send")
	}
	b.screenshot(art, "interrupted-desktop.png")

	// Redis goes away: starting a chat keeps the text and says so once;
	// a reload does not sign out; Redis back, the page reconnects and the
	// kept text goes out.
	rs.Kill()
	b.do("new chat", chromedp.Click(chromedp.CSS(`[data-testid=new-session]`)))
	b.send("Hello while the store is down")
	b.waitJS("the banner", `!document.getElementById("banner").hidden && document.getElementById("banner-text").textContent.includes("Could not start a chat")`)
	banner := evalJS[string](b, `document.getElementById("banner-text").textContent`)
	time.Sleep(1500 * time.Millisecond)
	if again := evalJS[string](b, `document.getElementById("banner-text").textContent`); again != banner || evalJS[int](b, `document.querySelectorAll('[data-testid=banner]:not([hidden])').length`) != 1 {
		t.Errorf("have banner %q then %q; want one banner", banner, again)
	}
	if in := evalJS[string](b, `document.querySelector('[data-testid=message-input]').value`); in != "Hello while the store is down" {
		t.Errorf("have input %q; want the text kept", in)
	}
	b.screenshot(art, "redis-down-desktop.png")
	b.do("reload while Redis is down", chromedp.Reload())
	b.waitJS("a temporary refusal", `document.querySelector('[data-testid=conn-status]').dataset.state === "reconnecting" && document.querySelector('[data-testid=conn-status]').textContent.includes("unavailable")`)
	if signedOut := evalJS[bool](b, `!document.getElementById("signin").hidden || !localStorage.getItem("specgate.token")`); signedOut {
		t.Fatalf("have the page signed out while Redis is down; want it to keep the sign-in and retry")
	}
	rs.Restart()
	b.waitJS("reconnected after Redis returns", jsConnected)
	b.do("send the kept text", chromedp.Click(chromedp.CSS(`[data-testid=send]`)))
	b.waitAnswer("the answer after the outage", 1)

	// Layout: titles use the sidebar's width; the settings card keeps clear
	// of the edges at desktop and phone sizes.
	cutTitles := evalJS[[]string](b, `[...document.querySelectorAll('[data-testid=session-open]')].filter(o => o.clientWidth < o.closest('.session-list').clientWidth - 24).map(o => o.textContent)`)
	if len(cutTitles) > 0 {
		t.Errorf("have titles %q narrower than the sidebar; want the full width for titles", cutTitles)
	}
	b.do("open settings", chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)))
	b.waitJS("settings open", `document.querySelector('[data-testid=settings]').open`)
	checkCard := func(size string) {
		t.Helper()
		margins := evalJS[[]float64](b, `(() => { const c = document.querySelector('.settings-grid').getBoundingClientRect(); const m = document.querySelector('.main').getBoundingClientRect(); return [c.left - m.left, m.right - c.right, document.documentElement.scrollWidth - innerWidth] })()`)
		if margins[0] < 6 || margins[1] < 6 || margins[2] > 0 {
			t.Errorf("%s: have the settings card %v px from the left and %v px from the right edge, page %v px too wide; want it clear of both", size, margins[0], margins[1], margins[2])
		}
	}
	checkCard("1280 px")
	b.screenshot(art, "settings-desktop.png")
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.waitJS("the phone layout", `innerWidth === 390 && document.getElementById("sidebar").getBoundingClientRect().right <= 0`)
	checkCard("390 px")
	b.screenshot(art, "settings-phone.png")
	b.do("close settings", chromedp.Click(chromedp.CSS(`[data-testid=settings] summary`)))
	b.do("open the chat with versions", chromedp.Click(chromedp.ID("sidebar-toggle")))
	b.waitJS("the sidebar", `document.getElementById("sidebar").getBoundingClientRect().left === 0`)
	b.screenshot(art, "sidebar-phone.png")
	b.do("open it", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid=session-item][data-session-id=%q] [data-testid=session-open]`, sid))))
	b.waitJS("its history", jsAssistants+`.length === 5 && document.getElementById("sidebar").getBoundingClientRect().right <= 0`)
	if overflow := evalJS[bool](b, `document.documentElement.scrollWidth > innerWidth`); overflow {
		t.Errorf("have a page wider than the phone; want tables and code to scroll inside their answer")
	}
	b.do("show the table", chromedp.Evaluate[chromedp.Void](`document.querySelector("#messages table").scrollIntoView({block: "start"})`))
	b.screenshot(art, "chat-phone-table.png")

	if errs := b.pageErrors(); errs != "" {
		t.Errorf("have uncaught page errors; want none%s", errs)
	}
	t.Logf("browser flow took %v", time.Since(start).Round(time.Millisecond))
}
