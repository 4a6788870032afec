package images

import (
	"context"
	"fmt"
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
	var seen []string
	lw := newLineWriter(&out, "[x] ", func(l string) { seen = append(seen, l) })
	lw.Write([]byte("I: one\nprogress 10%\rprogress 20%\r"))
	lw.Write([]byte("\nI: two"))
	lw.Flush()
	if got := out.String(); got != "[x] I: one\n[x] progress 10%\n[x] progress 20%\n[x] I: two\n" {
		t.Errorf("got %q", got)
	}
	if !slices.Equal(seen, []string{"I: one", "progress 10%", "progress 20%", "I: two"}) {
		t.Errorf("onLine saw %q", seen)
	}
	if !strings.Contains(lw.Tail(), "I: two") {
		t.Errorf("tail %q", lw.Tail())
	}
	for i := range 100 {
		fmt.Fprintf(lw, "line %d\n", i)
	}
	if tail := lw.Tail(); strings.Count(tail, "\n")+1 != failTailLines || !strings.HasSuffix(tail, "line 99") {
		t.Errorf("tail keeps %d lines: %q", strings.Count(tail, "\n")+1, tail)
	}
}

// TestStageReporter follows a build through mmdebstrap's own lines: one
// line per stage with its time, package counts from the chroot's apt cache,
// warnings passed on, nothing else of the log.
func TestStageReporter(t *testing.T) {
	chroot := t.TempDir()
	archives := filepath.Join(chroot, "var", "cache", "apt", "archives")
	os.MkdirAll(archives, 0o755)
	addDebs := func(names ...string) {
		for _, n := range names {
			os.WriteFile(filepath.Join(archives, n), make([]byte, 1024), 0o644)
		}
	}
	for _, early := range []bool{true, false} {
		t.Run(fmt.Sprintf("early=%v", early), func(t *testing.T) {
			os.RemoveAll(archives)
			os.MkdirAll(archives, 0o755)
			var out strings.Builder
			rep := newStageReporter(&out, &Recipe{Name: "py", Packages: []string{"python3", "qpdf"}}, early)
			clock := time.Unix(0, 0)
			rep.now = func() time.Time { return clock }
			step := func(d time.Duration, line string) {
				clock = clock.Add(d)
				rep.mmdebstrapLine(line)
			}
			rep.begin("fetching package lists")
			step(time.Second, "I: automatically chosen mode: root")
			step(time.Second, "I: using "+chroot+" as tempdir")
			step(time.Second, "I: running apt-get update...")
			step(time.Second, "I: downloading packages with apt...")
			addDebs("a.deb", "b.deb")
			step(3*time.Second, "I: extracting archives...")
			step(time.Second, "W: something odd")
			step(time.Second, "I: installing essential packages...")
			step(20*time.Second, "I: installing remaining packages inside the chroot...")
			addDebs("c.deb", "d.deb", "e.deb")
			step(63*time.Second, "I: running --customize-hook in shell: sh -c 'rm …'")
			step(time.Second, "I: cleaning package lists and apt cache...")
			step(time.Second, "I: creating tarball...")
			clock = clock.Add(5 * time.Second)
			rep.done("done: sha256:ab in %s", formatElapsed(clock.Sub(time.Unix(0, 0))))
			installing := "[py] installing the essential set… 22s\n"
			if early {
				installing = "[py] installing the essential set… \n[py] W: something odd\n" + installing
			} else {
				installing = "[py] W: something odd\n" + installing
			}
			want := "[py] fetching package lists… 4s\n" +
				"[py] downloading the essential set… 2 packages, 2.0 KiB, 3s\n" +
				installing +
				"[py] downloading and installing 2 packages and their dependencies… 3 packages, 5.0 KiB, 1m03s\n" +
				"[py] creating the rootfs tarball… 5s\n" +
				"[py] done: sha256:ab in 1m39s\n"
			if got := out.String(); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
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
