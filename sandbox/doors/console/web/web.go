// Package web holds the console's pages, built from src/ by `make console`
// (esbuild and TypeScript from the locked package-lock.json) into dist/,
// which is committed and embedded here: a release serves them without
// Node.js.
package web

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Dist is the built pages: index.html, app.js, app.css.
var Dist = mustSub(dist, "dist")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the directory is embedded above, so this cannot fail
	}
	return sub
}
