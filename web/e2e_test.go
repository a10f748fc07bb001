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

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	_ "github.com/specgate/specgate/engine/model/llama"
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
	slowMarker = "slow"
	xssMarker  = "markup"
)

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
	gateway.Generator
	release chan struct{}
	once    sync.Once
}

func (g *testGenerator) releaseHeld() { g.once.Do(func() { close(g.release) }) }

func (g *testGenerator) Submit(ctx context.Context, r engine.Request) (gateway.EventStream, error) {
	last := ""
	if n := len(r.Messages); n > 0 {
		last = r.Messages[n-1].Content
	}
	switch {
	case strings.Contains(last, xssMarker):
		return &scriptedStream{ctx: ctx, deltas: xssReply}, nil
	case strings.Contains(last, slowMarker):
		s, err := g.Generator.Submit(ctx, r)
		if err != nil {
			return nil, err
		}
		return &heldStream{EventStream: s, release: g.release}, nil
	}
	return g.Generator.Submit(ctx, r)
}

// heldStream passes the first word of the answer, then waits for release
// before the rest. The engine coalesces deltas that its reader has not
// taken, so the first delta may hold the whole answer: it is split.
type heldStream struct {
	gateway.EventStream
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
		return s.EventStream.Recv(ctx)
	}
	ev, err := s.EventStream.Recv(ctx)
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

// scriptedStream plays fixed deltas, then stops.
type scriptedStream struct {
	ctx    context.Context
	deltas []string
	i      int
	ended  bool
}

func (s *scriptedStream) Recv(ctx context.Context) (engine.Event, error) {
	switch {
	case s.ended:
		return engine.Event{}, io.EOF
	case s.ctx.Err() != nil:
		s.ended = true
		return engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}}, nil
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
}

func startChatServer(t *testing.T) *chatServer {
	t.Helper()
	path := testmodels.Path(t, testmodels.Stories260K)
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	be, err := kernels.Open("cpu", kernels.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, be)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(m, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	gen := &testGenerator{Generator: gateway.Adapt(eng.Submit, eng.Cancel), release: make(chan struct{})}
	gw, err := gateway.New(gateway.Options{
		Redis:     rdb,
		Prefix:    prefix,
		Generator: gen,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "tester", "aud": "specgate", "exp": time.Now().Add(10 * time.Minute).Unix(),
	})
	tok.Header["kid"] = key.ID
	signed, err := tok.SignedString(key.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return &chatServer{url: hs.URL + "/", token: signed, gen: gen, gw: gw}
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
