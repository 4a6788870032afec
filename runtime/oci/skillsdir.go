package oci

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// skillsMounts are the mounts of a job's skills: the bundle's directory of
// mount points (and the program) on SkillsMount, then each skill on its
// target. Nothing when the job has neither skills nor a program.
func skillsMounts(job runtime.Job, source string) []specs.Mount {
	if !job.Sandbox.UsesSkillsDir() {
		return nil
	}
	m := []specs.Mount{{Destination: runtime.SkillsMount, Type: "bind", Source: source, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}}}
	for _, s := range job.Sandbox.Skills {
		// Like SkillMount: not noexec, a skill's own tools may be run by path.
		m = append(m, specs.Mount{Destination: s.Target, Type: "bind", Source: s.Source, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	return m
}

// bundleSkills is the bundle's directory mounted on SkillsMount.
const bundleSkills = "skills"

// prepareSkillsDir makes the directory mounted on SkillsMount in bundle
// dir: an empty mount point per skill and ProgramDir with the program, all
// root's and read-only to the container. It returns "" when the job needs
// none. The rootfs must have SkillsMount to mount it on.
func prepareSkillsDir(dir string, job runtime.Job) (string, error) {
	if !job.Sandbox.UsesSkillsDir() {
		return "", nil
	}
	// A registry image (no RootFS on the host) gets the mount point made
	// in its snapshot by the OCI runtime.
	if st, err := os.Lstat(filepath.Join(job.Sandbox.RootFS, runtime.SkillsMount)); job.Sandbox.RootFS != "" && (err != nil || !st.IsDir()) {
		return "", errkind.Errorf(runtime.ErrUnavailable, "the image at %s has no directory %s to mount the skills on: rebuild the image with this skillbox (skillbox images build NAME)", job.Sandbox.RootFS, runtime.SkillsMount)
	}
	root := filepath.Join(dir, bundleSkills)
	dirs := []string{root}
	for _, s := range job.Sandbox.Skills {
		dirs = append(dirs, filepath.Join(root, path.Base(s.Target)))
	}
	if job.Sandbox.Program != nil {
		dirs = append(dirs, filepath.Join(root, path.Base(runtime.ProgramDir)))
	}
	// Modes are set explicitly: the container's user must read them
	// whatever this process's umask.
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", fmt.Errorf("make skill mount point: %w", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return "", fmt.Errorf("make skill mount point: %w", err)
		}
	}
	if p := job.Sandbox.Program; p != nil {
		f := filepath.Join(dirs[len(dirs)-1], p.Name)
		if err := os.WriteFile(f, p.Data, 0o644); err != nil {
			return "", fmt.Errorf("write program: %w", err)
		}
		if err := os.Chmod(f, 0o644); err != nil {
			return "", fmt.Errorf("write program: %w", err)
		}
	}
	return root, nil
}

// sessionMounts are a session sandbox's own mounts (runtime.SessionMounts):
// the session's skills dir on SkillsMount, and under it the dependency
// layers and the supervisor binary. The skills dir is the owner's to fill
// while the sandbox lives (gVisor revalidates a bind mount's entries, so
// a skill added later is seen).
func sessionMounts(m *runtime.SessionMounts) []specs.Mount {
	if m == nil {
		return nil
	}
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	out := []specs.Mount{{Destination: runtime.SkillsMount, Type: "bind", Source: m.SkillsDir, Options: ro}}
	if m.Layers != "" {
		out = append(out, specs.Mount{Destination: runtime.SessionLayersMount, Type: "bind", Source: m.Layers, Options: ro})
	}
	return append(out, specs.Mount{Destination: runtime.SupervisorPath, Type: "bind", Source: m.Supervisor, Options: []string{"bind", "ro", "nosuid", "nodev"}})
}

// MakeSessionSkillsDir makes dir, the host side of a session sandbox's
// SkillsMount, with the mount points sessionMounts needs: root's, readable
// by the sandbox's user, never writable by it.
func MakeSessionSkillsDir(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, path.Base(runtime.SessionLayersMount)), filepath.Join(dir, path.Base(runtime.SupervisorDir)),
		filepath.Join(dir, path.Base(runtime.ProgramDir))} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("make session skills dir: %w", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("make session skills dir: %w", err)
		}
	}
	f := filepath.Join(dir, path.Base(runtime.SupervisorDir), path.Base(runtime.SupervisorPath))
	if err := os.WriteFile(f, nil, 0o755); err != nil {
		return fmt.Errorf("make supervisor mount point: %w", err)
	}
	return nil
}
