// Package web is the browser chat UI: static HTML, CSS and JavaScript
// modules embedded in the binary, so the service needs no Node build and no
// network access to serve it.
//
// The page talks to the gateway over GET /v1/ws (protocol v1, DESIGN.md) on
// the same host it was loaded from. A URL ending in "#token=<JWT>" signs in
// directly (the token is then kept in localStorage and removed from the
// address bar).
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Files holds the UI under "static/". Use Handler to serve it.
//
//go:embed static
var Files embed.FS

// asset is one embedded file, prepared once.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".png":  "image/png",
	".ico":  "image/x-icon",
}

func load() map[string]asset {
	out := make(map[string]asset)
	_ = fs.WalkDir(Files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := Files.ReadFile(p)
		if err != nil {
			return err
		}
		ext := path.Ext(p)
		ct := contentTypes[ext]
		if ct == "" {
			ct = mime.TypeByExtension(ext)
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "static")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return out
}

// Handler serves the UI: "/" is index.html, other paths are the embedded
// files, anything else is 404. Mount it at the root of the gateway's mux (or
// under a prefix with http.StripPrefix). Safe for concurrent use.
//
// Caching: file names carry no version, so every response is "no-cache"
// with a strong ETag: browsers revalidate and get 304 until the binary
// changes, and never run a stale app.js against a new gateway.
//
// Every response carries a Content-Security-Policy that allows only this
// origin's scripts, styles and WebSocket, as a second line of defence
// behind the renderer's escaping of model output.
func Handler() http.Handler {
	assets := load()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := r.URL.Path
		if p == "" || p == "/" || p == "/index.html" {
			p = "/index.html"
		}
		a, ok := assets[p]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if p == "/index.html" {
			h.Set("Content-Security-Policy", csp(r))
			h.Set("X-Frame-Options", "DENY")
		}
		// ServeContent answers If-None-Match with 304 and handles HEAD and
		// Range. A zero modtime leaves Last-Modified out.
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(a.body))
	})
}

// csp allows the page's own origin for everything, including its WebSocket
// (named explicitly: older browsers do not count ws: as 'self').
func csp(r *http.Request) string {
	ws := "ws://" + r.Host + " wss://" + r.Host
	if strings.ContainsAny(r.Host, " ;,'\"") {
		ws = "" // a malformed Host header must not inject directives
	}
	return "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self' " + ws + "; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}
