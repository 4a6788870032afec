package runner

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/policy"
)

// ProgramLister is an ImageSource that can list the programs on an image's
// PATH without building or unpacking anything: an error when the image is
// not built and unpacked here (or has no rootfs on the host).
type ProgramLister interface {
	Programs(name string) (*deps.Programs, error)
}

// shellInterpreters are the interpreters whose scripts are read for the
// programs they start.
var shellInterpreters = map[string]bool{"bash": true, "sh": true, "dash": true}

// interpreterFor is the one place a script's interpreter and image are
// chosen. The extension (or the #! line) picks them, from the config only
// (policy.Config.Interpreter); then, for a shell script, the programs it
// starts may move it: a shell script is mostly calls of other programs,
// and the tools document skills call (pdfinfo, qpdf, pandoc, soffice) are
// in the python image, not the shell one. When the script starts programs
// its image lacks, and another image skillbox builds has all of them and
// the shell, the script runs there, with the same argv; the rule says so.
// Without such an image it stays, and the rule names what is missing (the
// run fails as it would in a shell; skills check says it before).
// Images not built or not unpacked yet are not looked at: the choice never
// builds or unpacks one.
func (e *Engine) interpreterFor(rel string, script []byte) (policy.Interpreter, error) {
	in, err := e.cfg.Interpreter(rel, script[:min(len(script), 256)])
	if err != nil || len(in.Argv) == 0 || !shellInterpreters[path.Base(in.Argv[0])] {
		return in, err
	}
	pl, ok := e.images.(ProgramLister)
	if !ok {
		return in, nil
	}
	own, err := pl.Programs(in.Image)
	if err != nil {
		return in, nil
	}
	calls := deps.ShellCalls(script)
	lacking := own.Lacking(calls)
	if len(lacking) == 0 {
		return in, nil
	}
	for _, im := range e.cfg.Images.List {
		if im.Name == in.Image || im.Ref != "" {
			continue
		}
		ps, err := pl.Programs(im.Name)
		if err != nil || !ps.Has(in.Argv[0]) || len(ps.Lacking(calls)) > 0 {
			continue
		}
		in.Rule = fmt.Sprintf("%s, chosen over %s: the script starts %s, which image %q lacks", im.Rule(), in.Rule, strings.Join(lacking, ", "), in.Image)
		in.Image = im.Name
		return in, nil
	}
	in.Rule = fmt.Sprintf("%s; the script starts %s, which image %q lacks and no other built image has together with %s", in.Rule, strings.Join(lacking, ", "), in.Image, path.Base(in.Argv[0]))
	return in, nil
}

// readFileMax reads the file at p, at most limit bytes of it.
func readFileMax(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// checkImageFor is skills.check's view of interpreterFor: the image a
// script runs in when the programs it starts move it away from the one its
// extension names, else nil.
func (e *Engine) checkImageFor() func(rel string, data []byte) *deps.Image {
	pl, ok := e.images.(ProgramLister)
	if !ok {
		return nil
	}
	return func(rel string, data []byte) *deps.Image {
		byExt, err := e.cfg.Interpreter(rel, data[:min(len(data), 256)])
		if err != nil {
			return nil
		}
		in, err := e.interpreterFor(rel, data)
		if err != nil || in.Image == byExt.Image {
			return nil
		}
		ps, err := pl.Programs(in.Image)
		if err != nil {
			return nil
		}
		if e.deps != nil {
			return e.deps.image(ps.Root)
		}
		return deps.Inspect(ps.Root)
	}
}
