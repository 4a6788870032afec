package runtime

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

var (
	JobIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	maxArgs      = 4096
	maxArgBytes  = 256 << 10
)

// ValidateJob checks the parts of a job every backend relies on; errors wrap
// ErrInvalidJob. It does not touch the file system.
func ValidateJob(job Job) error {
	if !JobIDPattern.MatchString(job.Sandbox.ID) {
		return errkind.Errorf(ErrInvalidJob, "job id %q must be 1-64 of [A-Za-z0-9_-], starting with a letter or digit", truncateForError(job.Sandbox.ID))
	}
	if !IsCleanAbs(job.Sandbox.RootFS) && (job.Sandbox.RootFS != "" || job.Sandbox.Image.Ref == "") {
		return errkind.Errorf(ErrInvalidJob, "rootfs %q must be an absolute, clean host path", job.Sandbox.RootFS)
	}
	if job.Sandbox.SkillDir != "" && !IsCleanAbs(job.Sandbox.SkillDir) {
		return errkind.Errorf(ErrInvalidJob, "skill dir %q must be an absolute, clean host path", job.Sandbox.SkillDir)
	}
	if m := job.Sandbox.Session; m != nil {
		for what, p := range map[string]string{"skills dir": m.SkillsDir, "supervisor": m.Supervisor} {
			if !IsCleanAbs(p) {
				return errkind.Errorf(ErrInvalidJob, "session %s %q must be an absolute, clean host path", what, p)
			}
		}
		if m.Layers != "" && !IsCleanAbs(m.Layers) {
			return errkind.Errorf(ErrInvalidJob, "session layers dir %q must be an absolute, clean host path", m.Layers)
		}
		if job.Sandbox.SkillDir != "" || job.Sandbox.DepsDir != "" || job.Sandbox.UsesSkillsDir() {
			return errkind.Errorf(ErrInvalidJob, "a session sandbox mounts its skills and layers itself, not a run's")
		}
	}
	if job.Sandbox.DepsDir != "" && !IsCleanAbs(job.Sandbox.DepsDir) {
		return errkind.Errorf(ErrInvalidJob, "dependency layer %q must be an absolute, clean host path", job.Sandbox.DepsDir)
	}
	if err := validateSkillMounts(job); err != nil {
		return err
	}
	if job.Sandbox.Network && job.Sandbox.Egress != nil {
		return errkind.Errorf(ErrInvalidJob, "a job has either full network or egress through the proxy, not both")
	}
	if len(job.Invocation.Args) == 0 || job.Invocation.Args[0] == "" {
		return errkind.Errorf(ErrInvalidJob, "no command to run (Args is empty)")
	}
	if len(job.Invocation.Args) > maxArgs {
		return errkind.Errorf(ErrInvalidJob, "%d arguments, at most %d", len(job.Invocation.Args), maxArgs)
	}
	n := 0
	for i, a := range job.Invocation.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return errkind.Errorf(ErrInvalidJob, "argument %d contains a NUL byte", i)
		}
		n += len(a) + 1
	}
	if n > maxArgBytes {
		return errkind.Errorf(ErrInvalidJob, "arguments are %d bytes, at most %d", n, maxArgBytes)
	}
	if _, err := ContainerEnv(job.Invocation.Env); err != nil {
		return err
	}
	if err := validateModuleEnv(job.Invocation.ModuleEnv); err != nil {
		return err
	}
	return ValidateInputs(job.Invocation.Files, job.Limits().WorkdirBytes)
}

func IsCleanAbs(p string) bool {
	return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsRune(p, 0)
}
