package deps

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Sources are the package sources the config names.
type Sources struct {
	// PythonIndex is a PEP 503 simple index URL; FindLinks are extra
	// directories or URLs holding wheels.
	PythonIndex string
	FindLinks   []string
	// NpmRegistry is an npm registry URL.
	NpmRegistry string
}

// Python reports whether a Python source is configured.
func (s Sources) Python() bool { return s.PythonIndex != "" || len(s.FindLinks) > 0 }

// Builder builds layers: it fetches artifacts on the host without running
// package code and installs them in a sandbox of the image with the network
// off.
type Builder struct {
	Store   *Store
	Runtime runtime.Runtime
	Sources Sources
	Logger  hclog.Logger
	// HostPython runs `pip download` on the host (resolution and fetching
	// only: wheels are never unpacked there); default "python3".
	HostPython string
	// Npm is the host's npm, used to resolve package.json into a lock with
	// scripts off; default "npm".
	Npm string
	// HTTP fetches npm tarballs and index pages; default http.DefaultClient.
	HTTP *http.Client
	// MaxLayerBytes caps an installed layer (dependencies.max_layer_bytes);
	// 0 means DefaultMaxLayerBytes. See limits.go.
	MaxLayerBytes int64

	mu       sync.Mutex
	inflight map[string]*flight
}

type flight struct {
	done  chan struct{}
	layer *Layer
	err   error
}

// Request is one layer to build.
type Request struct {
	Image       string // image name, for messages
	ImageDigest string
	RootFS      string // the image's unpacked rootfs
	Set         *Set   // what the skill declares
	Skill       string // for messages and users
	SkillDigest string
}

// Plan is what a request comes to: the part of the set the image lacks and
// the layer digest that part is stored under. Missing is nil (and Digest "")
// when the image already has everything.
type Plan struct {
	Missing *Set
	Digest  string
	Image   *Image
}

// PlanFor works out what req needs without building anything.
func PlanFor(req Request) *Plan {
	im := Inspect(req.RootFS)
	p := &Plan{Image: im}
	if req.Set.Empty() {
		return p
	}
	p.Missing = im.Missing(req.Set)
	if p.Missing != nil {
		p.Digest = Key(req.ImageDigest, p.Missing)
	}
	return p
}

// Ready returns the built layer for plan, or nil when none is needed; a
// layer that is needed but not built is ErrNotReady.
func (b *Builder) Ready(p *Plan) (*Layer, error) {
	if p.Missing == nil {
		return nil, nil
	}
	l, err := b.Store.Get(p.Digest)
	if err != nil {
		return nil, errkind.Errorf(ErrNotReady, "layer %s is not built", p.Digest)
	}
	return l, nil
}

// Wait waits for a build of digest in progress in this process; it reports
// false when none is.
func (b *Builder) Wait(ctx context.Context, digest string) (*Layer, bool, error) {
	b.mu.Lock()
	f := b.inflight[digest]
	b.mu.Unlock()
	if f == nil {
		return nil, false, nil
	}
	select {
	case <-f.done:
		return f.layer, true, f.err
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// Build returns the layer for req, building it when it is not in the store.
// Concurrent builds of one layer in this process share one build. It
// returns nil, nil when the image already satisfies everything.
func (b *Builder) Build(ctx context.Context, req Request) (*Layer, error) {
	p := PlanFor(req)
	if p.Missing == nil {
		return nil, nil
	}
	if l, err := b.Store.Get(p.Digest); err == nil {
		if req.Skill != "" {
			_ = b.Store.AddUser(p.Digest, req.Skill, req.SkillDigest)
		}
		return l, nil
	}
	b.mu.Lock()
	if b.inflight == nil {
		b.inflight = map[string]*flight{}
	}
	if f := b.inflight[p.Digest]; f != nil {
		b.mu.Unlock()
		l, _, err := b.Wait(ctx, p.Digest)
		return l, err
	}
	f := &flight{done: make(chan struct{})}
	b.inflight[p.Digest] = f
	b.mu.Unlock()

	f.layer, f.err = b.build(ctx, req, p)
	if f.err == nil && req.Skill != "" {
		_ = b.Store.AddUser(p.Digest, req.Skill, req.SkillDigest)
	}
	close(f.done)
	b.mu.Lock()
	delete(b.inflight, p.Digest)
	b.mu.Unlock()
	return f.layer, f.err
}

// MissingSourceError says which declared packages the image lacks and how
// to provide them, when no source is configured for their ecosystem.
func MissingSourceError(skill string, m *Set, src Sources) error {
	var parts []string
	if len(m.Python) > 0 && !src.Python() {
		var names []string
		for _, r := range m.Python {
			names = append(names, r.Spec+" ("+r.Source+")")
		}
		parts = append(parts, "python: "+strings.Join(names, ", ")+
			` — add python_index { url = "https://pypi.org/simple" } (or find_links = ["/dir/of/wheels"]) to the config`)
	}
	if len(m.Npm) > 0 && src.NpmRegistry == "" {
		var names []string
		for _, d := range m.Npm {
			names = append(names, d.Name+"@"+d.Range+" ("+d.Source+")")
		}
		parts = append(parts, "npm: "+strings.Join(names, ", ")+
			` — add npm_registry { url = "https://registry.npmjs.org" } to the config`)
	}
	if len(parts) == 0 {
		return nil
	}
	return errkind.Errorf(ErrNoSource, "skill %q needs packages its image lacks: %s; then run: skillbox deps build %s", skill, strings.Join(parts, "; "), skill)
}

func (b *Builder) logger() hclog.Logger {
	if b.Logger == nil {
		return hclog.NewNullLogger()
	}
	return b.Logger
}

func (b *Builder) build(ctx context.Context, req Request, p *Plan) (*Layer, error) {
	if err := MissingSourceError(req.Skill, p.Missing, b.Sources); err != nil {
		return nil, err
	}
	began := time.Now()
	stage, err := b.Store.staging()
	if err != nil {
		return nil, errkind.Wrap(ErrBuild, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(stage) // a failed build leaves nothing behind
		}
	}()
	m := &Manifest{Digest: p.Digest, Image: req.Image, ImageDigest: req.ImageDigest,
		Python: p.Missing.Python, Npm: p.Missing.Npm}
	tree := filepath.Join(stage, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return nil, err
	}
	log := b.logger().With("layer", p.Digest, "skill", req.Skill)
	if len(p.Missing.Python) > 0 {
		if p.Image.PythonVersion == "" {
			return nil, errkind.Errorf(ErrBuild, "skill %q declares Python packages but image %q has no python3", req.Skill, req.Image)
		}
		arts, err := b.buildPython(ctx, req, p, stage, tree)
		if err != nil {
			return nil, err
		}
		m.Artifacts = append(m.Artifacts, arts...)
	}
	if len(p.Missing.Npm) > 0 {
		arts, err := b.buildNpm(ctx, req, p, stage, tree)
		if err != nil {
			return nil, err
		}
		m.Artifacts = append(m.Artifacts, arts...)
	}
	m.Built = time.Now().UTC()
	m.BuildMS = time.Since(began).Milliseconds()
	for _, d := range []string{"in", "npm"} {
		os.RemoveAll(filepath.Join(stage, d))
	}
	l, err := b.Store.commit(stage, m)
	if err != nil {
		return nil, err
	}
	ok = true
	log.Info("dependency layer built", "artifacts", len(m.Artifacts), "size", l.Size, "duration", time.Since(began))
	return l, nil
}

var wheelNameRE = regexp.MustCompile(`^([A-Za-z0-9_.]+)-([^-]+)-`)

// buildPython fetches wheels with pip download on the host (no package code
// runs: --only-binary, nothing is unpacked) and installs them with pip in a
// sandbox of the image, network off.
func (b *Builder) buildPython(ctx context.Context, req Request, p *Plan, stage, tree string) ([]Artifact, error) {
	in := filepath.Join(stage, "in")
	wheels := filepath.Join(in, "wheels")
	if err := os.MkdirAll(wheels, 0o755); err != nil {
		return nil, err
	}
	var reqs bytes.Buffer
	hashed := false
	for _, r := range p.Missing.Python {
		reqs.WriteString(r.Line() + "\n")
		hashed = hashed || len(r.Hashes) > 0
	}
	reqFile := filepath.Join(stage, "requirements.txt")
	if err := os.WriteFile(reqFile, reqs.Bytes(), 0o644); err != nil {
		return nil, err
	}
	args := []string{"-m", "pip", "download", "--isolated", "--disable-pip-version-check", "--no-cache-dir",
		"--progress-bar", "off", "--only-binary=:all:", "--dest", wheels,
		"--python-version", p.Image.PythonVersion, "--implementation", "cp",
		"--abi", "cp" + strings.ReplaceAll(p.Image.PythonVersion, ".", ""), "--abi", "abi3", "--abi", "none"}
	for _, plat := range platforms(p.Image.Glibc) {
		args = append(args, "--platform", plat)
	}
	if b.Sources.PythonIndex != "" {
		args = append(args, "--index-url", b.Sources.PythonIndex)
	} else {
		args = append(args, "--no-index")
	}
	for _, fl := range b.Sources.FindLinks {
		args = append(args, "--find-links", fl)
	}
	if hashed {
		args = append(args, "--require-hashes")
	}
	args = append(args, "-r", reqFile)
	py := b.HostPython
	if py == "" {
		py = "python3"
	}
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = hostEnv()
	out := newTailBuffer(outputTail)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return nil, b.pipDownloadError(ctx, p, out.String(), err)
	}
	entries, err := os.ReadDir(wheels)
	if err != nil {
		return nil, err
	}
	byName := map[string]Requirement{}
	for _, r := range p.Missing.Python {
		byName[r.Name] = r
	}
	var arts []Artifact
	var files []string
	paths := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".whl") {
			return nil, errkind.Errorf(ErrRefused, "%s is not a wheel; source distributions are refused (building runs package code)", name)
		}
		data, err := os.ReadFile(filepath.Join(wheels, name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		a := Artifact{Ecosystem: Python, File: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
		if m := wheelNameRE.FindStringSubmatch(name); m != nil {
			a.Name, a.Version = NormalizeName(m[1]), m[2]
		}
		if r, ok := byName[a.Name]; ok && len(r.Hashes) > 0 && !contains(r.Hashes, "sha256:"+a.SHA256) {
			return nil, errkind.Errorf(ErrHash, "%s (%s): got sha256:%s, %s pins %s", a.Name, name, a.SHA256, r.Source, strings.Join(r.Hashes, " or "))
		}
		arts = append(arts, a)
		files = append(files, "/skill/wheels/"+name)
		paths[name] = filepath.Join(wheels, name)
	}
	sort.Strings(files)
	if err := b.checkWheelSizes(who(req), paths); err != nil {
		return nil, err
	}
	argv, err := b.pipInstaller(ctx, p.Image, in)
	if err != nil {
		return nil, err
	}
	argv = append(argv, "install", "--isolated", "--no-index", "--no-deps", "--disable-pip-version-check",
		"--no-cache-dir", "--no-warn-script-location", "--root-user-action=ignore", "--target", "/work/out/"+PythonDir)
	argv = append(argv, files...)
	if err := b.installInSandbox(ctx, req, in, argv, tree); err != nil {
		return nil, err
	}
	return arts, nil
}

// platforms are the wheel platform tags a glibc of version v (x86_64 or
// arm64) runs.
func platforms(glibc string) []string {
	arch := "x86_64"
	if goarch() == "arm64" {
		arch = "aarch64"
	}
	maxMinor := 36
	var major, minor int
	if _, err := fmt.Sscanf(glibc, "%d.%d", &major, &minor); err == nil && major == 2 {
		maxMinor = minor
	}
	out := []string{"linux_" + arch}
	for m := maxMinor; m >= 17; m-- {
		out = append(out, fmt.Sprintf("manylinux_2_%d_%s", m, arch))
	}
	return append(out, "manylinux2014_"+arch)
}

var hashMismatchRE = regexp.MustCompile(`(?m)^\s+([A-Za-z0-9._-]+)==\S+ from \S+.*\n\s+Expected sha256 ([0-9a-f]+)\n\s+Got\s+([0-9a-f]+)`)

var noMatchRE = regexp.MustCompile(`No matching distribution found for ([A-Za-z0-9._-]+)`)

// pipDownloadError turns pip's failure into a message naming the package:
// one with only source distributions is refused as such.
func (b *Builder) pipDownloadError(ctx context.Context, p *Plan, out string, err error) error {
	if m := hashMismatchRE.FindStringSubmatch(out); m != nil {
		name := NormalizeName(m[1])
		where := ""
		for _, r := range p.Missing.Python {
			if r.Name == name {
				where = " (" + r.Source + ")"
			}
		}
		return errkind.Errorf(ErrHash, "%s%s: the index serves sha256:%s, the requirement pins sha256:%s; nothing was installed or cached: fix the pinned hash or the index", name, where, m[3], m[2])
	}
	if strings.Contains(out, "DO NOT MATCH THE HASHES") || strings.Contains(out, "hashes are required") ||
		strings.Contains(out, "Hashes are required") {
		return errkind.Errorf(ErrHash, "pip refused the download: %s", tail(out, 1200))
	}
	if m := noMatchRE.FindStringSubmatch(out); m != nil {
		name := NormalizeName(m[1])
		if sdist := b.onlySdist(ctx, name); sdist != "" && !p.Missing.AllowSource {
			return errkind.Errorf(ErrRefused, "%s is only available as a source distribution (%s); building from source runs package code, so it is refused: publish a wheel to the index, or set build_from_source = true in a policy rule for the skill", name, sdist)
		}
		return errkind.Wrap(ErrBuild, &NoWheelError{Package: name, Python: p.Image.PythonVersion, Output: tail(out, 600)})
	}
	return errkind.Errorf(ErrBuild, "pip download: %v: %s", err, tail(out, 1200))
}

// NoWheelError is a build that failed because the configured source has
// no wheel of Package (normalised) for the image's Python: a mirror that
// lacks it, or a name it does not know. The image extras are optional
// because of it (a layer leaves out an extra the source lacks).
type NoWheelError struct {
	Package string
	Python  string
	Output  string // pip's last words
}

func (e *NoWheelError) Error() string {
	return fmt.Sprintf("no wheel of %s for python %s on linux in the configured source: %s", e.Package, e.Python, e.Output)
}

var hrefRE = regexp.MustCompile(`href="([^"]+)"`)

// onlySdist looks at the index page of name and returns the first source
// distribution's file name when the page lists no wheel.
func (b *Builder) onlySdist(ctx context.Context, name string) string {
	if b.Sources.PythonIndex == "" {
		return ""
	}
	u := strings.TrimSuffix(b.Sources.PythonIndex, "/") + "/" + name + "/"
	body, err := b.get(ctx, u, 4<<20)
	if err != nil {
		return ""
	}
	sdist := ""
	for _, m := range hrefRE.FindAllStringSubmatch(string(body), -1) {
		file := m[1]
		if i := strings.IndexAny(file, "#?"); i >= 0 {
			file = file[:i]
		}
		file = file[strings.LastIndex(file, "/")+1:]
		if strings.HasSuffix(file, ".whl") {
			return ""
		}
		if sdist == "" && (strings.HasSuffix(file, ".tar.gz") || strings.HasSuffix(file, ".zip")) {
			sdist = file
		}
	}
	return sdist
}

func (b *Builder) get(ctx context.Context, u string, max int64) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c := b.HTTP
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("GET %s: larger than %d bytes", u, max)
	}
	return data, nil
}

// pipInstaller returns the argv prefix that runs pip inside the sandbox:
// the image's own pip when it has one, otherwise the host's pip package
// copied into the read-only input mount (pip is pure Python; it runs under
// the image's interpreter and only unpacks the wheels it is given).
func (b *Builder) pipInstaller(ctx context.Context, im *Image, in string) ([]string, error) {
	if im.HasPip {
		return []string{"python3", "-m", "pip"}, nil
	}
	py := b.HostPython
	if py == "" {
		py = "python3"
	}
	out, err := exec.CommandContext(ctx, py, "-c", "import os, pip; print(os.path.dirname(pip.__file__))").Output()
	if err != nil {
		return nil, errkind.Errorf(ErrBuild, "the image has no pip and the host's %s has none to lend: install pip on the host (python3 -m pip) or add python3-pip to the image", py)
	}
	src := strings.TrimSpace(string(out))
	if err := copyTree(src, filepath.Join(in, "pip", "pip")); err != nil {
		return nil, errkind.Errorf(ErrBuild, "copying pip: %w", err)
	}
	return []string{"python3", "/skill/pip/pip"}, nil
}

// installInSandbox runs argv in a fresh sandbox of the image with in
// mounted read-only at /skill and no network, and copies what it wrote
// under /work/out into tree.
func (b *Builder) installInSandbox(ctx context.Context, req Request, in string, argv []string, tree string) error {
	if b.Runtime == nil {
		return errkind.Errorf(ErrBuild, "no sandbox runtime to install in")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	lim := installLimits(b.layerCap())
	job := runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: runtime.IDPrefix + "deps-" + hex.EncodeToString(rnd[:]), RootFS: req.RootFS, SkillDir: in, Limits: lim},
		Invocation: runtime.Invocation{Args: tailed(argv), Limits: lim},
	}
	res, err := b.Runtime.Run(ctx, job)
	if err != nil {
		return errkind.Errorf(ErrBuild, "install sandbox: %w", err)
	}
	out := string(res.Stderr) + string(res.Stdout)
	if res.Reason != runtime.ReasonExit || res.ExitCode != 0 {
		if noSpace(out) {
			// The tmpfs, no larger than the cap, filled while unpacking.
			return b.ranOutOfRoom(who(req))
		}
		cut := ""
		if res.StdoutTruncated || res.StderrTruncated {
			cut = fmt.Sprintf(" (installer output cut at %d bytes per stream)", job.Invocation.Limits.StdoutBytes)
		}
		return errkind.Errorf(ErrBuild, "installing in the sandbox ended with %s (exit %d)%s: %s", res.Reason, res.ExitCode, cut, tail(out, 1500))
	}
	var total int64
	for _, o := range res.Outputs {
		total += o.Size
	}
	if res.OutputsTruncated || total > b.layerCap() {
		return b.tooLarge(who(req), "the installed tree", humanSize(total+res.OutputsOmittedBytes))
	}
	for i, o := range res.Outputs {
		rel, ok := strings.CutPrefix(o.Path, "out/")
		if !ok {
			continue
		}
		dst := filepath.Join(tree, filepath.FromSlash(rel))
		if !strings.HasPrefix(dst, tree+string(filepath.Separator)) {
			return errkind.Errorf(ErrBuild, "output path %q leaves the layer", o.Path)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.Contains(rel, "/bin/") || strings.HasPrefix(rel, "node_modules/.bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(dst, o.Data, mode); err != nil {
			return err
		}
		res.Outputs[i].Data = nil // written: let it go
	}
	return nil
}

// installLimits are the install sandbox's limits for a layer cap: /work
// (where the layer is written) and /tmp (where pip stages a --target
// install) are tmpfs no larger than the cap, so an installer that unpacks
// more runs out of room, and the memory limit leaves room for both.
func installLimits(layerCap int64) runtime.Limits {
	mem := int64(3 << 30)
	if m := 2*layerCap + installSlack + 1<<30; m > mem {
		mem = m
	}
	return runtime.Limits{
		Timeout: 10 * time.Minute, MemoryBytes: mem, Pids: 256, CPUs: 2,
		WorkdirBytes: layerCap, TmpBytes: layerCap + installSlack, StdoutBytes: 256 << 10, StderrBytes: 256 << 10,
		OutputBytes: layerCap, OutputFiles: 200000, OutputFileBytes: layerCap,
	}
}

// who names what a layer is for in messages.
func who(req Request) string {
	if req.Skill != "" {
		return fmt.Sprintf("skill %q", req.Skill)
	}
	return fmt.Sprintf("the extras of image %q", req.Image)
}

func hostEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// tail is the last n bytes of s, saying when it cut.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return fmt.Sprintf("[output cut: the last %d bytes shown] …", n) + strings.ToValidUTF8(s[len(s)-n:], "")
	}
	return s
}

// copyTree copies regular files and directories of src to dst (no links).
func copyTree(src, dst string) error {
	return filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		t := filepath.Join(dst, rel)
		switch {
		case info.IsDir():
			if info.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return os.MkdirAll(t, 0o755)
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(t, data, 0o644)
		}
		return nil
	})
}
