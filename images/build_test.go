package images

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReleaseDate(t *testing.T) {
	files := map[string]string{
		"/debian/dists/bookworm/InRelease": "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\nOrigin: Debian\nSuite: stable\n" +
			"Codename: bookworm\nDate: Sat, 10 May 2025 09:17:42 UTC\nArchitectures: amd64\n",
		"/debian/dists/bookworm-updates/Release": "Origin: Debian\nDate: Sun, 11 May 2025 20:12:06 UTC\n",
		"/bad/dists/bookworm/InRelease":          "Origin: Debian\nSuite: stable\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()

	r := testRecipe("x")
	r.Mirror = srv.URL + "/debian"
	r.Sources = []string{"deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] " + srv.URL + "/debian bookworm-updates main"}
	got, err := releaseDate(context.Background(), aptSuites(r))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 5, 11, 20, 12, 6, 0, time.UTC); !got.Equal(want) {
		t.Errorf("newest date %v, want %v (from the InRelease→Release fallback)", got, want)
	}

	t.Setenv("SOURCE_DATE_EPOCH", "")
	s := openTestStore(t)
	r.Mirror = srv.URL + "/bad"
	r.Sources = nil
	if got := s.sourceDateEpoch(context.Background(), r); got.Unix() != fallbackEpoch {
		t.Errorf("no Date field: %v, want the fallback", got)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if got := s.sourceDateEpoch(context.Background(), r); got.Unix() != 1700000000 {
		t.Errorf("caller's SOURCE_DATE_EPOCH ignored: %v", got)
	}
}

func TestMmdebstrapArgs(t *testing.T) {
	r := testRecipe("shell")
	r.Packages = []string{"bash", "jq"}
	r.Sources = []string{"deb http://deb.debian.org/debian-security bookworm-security main"}
	args := mmdebstrapArgs(r, "/store/tmp/x/rootfs.tar", true)
	for _, want := range []string{"--variant=essential", "--format=tar", "--include=bash,jq",
		"--hook-dir=" + mergedUsrHooks, "--dpkgopt=path-exclude=/usr/share/doc/*"} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %q: %v", want, args)
		}
	}
	i := slices.Index(args, "--")
	if i < 0 || !slices.Equal(args[i+1:], []string{"bookworm", "/store/tmp/x/rootfs.tar", DefaultMirror, r.Sources[0]}) {
		t.Errorf("positional args: %v", args[i+1:])
	}
	if slices.Contains(mmdebstrapArgs(r, "t", false), "--hook-dir="+mergedUsrHooks) {
		t.Error("hook dir passed although missing")
	}
}

func TestLineWriter(t *testing.T) {
	var out strings.Builder
	lw := newLineWriter(&out, "[x] ")
	lw.Write([]byte("I: one\nprogress 10%\rprogress 20%\r"))
	lw.Write([]byte("\nI: two"))
	lw.Flush()
	if got := out.String(); got != "[x] I: one\n[x] progress 10%\n[x] progress 20%\n[x] I: two\n" {
		t.Errorf("got %q", got)
	}
	if !strings.Contains(lw.Tail(), "I: two") {
		t.Errorf("tail %q", lw.Tail())
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 25 << 20: "25.0 MiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestChrootTmp(t *testing.T) {
	private := t.TempDir() // 0700: _apt could not get in
	os.Chmod(private, 0o700)
	work := filepath.Join(private, "work")
	os.Mkdir(work, 0o755)
	got, err := chrootTmp(work)
	if err != nil {
		t.Fatal(err)
	}
	if got == work || !othersCanReach(got) {
		t.Errorf("chroot dir %s for unreachable %s", got, work)
	}
	os.Remove(got)
	if !othersCanReach("/") {
		t.Error("/ is searchable")
	}
}
