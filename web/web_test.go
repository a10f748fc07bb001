package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestHandlerServesFiles(t *testing.T) {
	h := Handler()
	tests := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="app.js">`},
		{"/index.html", "text/html; charset=utf-8", `data-testid="message-input"`},
		{"/app.js", "text/javascript; charset=utf-8", "ChatClient"},
		{"/client.js", "text/javascript; charset=utf-8", "session.resume"},
		{"/markdown.js", "text/javascript; charset=utf-8", "export function render"},
		{"/style.css", "text/css; charset=utf-8", "prefers-color-scheme"},
		{"/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("have status %d; want 200", rec.Code)
			}
			if have := rec.Header().Get("Content-Type"); have != tt.contentType {
				t.Errorf("have Content-Type %q; want %q", have, tt.contentType)
			}
			if have := rec.Header().Get("Cache-Control"); have != "no-cache" {
				t.Errorf("have Cache-Control %q; want no-cache", have)
			}
			if have := rec.Header().Get("X-Content-Type-Options"); have != "nosniff" {
				t.Errorf("have X-Content-Type-Options %q; want nosniff", have)
			}
			if rec.Header().Get("ETag") == "" {
				t.Errorf("have no ETag; want one")
			}
			if !strings.Contains(rec.Body.String(), tt.contains) {
				t.Errorf("have body without %q", tt.contains)
			}
		})
	}
}

func TestHandlerCSP(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host = "chat.example:8080"
	Handler().ServeHTTP(rec, req)
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "ws://chat.example:8080", "wss://chat.example:8080", "object-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("have CSP %q; want it to contain %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("have CSP %q; want no unsafe-* sources", csp)
	}
}

func TestHandlerErrorsAndRevalidation(t *testing.T) {
	h := Handler()
	tests := []struct {
		name, method, path string
		header             map[string]string
		want               int
	}{
		{"unknown file", http.MethodGet, "/nope.js", nil, http.StatusNotFound},
		{"no directory listing", http.MethodGet, "/static/", nil, http.StatusNotFound},
		{"dot dot", http.MethodGet, "/../web.go", nil, http.StatusNotFound},
		{"post", http.MethodPost, "/", nil, http.StatusMethodNotAllowed},
		{"head", http.MethodHead, "/app.js", nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("have status %d; want %d", rec.Code, tt.want)
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/app.js", nil))
	req := httptest.NewRequest(http.MethodGet, "/app.js", nil)
	req.Header.Set("If-None-Match", rec.Header().Get("ETag"))
	rec2 := httptest.NewRecorder()
	h.ServeHTTP(rec2, req)
	if rec2.Code != http.StatusNotModified {
		t.Errorf("have status %d on revalidation; want 304", rec2.Code)
	}
}

// TestNoHTMLSinks keeps model text out of HTML parsing: the UI builds DOM
// nodes, never HTML strings.
func TestNoHTMLSinks(t *testing.T) {
	sinks := regexp.MustCompile(`\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML|document\.write|\beval\(|new Function\(|createContextualFragment`)
	err := fs.WalkDir(Files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".js" {
			return err
		}
		b, err := Files.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if sinks.MatchString(line) {
				t.Errorf("%s:%d uses an HTML sink: %s", p, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTestIDs pins the hooks the browser end-to-end test relies on.
func TestTestIDs(t *testing.T) {
	b, err := Files.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"signin", "token-input", "signin-button", "signin-error", "session-list", "new-session",
		"message-input", "send", "stop", "messages", "conn-status", "banner", "settings", "set-schema", "signout"} {
		if !strings.Contains(string(b), `data-testid="`+id+`"`) {
			t.Errorf("index.html has no data-testid=%q", id)
		}
	}
}

// TestJS runs the JavaScript unit tests (Markdown escaping, the protocol
// client) when Node is installed; Node is not a build dependency.
func TestJS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed; skipping the JavaScript unit tests")
	}
	files, err := filepath.Glob(filepath.Join("jstest", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no JavaScript tests found (%v)", err)
	}
	out, err := exec.Command(node, append([]string{"--test"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
}
