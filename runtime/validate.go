package runtime

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	JobIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	maxArgs      = 4096
	maxArgBytes  = 256 << 10
)

// ValidateJob checks the parts of a job every backend relies on; errors wrap
// ErrInvalidJob. It does not touch the file system.
func ValidateJob(job Job) error {
	if !JobIDPattern.MatchString(job.ID) {
		return fmt.Errorf("%w: job id %q must be 1-64 of [A-Za-z0-9_-], starting with a letter or digit", ErrInvalidJob, truncateForError(job.ID))
	}
	if !IsCleanAbs(job.RootFS) && (job.RootFS != "" || job.Image.Ref == "") {
		return fmt.Errorf("%w: rootfs %q must be an absolute, clean host path", ErrInvalidJob, job.RootFS)
	}
	if job.SkillDir != "" && !IsCleanAbs(job.SkillDir) {
		return fmt.Errorf("%w: skill dir %q must be an absolute, clean host path", ErrInvalidJob, job.SkillDir)
	}
	if job.DepsDir != "" && !IsCleanAbs(job.DepsDir) {
		return fmt.Errorf("%w: dependency layer %q must be an absolute, clean host path", ErrInvalidJob, job.DepsDir)
	}
	if err := validateSkillMounts(job); err != nil {
		return err
	}
	if job.Network && job.Egress != nil {
		return fmt.Errorf("%w: a job has either full network or egress through the proxy, not both", ErrInvalidJob)
	}
	if len(job.Args) == 0 || job.Args[0] == "" {
		return fmt.Errorf("%w: no command to run (Args is empty)", ErrInvalidJob)
	}
	if len(job.Args) > maxArgs {
		return fmt.Errorf("%w: %d arguments, at most %d", ErrInvalidJob, len(job.Args), maxArgs)
	}
	n := 0
	for i, a := range job.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argument %d contains a NUL byte", ErrInvalidJob, i)
		}
		n += len(a) + 1
	}
	if n > maxArgBytes {
		return fmt.Errorf("%w: arguments are %d bytes, at most %d", ErrInvalidJob, n, maxArgBytes)
	}
	if _, err := ContainerEnv(job.Env); err != nil {
		return err
	}
	if err := validateModuleEnv(job.ModuleEnv); err != nil {
		return err
	}
	return ValidateInputs(job.Files, job.Limits.WithDefaults().WorkdirBytes)
}

func IsCleanAbs(p string) bool {
	return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsRune(p, 0)
}
