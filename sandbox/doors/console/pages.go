package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// ContentSecurityPolicy is the pages' policy: scripts, styles and requests
// from the bridge only, no inline script or style, no frames, no forms
// posted anywhere.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the build's kinds of file (a fixed table: the host's
// MIME database is not consulted).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// page is one built file, read once.
type page struct {
	name string
	body []byte
	etag string
}

// pages serves the built front end: its files by name, and index.html
// for any other path (the pages route by the URL's fragment, but a
// reloaded deep link still gets the app).
type pages struct {
	files map[string]*page
	index *page
}

// newPages reads every file of dist; it must hold index.html.
func newPages(dist fs.FS) (*pages, error) {
	p := &pages{files: map[string]*page{}}
	err := fs.WalkDir(dist, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(dist, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		p.files["/"+name] = &page{name: name, body: b, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console pages: %w", err)
	}
	if p.index = p.files["/index.html"]; p.index == nil {
		return nil, fmt.Errorf("console pages: no index.html in the embedded build (run `make console`)")
	}
	return p, nil
}

func (p *pages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := p.files[path.Clean("/"+r.URL.Path)]
	if f == nil || f == p.index {
		f = p.index
		// The page names the current assets: never serve a stale one.
		w.Header().Set("Cache-Control", "no-store")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", f.etag)
	}
	ctype, ok := contentTypes[path.Ext(f.name)]
	if !ok {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Security-Policy", ContentSecurityPolicy)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
}
