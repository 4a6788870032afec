package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	clog "github.com/containerd/log"
	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func commitSample(t *testing.T, s *Store, r *Recipe, tarBytes []byte, epoch time.Time) *Image {
	t.Helper()
	img, err := s.commit(context.Background(), r, bytes.NewReader(tarBytes), epoch, "test")
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func readJSON(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

func TestOCILayout(t *testing.T) {
	s := openTestStore(t)
	s.SetRecipes(map[string]*Recipe{"shell": testRecipe("shell")})
	img := commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)

	var layout v1.ImageLayout
	readJSON(t, filepath.Join(s.LayoutDir(), "oci-layout"), &layout)
	if layout.Version != v1.ImageLayoutVersion {
		t.Errorf("oci-layout version %q", layout.Version)
	}
	var idx v1.Index
	readJSON(t, filepath.Join(s.LayoutDir(), "index.json"), &idx)
	if idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("index: %+v", idx)
	}
	desc := idx.Manifests[0]
	if desc.Annotations[v1.AnnotationRefName] != "shell" || desc.Digest.String() != img.Digest ||
		desc.MediaType != v1.MediaTypeImageManifest {
		t.Errorf("index entry: %+v", desc)
	}
	blob := func(d digest.Digest) []byte {
		b, err := os.ReadFile(filepath.Join(s.LayoutDir(), "blobs", "sha256", d.Encoded()))
		if err != nil {
			t.Fatal(err)
		}
		if digest.FromBytes(b) != d {
			t.Fatalf("blob %s has the wrong content", d)
		}
		return b
	}
	var man v1.Manifest
	if err := json.Unmarshal(blob(desc.Digest), &man); err != nil {
		t.Fatal(err)
	}
	if man.MediaType != v1.MediaTypeImageManifest || len(man.Layers) != 1 ||
		man.Layers[0].MediaType != v1.MediaTypeImageLayerGzip || man.Annotations[AnnotationRecipeHash] != testRecipe("shell").Hash() {
		t.Fatalf("manifest: %+v", man)
	}
	var cfg v1.Image
	if err := json.Unmarshal(blob(man.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" || !cfg.Created.Equal(testEpoch) ||
		cfg.Config.Labels[LabelInterpreters] != "bash,sh" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("config: %+v", cfg)
	}

	// The layer is gzip; its uncompressed bytes hash to the diffID and hold
	// the normalised entries.
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if digest.FromBytes(raw) != cfg.RootFS.DiffIDs[0] {
		t.Error("layer diffID mismatch")
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.ModTime.After(testEpoch) {
			t.Errorf("%s: mtime %v not clamped to %v", h.Name, h.ModTime, testEpoch)
		}
		if h.Uname != "" || !h.AccessTime.IsZero() {
			t.Errorf("%s: uname/atime kept", h.Name)
		}
		if h.Name == "usr/bin/tool-alias" && (h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool") {
			t.Errorf("hard link: %+v", h)
		}
	}
	if names[0] != "bin" || strings.HasPrefix(strings.Join(names, " "), "./") {
		t.Errorf("names not normalised: %v", names)
	}

	got, err := s.Get("shell")
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != img.Digest || got.Size <= 0 || got.UnpackedSize != int64(len(raw)) ||
		got.Built.IsZero() || got.Stale || len(got.Layers) != 1 || len(got.Env) == 0 {
		t.Errorf("Get: %+v", got)
	}
}

func TestDigestStable(t *testing.T) {
	tarBytes := sampleRootfs(t)
	a := commitSample(t, openTestStore(t), testRecipe("shell"), tarBytes, testEpoch)
	b := commitSample(t, openTestStore(t), testRecipe("shell"), tarBytes, testEpoch)
	if a.Digest != b.Digest || a.Layers[0] != b.Layers[0] {
		t.Fatalf("same input, different digests: %s %s", a.Digest, b.Digest)
	}
	// Build-time noise (atime, user names, mtimes past the epoch) must not
	// reach the digest.
	noisy := makeTar(t, []entry{
		{name: "./", typ: tar.TypeDir, mtime: time.Now()},
		{name: "./etc/", typ: tar.TypeDir, uname: "root", mtime: time.Now()},
		{name: "./etc/motd", body: "hello\n", mtime: time.Now(), pax: map[string]string{"SCHILY.xattr.user.k": "v"}},
	})
	quiet := makeTar(t, []entry{
		{name: "etc/", typ: tar.TypeDir, mtime: testEpoch},
		{name: "etc/motd", body: "hello\n", mtime: testEpoch, pax: map[string]string{"SCHILY.xattr.user.k": "v"}},
	})
	c := commitSample(t, openTestStore(t), testRecipe("shell"), noisy, testEpoch)
	d := commitSample(t, openTestStore(t), testRecipe("shell"), quiet, testEpoch)
	if c.Digest != d.Digest {
		t.Errorf("normalisation failed: %s vs %s", c.Digest, d.Digest)
	}
	if e := commitSample(t, openTestStore(t), testRecipe("shell"), tarBytes, testEpoch.Add(time.Second)); e.Digest == a.Digest {
		t.Error("different epoch, same digest")
	}
	other := testRecipe("shell")
	other.Packages = []string{"bash", "jq"}
	if e := commitSample(t, openTestStore(t), other, tarBytes, testEpoch); e.Digest == a.Digest {
		t.Error("different recipe, same digest")
	}
}

func TestRootFS(t *testing.T) {
	s := openTestStore(t)
	img := commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)
	root, err := s.RootFS(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	hex := strings.TrimPrefix(img.Digest, "sha256:")
	if root != filepath.Join(s.Dir(), "rootfs", "sha256-"+hex) {
		t.Errorf("rootfs at %s", root)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc/motd"))
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("motd: %q %v", b, err)
	}
	if l, _ := os.Readlink(filepath.Join(root, "bin")); l != "usr/bin" {
		t.Errorf("bin -> %q", l)
	}
	if l, _ := os.Readlink(filepath.Join(root, "usr/bin/abs")); l != "/usr/bin/tool" {
		t.Errorf("absolute symlink target rewritten: %q", l)
	}
	st1, err := os.Stat(filepath.Join(root, "usr/bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(filepath.Join(root, "usr/bin/tool-alias"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(st1, st2) {
		t.Error("hard link not preserved")
	}
	if st1.Mode()&os.ModeSetuid == 0 || st1.Mode().Perm() != 0o755 {
		t.Errorf("tool mode %v", st1.Mode())
	}
	if st, _ := os.Stat(filepath.Join(root, "tmp")); st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("tmp mode %v", st.Mode())
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/hostname.d")); st.Mode().Perm() != 0o700 || !st.ModTime().Equal(testEpoch.Add(-time.Hour)) {
		t.Errorf("dir mode/mtime %v %v", st.Mode(), st.ModTime())
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/motd")); !st.ModTime().Equal(testEpoch) {
		t.Errorf("motd mtime %v, want clamped %v", st.ModTime(), testEpoch)
	}
	if st, err := os.Lstat(filepath.Join(root, "run/fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo: %v %v", st, err)
	}
	if os.Geteuid() == 0 {
		var sys syscall.Stat_t
		syscall.Stat(filepath.Join(root, "etc/motd"), &sys)
		if sys.Uid != 0 {
			t.Errorf("owner %d", sys.Uid)
		}
	}
	// Cached: the same directory, no second unpack.
	again, err := s.RootFS(context.Background(), img)
	if err != nil || again != root {
		t.Fatalf("second RootFS: %s %v", again, err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(s.Dir(), "rootfs", ".tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary unpack dirs left: %v", leftovers)
	}
}

func TestRootFSDetectsDamage(t *testing.T) {
	s := openTestStore(t)
	img := commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)
	layer := filepath.Join(s.LayoutDir(), "blobs", "sha256", strings.TrimPrefix(img.Layers[0], "sha256:"))
	tamper(t, layer, func(b []byte) { b[len(b)-12] ^= 0xff }) // inside the deflate data or trailer
	if _, err := s.RootFS(context.Background(), img); err == nil {
		t.Fatal("damaged layer unpacked")
	}
	if entries, _ := os.ReadDir(filepath.Join(s.Dir(), "rootfs")); len(entries) != 0 {
		t.Errorf("rootfs dir not clean after failure: %v", entries)
	}
}

// tamper changes the blob file p with edit. The store commits blobs
// read-only (and fs-verity protected where the filesystem has it), so the
// damaged copy replaces the file rather than writing into it.
func tamper(t *testing.T, p string, edit func([]byte)) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedBlobsRefused: a manifest, config or layer whose bytes no
// longer match its digest is refused, and the error names the file.
func TestDamagedBlobsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		blob func(t *testing.T, s *Store, img *Image) digest.Digest
		use  func(s *Store, img *Image) error
	}{
		{"manifest", func(t *testing.T, s *Store, img *Image) digest.Digest { return digest.Digest(img.Digest) },
			func(s *Store, img *Image) error { _, err := s.Get(img.Name); return err }},
		{"config", func(t *testing.T, s *Store, img *Image) digest.Digest {
			m, err := s.readManifest(mustDesc(t, s, img.Name))
			if err != nil {
				t.Fatal(err)
			}
			return m.Config.Digest
		}, func(s *Store, img *Image) error { _, err := s.Get(img.Name); return err }},
		{"layer", func(t *testing.T, s *Store, img *Image) digest.Digest { return digest.Digest(img.Layers[0]) },
			func(s *Store, img *Image) error { _, err := s.RootFS(context.Background(), img); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t)
			img := commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)
			p := filepath.Join(s.LayoutDir(), "blobs", "sha256", tc.blob(t, s, img).Encoded())
			tamper(t, p, func(b []byte) { b[len(b)/2] ^= 0x01 })
			err := tc.use(s, img)
			if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), p) {
				t.Errorf("damaged %s: err = %v, want one naming %s", tc.name, err, p)
			}
		})
	}
}

// TestContentStoreQuiet: opening a store, building into it and pruning it
// print nothing through containerd's process-wide logger, which would reach
// a CLI user's terminal.
func TestContentStoreQuiet(t *testing.T) {
	var out bytes.Buffer
	l := clog.L.Logger
	l.SetOutput(&out)
	defer l.SetOutput(os.Stderr)
	s := openTestStore(t)
	img := commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)
	if _, err := s.RootFS(context.Background(), img); err != nil {
		t.Fatal(err)
	}
	commitSample(t, s, testRecipe("shell"), makeTar(t, []entry{{name: "./etc/", typ: tar.TypeDir}}), testEpoch)
	if _, err := s.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("containerd's logger printed:\n%s", out.String())
	}
}

// TestFailedCommitLeavesNoIngest: a layer that cannot be written leaves
// nothing in the content store, and Prune clears what a build that died
// left once it is a day old.
func TestFailedCommitLeavesNoIngest(t *testing.T) {
	s := openTestStore(t)
	_, err := s.commit(context.Background(), testRecipe("shell"), bytes.NewReader(makeTar(t, []entry{{name: "/evil", body: "x"}})), testEpoch, "test")
	if !errors.Is(err, ErrUnsafeLayer) {
		t.Fatalf("commit of an unsafe tar: %v", err)
	}
	ingests := func() []string {
		var refs []string
		s.walkIngests(context.Background(), func(st content.Status) error { refs = append(refs, st.Ref); return nil })
		return refs
	}
	if refs := ingests(); len(refs) != 0 {
		t.Errorf("failed commit left ingests %v", refs)
	}

	// A build that died: its ingest stays until Prune finds it old.
	for _, ref := range []string{"fresh", "old"} {
		w, err := s.content.Writer(context.Background(), content.WithRef(ref))
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("half a layer"))
		w.Close()
	}
	// The local content store keeps an ingest in ingest/<sha256 of its
	// ref>/; its age is the later of updatedat and the data's mtime.
	dayAgo := time.Now().Add(-25 * time.Hour)
	old := filepath.Join(s.LayoutDir(), "ingest", digest.FromString("old").Encoded())
	ts, _ := dayAgo.MarshalText()
	if err := os.WriteFile(filepath.Join(old, "updatedat"), ts, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(old, "data"), dayAgo, dayAgo); err != nil {
		t.Fatal(err)
	}
	removed, err := s.Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, " ") != "unfinished blob old" {
		t.Errorf("prune removed %q", removed)
	}
	if refs := ingests(); strings.Join(refs, " ") != "fresh" {
		t.Errorf("ingests after prune: %v", refs)
	}
}

func TestStaleAndNotBuilt(t *testing.T) {
	s := openTestStore(t)
	r := testRecipe("shell")
	s.SetRecipes(map[string]*Recipe{"shell": r, "python": testRecipe("python")})
	commitSample(t, s, r, sampleRootfs(t), testEpoch)

	imgs, err := s.List()
	if err != nil || len(imgs) != 1 || imgs[0].Stale {
		t.Fatalf("fresh: %v %v", imgs, err)
	}
	changed := testRecipe("shell")
	changed.Packages = append(changed.Packages, "jq")
	s.SetRecipes(map[string]*Recipe{"shell": changed})
	imgs, _ = s.List()
	if !imgs[0].Stale {
		t.Error("changed recipe not reported stale by List")
	}
	if img, _ := s.Get("shell"); !img.Stale {
		t.Error("changed recipe not reported stale by Get")
	}
	notes := testRecipe("shell")
	notes.Notes = "edited prose only"
	s.SetRecipes(map[string]*Recipe{"shell": notes, "python": testRecipe("python")})
	if img, _ := s.Get("shell"); img.Stale {
		t.Error("a notes-only change made the image stale")
	}

	_, err = s.Get("python")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "run: skillbox images build python") {
		t.Errorf("not built: %v", err)
	}
	_, err = s.Get("cobol")
	if !errors.Is(err, ErrUnknownImage) {
		t.Errorf("unknown: %v", err)
	}
	_, _, err = s.Ensure(context.Background(), testRecipe("python"), false, nil)
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "skillbox images build python") {
		t.Errorf("Ensure without build: %v", err)
	}
}

func TestBuildWithFakeMmdebstrap(t *testing.T) {
	s := openTestStore(t)
	tree := writeTree(t, map[string]string{"usr/bin/hello": "#!/bin/sh\necho hi\n", "etc/os-release": "ID=debian\n"})
	s.mmdebstrap = fakeMmdebstrap(t, tree)
	var builds []string // what OnBuild heard
	s.OnBuild(func(image string, err error) { builds = append(builds, fmt.Sprintf("%s %v", image, err)) })

	var progress bytes.Buffer
	r := testRecipe("shell")
	img, root, err := s.Ensure(context.Background(), r, true, &progress)
	if err != nil {
		t.Fatal(err)
	}
	// Progress is one line per stage; mmdebstrap's own lines go to the
	// build log only.
	for _, want := range []string{"[shell] fetching package lists (bookworm)… ", "[shell] writing the OCI layout… ",
		"[shell] unpacking the rootfs… ", "[shell] done: sha256:"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if strings.Contains(progress.String(), "I: fake mmdebstrap") {
		t.Errorf("progress shows mmdebstrap's log:\n%s", progress.String())
	}
	if b, err := os.ReadFile(s.BuildLogPath("shell")); err != nil || !strings.Contains(string(b), "I: fake mmdebstrap starting") ||
		!strings.Contains(string(b), "SOURCE_DATE_EPOCH=1746868662") {
		t.Errorf("build log: %q %v", b, err)
	}
	if !img.Created.Equal(time.Unix(1746868662, 0)) {
		t.Errorf("created %v", img.Created)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/hello")); err != nil {
		t.Error(err)
	}
	// Ensure again: no rebuild, same image.
	progress.Reset()
	img2, root2, err := s.Ensure(context.Background(), r, true, &progress)
	if err != nil || img2.Digest != img.Digest || root2 != root || progress.Len() != 0 {
		t.Errorf("second Ensure rebuilt or moved: %v %s %q", err, root2, progress.String())
	}
	// Build again from the same tree: same digest (timestamps are clamped).
	var verbose bytes.Buffer
	progress.Reset()
	img3, err := s.BuildWith(context.Background(), r, BuildOptions{Progress: &progress, Log: &verbose})
	if err != nil || img3.Digest != img.Digest {
		t.Errorf("rebuild digest %s vs %s (%v)", img3.Digest, img.Digest, err)
	}
	if !strings.Contains(verbose.String(), "[shell] I: fake mmdebstrap starting") || !strings.Contains(verbose.String(), "[shell] mmdebstrap --variant=") {
		t.Errorf("verbose log: %s", verbose.String())
	}
	if strings.Contains(progress.String(), "unpacking") || !strings.Contains(progress.String(), "[shell] done: ") {
		t.Errorf("progress without Unpack: %s", progress.String())
	}
	if entries, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(entries) != 0 {
		t.Errorf("scratch left in tmp: %v", entries)
	}
	// The first Ensure and BuildWith built; the second Ensure did not.
	if strings.Join(builds, "; ") != "shell <nil>; shell <nil>" {
		t.Errorf("OnBuild heard %q", builds)
	}
}

func TestBuildFailure(t *testing.T) {
	s := openTestStore(t)
	s.mmdebstrap = fakeMmdebstrap(t, "fail")
	var heard []error
	s.OnBuild(func(image string, err error) { heard = append(heard, err) })
	var progress bytes.Buffer
	_, err := s.Build(context.Background(), testRecipe("shell"), &progress)
	if len(heard) != 1 || !errors.Is(heard[0], ErrBuildFailed) {
		t.Errorf("OnBuild heard %v, want the failure", heard)
	}
	if !errors.Is(err, ErrBuildFailed) || !strings.Contains(err.Error(), "E: cannot reach the mirror") ||
		!strings.Contains(err.Error(), "skillbox images build shell") || !strings.Contains(err.Error(), "full log: "+s.BuildLogPath("shell")) {
		t.Errorf("err = %v", err)
	}
	if b, err := os.ReadFile(s.BuildLogPath("shell")); err != nil || !strings.Contains(string(b), "E: cannot reach the mirror") {
		t.Errorf("build log: %q %v", b, err)
	}
	// Errors and warnings of mmdebstrap show in the concise progress too.
	if !strings.Contains(progress.String(), "[shell] E: cannot reach the mirror") {
		t.Errorf("progress: %s", progress.String())
	}
	if _, err := s.Get("shell"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("failed build left an image: %v", err)
	}
	s.mmdebstrap = "/nonexistent/mmdebstrap"
	if _, err := s.Build(context.Background(), testRecipe("shell"), nil); !errors.Is(err, ErrBuildFailed) ||
		!strings.Contains(err.Error(), "apt-get install mmdebstrap") {
		t.Errorf("missing tool: %v", err)
	}
	bad := testRecipe("shell")
	bad.Packages = []string{"--evil"}
	if _, err := s.Build(context.Background(), bad, nil); !errors.Is(err, ErrBuildFailed) {
		t.Errorf("invalid recipe: %v", err)
	}
}

func TestBuildCancel(t *testing.T) {
	s := openTestStore(t)
	script := filepath.Join(t.TempDir(), "mmdebstrap")
	os.WriteFile(script, []byte("#!/bin/sh\nsleep 30 & wait\n"), 0o755)
	s.mmdebstrap = script
	t.Setenv("SOURCE_DATE_EPOCH", "1746868662")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Build(ctx, testRecipe("shell"), nil)
	if !errors.Is(err, ErrBuildFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
	// The whole process group dies, so the pipe closes without WaitDelay.
	if time.Since(start) > 5*time.Second {
		t.Errorf("cancel took %v", time.Since(start))
	}
}

func TestConcurrentBuilds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	tree := writeTree(t, map[string]string{"usr/bin/hello": "hi"})
	fake := fakeMmdebstrap(t, tree)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate Store values act like separate processes: the
			// locks are flock on separately opened files.
			s, err := OpenStore(dir, nil)
			if err != nil {
				errs[i] = err
				return
			}
			s.mmdebstrap = fake
			name := []string{"shell", "node"}[i%2]
			_, _, errs[i] = s.Ensure(context.Background(), testRecipe(name), true, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, _ := OpenStore(dir, nil)
	imgs, err := s.List()
	if err != nil || len(imgs) != 2 {
		t.Fatalf("list after concurrent builds: %v %v", imgs, err)
	}
	for _, img := range imgs {
		if _, err := s.RootFS(context.Background(), img); err != nil {
			t.Error(err)
		}
	}
}

func TestPrune(t *testing.T) {
	s := openTestStore(t)
	r := testRecipe("shell")
	old := commitSample(t, s, r, sampleRootfs(t), testEpoch)
	oldRoot, err := s.RootFS(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	cur := commitSample(t, s, r, makeTar(t, []entry{{name: "./etc/", typ: tar.TypeDir}, {name: "./etc/new", body: "n"}}), testEpoch)
	curRoot, _ := s.RootFS(context.Background(), cur)
	removed, err := s.Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Old manifest, config and layer, and the old rootfs.
	if len(removed) != 4 {
		t.Errorf("removed %v", removed)
	}
	if _, err := os.Stat(oldRoot); !os.IsNotExist(err) {
		t.Error("old rootfs kept")
	}
	if _, err := os.Stat(curRoot); err != nil {
		t.Error("current rootfs removed")
	}
	if _, err := s.imageFromDescriptor(mustDesc(t, s, "shell")); err != nil {
		t.Errorf("current image damaged by prune: %v", err)
	}
}

func mustDesc(t *testing.T, s *Store, name string) v1.Descriptor {
	idx, err := s.readIndex()
	if err != nil {
		t.Fatal(err)
	}
	d, ok := findRef(idx, name)
	if !ok {
		t.Fatalf("%s not in index", name)
	}
	return d
}

// TestOpenStoreWarnsUnreachableRootfs: a store under a directory other
// uids cannot traverse is said to break runc's user namespace, not left
// to fail at the first run.
func TestOpenStoreWarnsUnreachableRootfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the check applies to a root-owned store")
	}
	for _, tc := range []struct {
		name   string
		parent os.FileMode
		warned bool
	}{
		{"closed", 0o700, true},
		{"traversable", 0o711, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp, err := os.MkdirTemp("", "skillbox-store-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(tmp) })
			base := filepath.Join(tmp, "state")
			if err := os.Mkdir(base, tc.parent); err != nil {
				t.Fatal(err)
			}
			// MkdirTemp's dir is 0700: open it up, so that only base
			// decides.
			for _, d := range []struct {
				p string
				m os.FileMode
			}{{tmp, 0o711}, {base, tc.parent}} {
				if err := os.Chmod(d.p, d.m); err != nil {
					t.Fatal(err)
				}
			}
			for d := filepath.Dir(filepath.Dir(base)); d != "/"; d = filepath.Dir(d) {
				if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
					t.Skipf("%s is not traversable by others here", d)
				}
			}
			var out bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn})
			if _, err := OpenStore(filepath.Join(base, "images"), log); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out.String(), "cannot be reached by other uids"); got != tc.warned {
				t.Errorf("warned %v, want %v: %q", got, tc.warned, out.String())
			}
		})
	}
}

// TestLayoutModes: the layout is the system's public store (docs/SECURITY.md,
// "Host paths and their modes"): other uids may read and traverse every part
// of it, the content store's ingest/ and read-only blobs included, and
// nothing in it is writable by anyone but its owner.
func TestLayoutModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	s := openTestStore(t)
	s.SetRecipes(map[string]*Recipe{"shell": testRecipe("shell")})
	commitSample(t, s, testRecipe("shell"), sampleRootfs(t), testEpoch)
	seen := map[string]bool{}
	err := filepath.WalkDir(s.LayoutDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.LayoutDir(), p)
		seen[strings.SplitN(rel, string(filepath.Separator), 2)[0]] = true
		mode := fi.Mode().Perm()
		want := fs.FileMode(0o004)
		if fi.IsDir() {
			want = 0o005
		}
		if mode&want != want {
			t.Errorf("%s is %o: other uids cannot read it", rel, mode)
		}
		if mode&0o022 != 0 {
			t.Errorf("%s is %o: writable by group or others", rel, mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"blobs", "index.json", "oci-layout"} {
		if !seen[part] {
			t.Errorf("the layout has no %s", part)
		}
	}
}
