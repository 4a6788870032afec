package runtime

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// skills.run_code runs code the caller wrote, not a file of one skill, so
// instead of one skill at SkillMount it gets every active skill at a path of
// its own under SkillsMount, and the code beside them in ProgramDir. All of
// it is read-only: the skills are pinned copies, the code is what was
// hashed, audited and approved.

const (
	// SkillsMount holds one read-only directory per mounted skill,
	// SkillsMount/<name> (SkillTarget). The image must have it as a mount
	// point (images build it); the runtime mounts a directory of the
	// bundle's on it that holds the mount points of the skills.
	SkillsMount = "/skills"
	// ProgramDir holds Job.Program, read-only. Its name cannot be a
	// skill's: skill targets start with a letter or a digit.
	ProgramDir = SkillsMount + "/.code"
	// MaxProgramBytes bounds Job.Program.Data.
	MaxProgramBytes = 4 << 20
	// maxSkillMounts bounds Job.Skills.
	maxSkillMounts = 64
)

// SkillBind is one skill directory mounted read-only at Target.
type SkillBind struct {
	Source string // host path of the skill's (pinned) directory
	Target string // SkillTarget(name): SkillsMount + "/" + name
}

// Program is code a job runs that is no file of a skill: it is written
// read-only to ProgramDir/Name, outside the workdir, so it is neither an
// input the script could change nor an output.
type Program struct {
	Name string // a base name, e.g. "main.py"
	Data []byte
}

// Path is where the program is inside the container.
func (p *Program) Path() string { return ProgramDir + "/" + p.Name }

// mountNamePattern is what a skill target's last element and a program's
// name may be: a plain file name that can stand in a module path list (no
// ':') and is never "." or "..".
var mountNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// SkillTarget is the fixed mount path of the skill named name.
func SkillTarget(name string) string { return SkillsMount + "/" + name }

// usesSkillsDir says whether the job needs the SkillsMount directory.
func (j Job) usesSkillsDir() bool { return len(j.Skills) > 0 || j.Program != nil }

// validateSkillMounts checks Job.Skills and Job.Program: sources are clean
// absolute host paths; targets are SkillTarget(name) for a plain name, each
// at most once; the program has a plain name and a bounded size.
func validateSkillMounts(job Job) error {
	if len(job.Skills) > maxSkillMounts {
		return fmt.Errorf("%w: %d skill mounts, at most %d", ErrInvalidJob, len(job.Skills), maxSkillMounts)
	}
	seen := make(map[string]bool, len(job.Skills))
	for _, m := range job.Skills {
		if !isCleanAbs(m.Source) {
			return fmt.Errorf("%w: skill mount source %q must be an absolute, clean host path", ErrInvalidJob, truncateForError(m.Source))
		}
		dir, name := path.Split(m.Target)
		if dir != SkillsMount+"/" || !mountNamePattern.MatchString(name) {
			return fmt.Errorf("%w: skill mount target %q must be %s/NAME for a plain name (letters, digits, . _ -)", ErrInvalidJob, truncateForError(m.Target), SkillsMount)
		}
		if seen[m.Target] {
			return fmt.Errorf("%w: skill mount target %q given twice", ErrInvalidJob, m.Target)
		}
		seen[m.Target] = true
	}
	if p := job.Program; p != nil {
		if !mountNamePattern.MatchString(p.Name) {
			return fmt.Errorf("%w: program name %q must be a plain file name (letters, digits, . _ -)", ErrInvalidJob, truncateForError(p.Name))
		}
		if len(p.Data) > MaxProgramBytes {
			return fmt.Errorf("%w: program is %d bytes, at most %d", ErrInvalidJob, len(p.Data), MaxProgramBytes)
		}
	}
	return nil
}

// skillsMounts are the mounts of a job's skills: the bundle's directory of
// mount points (and the program) on SkillsMount, then each skill on its
// target. Nothing when the job has neither skills nor a program.
func skillsMounts(job Job, source string) []specs.Mount {
	if !job.usesSkillsDir() {
		return nil
	}
	m := []specs.Mount{{Destination: SkillsMount, Type: "bind", Source: source, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}}}
	for _, s := range job.Skills {
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
func prepareSkillsDir(dir string, job Job) (string, error) {
	if !job.usesSkillsDir() {
		return "", nil
	}
	// A registry image (no RootFS on the host) gets the mount point made
	// in its snapshot by the OCI runtime.
	if st, err := os.Lstat(filepath.Join(job.RootFS, SkillsMount)); job.RootFS != "" && (err != nil || !st.IsDir()) {
		return "", fmt.Errorf("%w: the image at %s has no directory %s to mount the skills on: rebuild the image with this skillbox (skillbox images build NAME)", ErrUnavailable, job.RootFS, SkillsMount)
	}
	root := filepath.Join(dir, bundleSkills)
	dirs := []string{root}
	for _, s := range job.Skills {
		dirs = append(dirs, filepath.Join(root, path.Base(s.Target)))
	}
	if job.Program != nil {
		dirs = append(dirs, filepath.Join(root, path.Base(ProgramDir)))
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
	if p := job.Program; p != nil {
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
