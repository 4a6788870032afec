package process

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// SupervisorSource is the python supervisor of BootPython, run as
// `python3 -c` so that nothing needs mounting for it.
//
//go:embed supervisor.py
var SupervisorSource string

// readyMarker is what a warm sandbox's first process writes on its stdout
// once it waits for its job.
const readyMarker = "skillbox-ready\n"

// holderArgv is the first process of a BootExec sandbox: it says it is
// ready and waits until its stdin closes (at Destroy).
var holderArgv = []string{"/bin/sh", "-c", "printf '" + `skillbox-ready\n` + "'; read -r _"}

// SupervisorMessage is the job as the python supervisor reads it: a
// length-prefixed JSON header (argv, env, cwd), then the script's stdin.
func SupervisorMessage(job runtime.Job) ([]byte, error) {
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return nil, err
	}
	return SupervisorJobMessage(job.Invocation.Args, append(env, job.Invocation.ModuleEnv...), runtime.WorkDir, job.Invocation.Stdin)
}

// SupervisorJobMessage is the python supervisor's job for argv, env (the
// whole environment, as given) and cwd, followed by stdin: an 8-byte
// big-endian length, then that many bytes of NUL-separated fields (cwd,
// argc in decimal, argv..., env...), which the supervisor splits without
// importing a parser.
func SupervisorJobMessage(argv, env []string, cwd string, stdin []byte) ([]byte, error) {
	fields := append(append([]string{cwd, strconv.Itoa(len(argv))}, argv...), env...)
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return nil, errkind.Errorf(runtime.ErrInvalidJob, "encode job: %q holds a NUL byte", f)
		}
	}
	hdr := []byte(strings.Join(fields, "\x00"))
	msg := binary.BigEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(msg, hdr...), stdin...), nil
}

type pipePair struct{ R, W *os.File }

// MakePipes makes n pipes; on error none is left open.
func MakePipes(n int) ([]pipePair, error) {
	ps := make([]pipePair, 0, n)
	for i := 0; i < n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range ps {
				p.R.Close()
				p.W.Close()
			}
			return nil, fmt.Errorf("pipe: %w", err)
		}
		ps = append(ps, pipePair{r, w})
	}
	return ps, nil
}
