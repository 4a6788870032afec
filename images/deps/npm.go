package deps

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// lockFile is the part of package-lock.json (v2/v3) the builder reads.
type lockFile struct {
	LockfileVersion int                    `json:"lockfileVersion"`
	Packages        map[string]lockPackage `json:"packages"`
}

type lockPackage struct {
	Version          string `json:"version"`
	Resolved         string `json:"resolved"`
	Integrity        string `json:"integrity"`
	Dev              bool   `json:"dev"`
	Link             bool   `json:"link"`
	HasInstallScript bool   `json:"hasInstallScript"`
}

var lockPathRE = regexp.MustCompile(`^node_modules/((@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*)(/node_modules/(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*)*$`)

// maxTarball caps one npm tarball.
const maxTarball = 256 << 20

// buildNpm resolves the npm dependencies into a lock (npm on the host with
// lifecycle scripts off, or the skill's own lock), fetches every tarball
// itself, checks its integrity and refuses install scripts, then unpacks
// them in a sandbox of the image with the network off.
func (b *Builder) buildNpm(ctx context.Context, req Request, p *Plan, stage, tree string) ([]Artifact, error) {
	lockData := p.Missing.NpmLock
	if lockData == nil {
		dir := filepath.Join(stage, "npm")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		deps := map[string]string{}
		for _, d := range p.Missing.Npm {
			deps[d.Name] = d.Range
		}
		pj, _ := json.Marshal(map[string]any{"name": "skillbox-deps", "version": "0.0.0", "private": true, "dependencies": deps})
		if err := os.WriteFile(filepath.Join(dir, "package.json"), pj, 0o644); err != nil {
			return nil, err
		}
		// Empty config files: the host's npm settings (registries, tokens,
		// scripts) play no part.
		for _, f := range []string{"npmrc-user", "npmrc-global"} {
			if err := os.WriteFile(filepath.Join(stage, f), nil, 0o600); err != nil {
				return nil, err
			}
		}
		npm := b.Npm
		if npm == "" {
			npm = "npm"
		}
		cmd := exec.CommandContext(ctx, npm, "install", "--package-lock-only", "--ignore-scripts", "--no-audit",
			"--no-fund", "--omit=dev", "--registry", b.Sources.NpmRegistry, "--cache", filepath.Join(stage, "npm-cache"),
			"--userconfig", filepath.Join(stage, "npmrc-user"), "--globalconfig", filepath.Join(stage, "npmrc-global"))
		cmd.Dir = dir
		cmd.Env = append(hostEnv(), "npm_config_update_notifier=false")
		out := newTailBuffer(outputTail)
		cmd.Stdout, cmd.Stderr = out, out
		err := cmd.Run()
		os.RemoveAll(filepath.Join(stage, "npm-cache"))
		if err != nil {
			return nil, errkind.Errorf(ErrBuild, "npm could not resolve %s: %s", npmList(p.Missing.Npm), tail(out.String(), 1200))
		}
		lockData, err = os.ReadFile(filepath.Join(dir, "package-lock.json"))
		if err != nil {
			return nil, errkind.Errorf(ErrBuild, "npm wrote no lock: %w", err)
		}
	}
	var lock lockFile
	if err := json.Unmarshal(lockData, &lock); err != nil {
		return nil, errkind.Errorf(ErrInvalid, "package-lock.json: %w", err)
	}
	if lock.LockfileVersion < 2 {
		return nil, errkind.Errorf(ErrInvalid, "package-lock.json version %d: regenerate it with npm 7 or later (lockfileVersion 2 or 3)", lock.LockfileVersion)
	}
	paths := make([]string, 0, len(lock.Packages))
	for k := range lock.Packages {
		if k != "" {
			paths = append(paths, k)
		}
	}
	sort.Strings(paths)
	in := filepath.Join(stage, "in")
	if err := os.MkdirAll(filepath.Join(in, "npm"), 0o755); err != nil {
		return nil, err
	}
	var arts []Artifact
	var script strings.Builder
	script.WriteString("set -e\n")
	for i, k := range paths {
		pkg := lock.Packages[k]
		if pkg.Dev {
			continue
		}
		m := lockPathRE.FindStringSubmatch(k)
		if m == nil {
			return nil, errkind.Errorf(ErrInvalid, "package-lock.json: %q is not a node_modules path", clip(k))
		}
		name := k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):]
		if pkg.Link {
			return nil, errkind.Errorf(ErrRefused, "%s is a link in the lock; only registry packages are installed", name)
		}
		if pkg.HasInstallScript && !p.Missing.AllowSource {
			return nil, errkind.Errorf(ErrRefused, "%s@%s has install scripts; they are not run: pick a version without them, or set build_from_source = true in a policy rule for the skill", name, pkg.Version)
		}
		u, err := b.tarballURL(pkg.Resolved)
		if err != nil {
			return nil, errkind.Errorf(ErrRefused, "%s: %w", name, err)
		}
		data, err := b.get(ctx, u, maxTarball)
		if err != nil {
			return nil, errkind.Errorf(ErrBuild, "fetching %s: %w", name, err)
		}
		if err := checkIntegrity(data, pkg.Integrity); err != nil {
			return nil, errkind.Errorf(ErrHash, "%s@%s: %w", name, pkg.Version, err)
		}
		if s := installScripts(data); s != "" && !p.Missing.AllowSource {
			return nil, errkind.Errorf(ErrRefused, "%s@%s has an install script (%s); it is not run: pick a version without one, or set build_from_source = true in a policy rule for the skill", name, pkg.Version, s)
		}
		sum := sha256.Sum256(data)
		file := fmt.Sprintf("%d.tgz", i)
		if err := os.WriteFile(filepath.Join(in, "npm", file), data, 0o644); err != nil {
			return nil, err
		}
		arts = append(arts, Artifact{Ecosystem: Npm, Name: name, Version: pkg.Version, File: u,
			SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), Integrity: pkg.Integrity})
		dst := "/work/out/" + k
		fmt.Fprintf(&script, "mkdir -p '%s' && tar -xzf '/skill/npm/%s' -C '%s' --strip-components=1 --no-same-owner --no-same-permissions\n", dst, file, dst)
	}
	if err := b.installInSandbox(ctx, req, in, []string{"/bin/sh", "-c", script.String()}, tree); err != nil {
		return nil, err
	}
	return arts, nil
}

// tarballURL checks that a lock's resolved URL points at the configured
// registry (a lock must not pull code from elsewhere).
func (b *Builder) tarballURL(resolved string) (string, error) {
	u, err := url.Parse(resolved)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("resolved %q is not a registry URL", clip(resolved))
	}
	reg, err := url.Parse(b.Sources.NpmRegistry)
	if err != nil {
		return "", err
	}
	if u.Host != reg.Host {
		return "", fmt.Errorf("resolved %q is not on the configured registry %s", clip(resolved), reg.Host)
	}
	return u.String(), nil
}

// checkIntegrity verifies an SRI string ("sha512-…"); one is required.
func checkIntegrity(data []byte, sri string) error {
	if sri == "" {
		return fmt.Errorf("the lock has no integrity hash")
	}
	for _, one := range strings.Fields(sri) {
		alg, want, ok := strings.Cut(one, "-")
		if !ok {
			continue
		}
		var h hash.Hash
		switch alg {
		case "sha512":
			h = sha512.New()
		case "sha256":
			h = sha256.New()
		case "sha1":
			h = sha1.New()
		default:
			continue
		}
		h.Write(data)
		if base64.StdEncoding.EncodeToString(h.Sum(nil)) == want {
			return nil
		}
		return fmt.Errorf("integrity %s does not match the tarball", clip(one))
	}
	return fmt.Errorf("integrity %q uses no known algorithm", clip(sri))
}

// installScripts names the install-time script a package tarball declares
// (preinstall, install, postinstall, or a binding.gyp npm would build), ""
// when none.
func installScripts(tgz []byte) string {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return ""
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		parts := strings.SplitN(h.Name, "/", 2)
		if len(parts) != 2 {
			continue
		}
		switch parts[1] {
		case "binding.gyp":
			return "binding.gyp"
		case "package.json":
			var pj struct {
				Scripts map[string]string `json:"scripts"`
			}
			if json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&pj) == nil {
				for _, s := range []string{"preinstall", "install", "postinstall"} {
					if pj.Scripts[s] != "" {
						return s
					}
				}
			}
		}
	}
}

func npmList(ds []NpmDep) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Name+"@"+d.Range)
	}
	return strings.Join(s, ", ")
}
