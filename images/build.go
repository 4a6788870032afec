package images

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// fallbackEpoch is SOURCE_DATE_EPOCH when the archive's Release date cannot
// be read: Debian 13's release day (2025-08-09 UTC). Any fixed value keeps
// builds reproducible; the Release date is preferred because it moves with
// the archive content.
const fallbackEpoch = 1754697600

// mergedUsrHooks is mmdebstrap's own hook directory that sets up merged /usr
// with symlinks and installs usr-is-merged. Without it apt satisfies
// init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which drags
// full perl into every image (~45 MB).
const mergedUsrHooks = "/usr/share/mmdebstrap/hooks/merged-usr"

// dpkgExcludes keep documentation, manual pages and translations out of the
// images: scripts in a sandbox never read them. Copyright files stay, since
// the images are redistributable Debian binaries. The C.UTF-8 locale lives in
// /usr/lib/locale and is not touched.
var dpkgExcludes = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
	"path-exclude=/usr/share/lintian/*",
}

// customizeHook runs in the finished chroot. mmdebstrap copies the build
// host's /etc/hostname and /etc/resolv.conf in, which would make the image
// depend on the host; resolv.conf stays as an empty file because runtimes
// bind-mount over it and cannot create it on a read-only rootfs. The *-old
// files are dpkg/debconf backups nobody reads. apt's cache and state go when
// the image has no apt (mmdebstrap's own cleanup, which runs after this hook,
// still leaves /var/lib/apt/lists/{lock,partial}; see chrootTmp for why
// their owner is stable). /skill, /skills and /work are the mount points the
// runtime binds the skill(s) and the workdir on (runtime.SkillMount,
// runtime.SkillsMount, runtime.WorkDir):
// they must exist in the image, since the shared rootfs is read-only and a
// runtime must not create them there. /etc/hosts is the mount point of the
// hosts file the runtime generates; it is written whole (the essential set
// has none; netbase's differs between suites) so "localhost" resolves even
// where a runtime does not bind its own over it.
//
// LibreOffice's launchers in /usr/bin are symlinks to shell scripts that find
// their install directory by parsing `ls -l` of their own path; Debian 12's
// runsc (2022) fails that statx call, so soffice would not start there. The
// links become two-line scripts that exec the launcher by its real path,
// which needs no resolving; on other runtimes nothing changes.
const customizeHook = `rm -f "$1/etc/hostname" "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old && ` +
	`rm -f "$1/etc/resolv.conf" && : > "$1/etc/resolv.conf" && chmod 0644 "$1/etc/resolv.conf" && ` +
	`rm -f "$1/etc/hosts" && printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$1/etc/hosts" && chmod 0644 "$1/etc/hosts" && ` +
	`for l in "$1"/usr/bin/*; do if [ -L "$l" ]; then t=$(readlink "$l"); case "$t" in ../lib/libreoffice/program/*) ` +
	`rm "$l" && printf '#!/bin/sh\nexec /usr/lib/libreoffice/program/%s "$@"\n' "${t##*/}" > "$l" && chmod 0755 "$l";; esac; fi; done && ` +
	`if [ -e "$1/usr/bin/apt-get" ]; then chown 0:0 "$1/var/cache/apt/archives/partial" "$1/var/lib/apt/lists/partial"; ` +
	`else rm -rf "$1/var/cache/apt" "$1/var/lib/apt"; fi && ` +
	`mkdir -m 0755 -p "$1/skill" "$1/skills" "$1/work"`

// Build builds the image for r with mmdebstrap and stores it, replacing the
// image of that name. Concise progress lines go to progress (nil discards
// them). Only one build of a name runs at a time across processes; a second
// caller waits and then builds again, because an explicit build is a request
// for a fresh image.
func (s *Store) Build(ctx context.Context, r *Recipe, progress io.Writer) (*Image, error) {
	return s.BuildWith(ctx, r, BuildOptions{Progress: progress})
}

// BuildWith is Build with the choices of opts.
func (s *Store) BuildWith(ctx context.Context, r *Recipe, opts BuildOptions) (*Image, error) {
	img, err := s.build(ctx, r, opts, false)
	s.built(r.Name, err)
	return img, err
}

// OnBuild makes f hear of every build this store runs, once it has ended
// (err: it failed): the daemon's metrics count them. Set it before the
// store is used; nil hears nothing.
func (s *Store) OnBuild(f func(image string, err error)) { s.onBuild = f }

func (s *Store) built(image string, err error) {
	if s.onBuild != nil {
		s.onBuild(image, err)
	}
}

// BuildLogPath is where the full output of the latest build of the image
// called name is kept.
func (s *Store) BuildLogPath(name string) string {
	return filepath.Join(s.dir, "logs", "build-"+name+".log")
}

// build is BuildWith; with onlyIfMissing it returns the image another
// process built while this one waited for the build lock, instead of
// building twice.
func (s *Store) build(ctx context.Context, r *Recipe, opts BuildOptions, onlyIfMissing bool) (*Image, error) {
	if err := r.Validate(); err != nil {
		return nil, errkind.Errorf(ErrBuildFailed, "%s: %w", r.File, err)
	}
	start := time.Now()
	rep := newStageReporter(opts.Progress, r, opts.Log == nil)
	defer rep.end("")
	lock, ok, err := tryLock(s.lockPath("build", r.Name))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", s.lockPath("build", r.Name), err)
	}
	if !ok {
		rep.begin("waiting for another build of " + r.Name)
		if lock, err = acquireLock(ctx, s.lockPath("build", r.Name), s.logger); err != nil {
			return nil, err
		}
		rep.end("")
	}
	defer lock.release()
	if onlyIfMissing {
		if img, err := s.getFor(r); err == nil {
			return img, nil
		}
	}
	bin, err := exec.LookPath(s.mmdebstrap)
	if err != nil {
		return nil, errkind.Errorf(ErrBuildFailed, "%s not found; install it with: apt-get install mmdebstrap", s.mmdebstrap)
	}
	rep.begin("fetching package lists (" + r.Suite + ")")
	epoch := s.sourceDateEpoch(ctx, r)
	s.logger.Info("building image", "image", r.Name, "recipe", r.File, "suite", r.Suite,
		"packages", len(r.Packages), "source_date_epoch", epoch.Unix())

	work, err := os.MkdirTemp(s.tmpDir(), "build-"+r.Name+"-")
	if err != nil {
		return nil, err
	}
	defer removeTree(work)
	if err := os.Chmod(work, 0o755); err != nil { // see OpenStore: _apt needs to get in
		return nil, err
	}
	chroot, err := chrootTmp(work)
	if err != nil {
		return nil, err
	}
	if chroot != work {
		defer removeTree(chroot)
	}
	tarPath := filepath.Join(work, "rootfs.tar")
	args := mmdebstrapArgs(r, tarPath, dirExists(mergedUsrHooks))

	logPath := s.BuildLogPath(r.Name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, errkind.Errorf(ErrBuildFailed, "image %q: build log: %w", r.Name, err)
	}
	defer logFile.Close()
	cmdline := "mmdebstrap " + strings.Join(args, " ")
	fmt.Fprintln(logFile, cmdline)
	verbose := opts.Log
	if verbose != nil {
		fmt.Fprintf(verbose, "[%s] %s\n", r.Name, cmdline)
	}
	out := newLineWriter(logFile, "", func(line string) {
		if verbose != nil {
			fmt.Fprintf(verbose, "[%s] %s\n", r.Name, line)
		}
		rep.mmdebstrapLine(line)
	})
	runErr := s.runMmdebstrap(ctx, bin, args, buildEnv(epoch, chroot), out, s.asRoot)
	if runErr != nil && s.asRoot && errors.Is(runErr, syscall.EPERM) && ctx.Err() == nil {
		// Root without CAP_SYS_ADMIN (inside some containers) cannot make
		// a mount namespace; mmdebstrap still cleans up its mounts unless
		// it is killed.
		s.logger.Warn("cannot create a private mount namespace for mmdebstrap; running it without one", "error", runErr)
		runErr = s.runMmdebstrap(ctx, bin, args, buildEnv(epoch, chroot), out, false)
	}
	out.Flush()
	if runErr != nil {
		rep.end("failed")
		if ctx.Err() != nil {
			return nil, errkind.Errorf(ErrBuildFailed, "image %q: build cancelled: %w", r.Name, ctx.Err())
		}
		return nil, errkind.Errorf(ErrBuildFailed, "image %q: mmdebstrap: %v; its last %d lines:\n%s\nfull log: %s\ncheck the recipe (%s) and that the mirror is reachable, then run: skillbox images build %s", r.Name, runErr, failTailLines, out.Tail(), logPath, r.File, r.Name)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, errkind.Errorf(ErrBuildFailed, "image %q: mmdebstrap left no tarball: %v (full log: %s)", r.Name, err, logPath)
	}
	defer f.Close()
	rep.begin("writing the OCI layout")
	history := "mmdebstrap --variant=" + r.Variant + " --include=" + strings.Join(r.Packages, ",") + " " + r.Suite + " " + r.Mirror
	img, err := s.commit(ctx, r, f, epoch, history)
	if err != nil {
		rep.end("failed")
		return nil, errkind.Errorf(ErrBuildFailed, "image %q: %w", r.Name, err)
	}
	if opts.Unpack {
		rep.begin("unpacking the rootfs")
		if _, err := s.RootFS(ctx, img); err != nil {
			rep.end("failed")
			return nil, err
		}
	}
	took := time.Since(start).Round(time.Second)
	s.logger.Info("image built", "image", r.Name, "digest", img.Digest, "duration", took)
	rep.done("done: %s, %s (%s unpacked) in %s", img.Digest, HumanSize(img.Size), HumanSize(img.UnpackedSize), formatElapsed(took))
	return img, nil
}

// chrootTmp returns the directory mmdebstrap builds its chroot in (its
// TMPDIR): the build's work directory in the store when the unprivileged
// _apt user can reach it, else a fresh world-searchable directory under the
// system temp dir. It matters for the image bytes: apt downloads as _apt
// only when _apt can reach the chroot, and the owner of
// /var/lib/apt/lists/partial in the image (_apt or root) records which one
// happened, so a store below a 0700 directory would otherwise build
// different digests from the default one.
func chrootTmp(work string) (string, error) {
	if othersCanReach(work) {
		return work, nil
	}
	d, err := os.MkdirTemp("", "skillbox-chroot-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil || !othersCanReach(d) {
		os.Remove(d)
		return work, nil // nothing better to offer; mmdebstrap warns and goes on
	}
	return d, nil
}

// othersCanReach says whether every directory from / down to p is
// searchable by any user.
func othersCanReach(p string) bool {
	for d := p; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// runMmdebstrap runs the build command. It gets its own process group, so
// cancelling kills apt and dpkg too, not only mmdebstrap; with privateMounts
// also its own mount namespace: mmdebstrap's root mode mounts /proc, /sys and
// /dev into its chroot, and if it is killed those mounts must die with it
// instead of lingering on the host under a directory this process deletes.
func (s *Store) runMmdebstrap(ctx context.Context, bin string, args, env []string, out io.Writer, privateMounts bool) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if privateMounts {
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd.Run()
}

// mmdebstrapArgs is the command line for r, writing a tarball to target.
func mmdebstrapArgs(r *Recipe, target string, mergedUsr bool) []string {
	args := []string{
		"--variant=" + r.Variant,
		"--format=tar",
		// Package descriptions in other languages are never needed.
		`--aptopt=Acquire::Languages "none"`,
	}
	for _, o := range dpkgExcludes {
		args = append(args, "--dpkgopt="+o)
	}
	if mergedUsr {
		args = append(args, "--hook-dir="+mergedUsrHooks)
	}
	args = append(args,
		"--customize-hook="+customizeHook,
		"--include="+strings.Join(r.Packages, ","),
		"--",
		r.Suite, target, r.Mirror)
	return append(args, r.Sources...)
}

// buildEnv is mmdebstrap's environment: the caller's, with TMPDIR pointed
// into the store (the chroot is built there, on the store's filesystem) and
// SOURCE_DATE_EPOCH set so mmdebstrap, dpkg and tar produce reproducible
// timestamps.
func buildEnv(epoch time.Time, tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") || strings.HasPrefix(kv, "TMPDIR=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10), "TMPDIR="+tmp)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// sourceDateEpoch picks SOURCE_DATE_EPOCH for a build: the caller's if set
// (the reproducible-builds convention), else the newest Date of the Release
// files of every suite the recipe installs from, else fallbackEpoch. The
// newest Release date is the latest moment the inputs can carry, so clamping
// every timestamp to it loses nothing real.
func (s *Store) sourceDateEpoch(ctx context.Context, r *Recipe) time.Time {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return time.Unix(n, 0).UTC()
		}
		s.logger.Warn("ignoring SOURCE_DATE_EPOCH: not a positive integer", "value", v)
	}
	t, err := releaseDate(ctx, aptSuites(r))
	if err != nil {
		s.logger.Warn("cannot read the archive's Release date; using a fixed SOURCE_DATE_EPOCH",
			"image", r.Name, "error", err, "epoch", fallbackEpoch)
		return time.Unix(fallbackEpoch, 0).UTC()
	}
	return t
}

// aptSuite is one "URI SUITE" pair a build fetches from.
type aptSuite struct{ uri, suite string }

func aptSuites(r *Recipe) []aptSuite {
	out := []aptSuite{{r.Mirror, r.Suite}}
	for _, line := range r.Sources {
		f := strings.Fields(line)[1:]                   // drop "deb"
		if len(f) > 0 && strings.HasPrefix(f[0], "[") { // deb [signed-by=…] URI SUITE …
			for len(f) > 0 {
				end := strings.HasSuffix(f[0], "]")
				f = f[1:]
				if end {
					break
				}
			}
		}
		if len(f) >= 2 {
			out = append(out, aptSuite{f[0], f[1]})
		}
	}
	return out
}

// releaseClient fetches Release files; the timeout bounds a dead mirror.
var releaseClient = &http.Client{Timeout: 30 * time.Second}

// releaseDate returns the newest Date: of the suites' InRelease files. It
// reads only the date; the signature is mmdebstrap's (apt's) job when it
// downloads the same file.
func releaseDate(ctx context.Context, suites []aptSuite) (time.Time, error) {
	var newest time.Time
	for _, su := range suites {
		t, err := suiteDate(ctx, su)
		if err != nil {
			return time.Time{}, err
		}
		if t.After(newest) {
			newest = t
		}
	}
	return newest.UTC(), nil
}

func suiteDate(ctx context.Context, su aptSuite) (time.Time, error) {
	base := strings.TrimSuffix(su.uri, "/") + "/dists/" + su.suite + "/"
	var lastErr error
	for _, name := range []string{"InRelease", "Release"} {
		b, err := fetchHead(ctx, base+name, 64<<10)
		if err != nil {
			lastErr = err
			continue
		}
		return parseReleaseDate(b)
	}
	return time.Time{}, lastErr
}

// fetchHead reads up to limit bytes of u (http, https or file URL); the Date
// field sits near the top of a Release file.
func fetchHead(ctx context.Context, u string, limit int64) ([]byte, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	if pu.Scheme == "file" {
		f, err := os.Open(pu.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, limit))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := releaseClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// parseReleaseDate finds the Date field of a (possibly clearsigned) Release
// file, e.g. "Date: Sat, 10 May 2025 09:17:42 UTC".
func parseReleaseDate(b []byte) (time.Time, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Date:"); ok {
			v = strings.TrimSpace(v)
			for _, layout := range []string{time.RFC1123, time.RFC1123Z, "Mon, 2 Jan 2006 15:04:05 MST", "Mon, 2 Jan 2006 15:04:05 -0700"} {
				if t, err := time.Parse(layout, v); err == nil {
					return t.UTC(), nil
				}
			}
			return time.Time{}, fmt.Errorf("release file: cannot parse Date %q", v)
		}
	}
	return time.Time{}, errors.New("release file has no Date field")
}

// HumanSize formats a byte count the way `images list` shows it.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
