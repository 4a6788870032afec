package runtime

import (
	"path"
	"regexp"

	"github.com/skillbox/skillbox/runtime/errkind"
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
	// ProgramDir holds SandboxSpec.Program, read-only. Its name cannot be a
	// skill's: skill targets start with a letter or a digit.
	ProgramDir = SkillsMount + "/.code"
	// MaxProgramBytes bounds SandboxSpec.Program.Data.
	MaxProgramBytes = 4 << 20
	// maxSkillMounts bounds SandboxSpec.Skills.
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

// UsesSkillsDir says whether the sandbox needs the SkillsMount directory.
func (s SandboxSpec) UsesSkillsDir() bool { return len(s.Skills) > 0 || s.Program != nil }

// validateSkillMounts checks SandboxSpec.Skills and SandboxSpec.Program: sources are clean
// absolute host paths; targets are SkillTarget(name) for a plain name, each
// at most once; the program has a plain name and a bounded size.
func validateSkillMounts(job Job) error {
	if len(job.Sandbox.Skills) > maxSkillMounts {
		return errkind.Errorf(ErrInvalidJob, "%d skill mounts, at most %d", len(job.Sandbox.Skills), maxSkillMounts)
	}
	seen := make(map[string]bool, len(job.Sandbox.Skills))
	for _, m := range job.Sandbox.Skills {
		if !IsCleanAbs(m.Source) {
			return errkind.Errorf(ErrInvalidJob, "skill mount source %q must be an absolute, clean host path", truncateForError(m.Source))
		}
		dir, name := path.Split(m.Target)
		if dir != SkillsMount+"/" || !mountNamePattern.MatchString(name) {
			return errkind.Errorf(ErrInvalidJob, "skill mount target %q must be %s/NAME for a plain name (letters, digits, . _ -)", truncateForError(m.Target), SkillsMount)
		}
		if seen[m.Target] {
			return errkind.Errorf(ErrInvalidJob, "skill mount target %q given twice", m.Target)
		}
		seen[m.Target] = true
	}
	if p := job.Sandbox.Program; p != nil {
		if !mountNamePattern.MatchString(p.Name) {
			return errkind.Errorf(ErrInvalidJob, "program name %q must be a plain file name (letters, digits, . _ -)", truncateForError(p.Name))
		}
		if len(p.Data) > MaxProgramBytes {
			return errkind.Errorf(ErrInvalidJob, "program is %d bytes, at most %d", len(p.Data), MaxProgramBytes)
		}
	}
	return nil
}
