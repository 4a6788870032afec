package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// The wire's files are checked before policy is asked or anything is
// audited or run, and the error names the entry.
func TestRunScriptFilesDecoded(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	mustV(f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain"}}))
	run := func(files ...api.File) (*api.RunScriptResult, error) {
		return f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Files: files}, Path: "scripts/run.sh"})
	}
	decisions := len(f.audit.Events(audit.EventDecision))
	for _, tc := range []struct {
		name  string
		files []api.File
		want  string
	}{
		{"dotdot", []api.File{api.NewFile("a/../../etc/x", nil)}, `files[0]: input "a/../../etc/x" has a ".." component`},
		{"absolute", []api.File{api.NewFile("/etc/passwd", nil)}, "files[0]: input \"/etc/passwd\" is an absolute path"},
		{"control", []api.File{api.NewFile("ok.txt", nil), api.NewFile("a\x1bb", nil)}, `files[1]: input "a\x1bb" contains a control character`},
		{"through a link", []api.File{api.NewSymlink("l", "/etc"), api.NewFile("l/passwd", []byte("x"))}, `input "l/passwd" lies under "l", which is a symlink`},
		{"bad type", []api.File{{Name: "x", Type: "fifo"}}, `files[0] "x": unknown type "fifo"`},
		{"dir with content", []api.File{{Name: "d", Type: api.FileTypeDir, Content: "eA=="}}, `files[0] "d": a directory has no content`},
		{"not base64", []api.File{{Name: "f", Content: "!!"}}, `files[0] "f": content is not base64`},
		{"twice", []api.File{api.NewFile("f", nil), api.NewFile("f", nil)}, `input "f" given twice`},
		{"mode", []api.File{{Name: "f", Mode: 0o4755}}, "only permission bits"},
	} {
		_, err := run(tc.files...)
		if !errors.Is(err, api.ErrInvalidParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want invalid params with %q", tc.name, err, tc.want)
		}
	}
	if n := len(f.audit.Events(audit.EventDecision)); n != decisions || len(f.rt.Jobs()) != 0 {
		t.Errorf("refused files reached policy (%d decisions) or the runtime (%d jobs)", n-decisions, len(f.rt.Jobs()))
	}

	// A tree with a directory, a file in it and a link reaches the runtime
	// as such, and the audit record names each entry's type.
	if _, err := run(api.NewDir("unpacked"), api.NewFile("unpacked/word/document.xml", []byte("<w/>")), api.NewSymlink("unpacked/link", "word/document.xml"), api.File{Name: "empty", Type: api.FileTypeDir, Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	job := f.rt.Jobs()[0]
	want := []runtime.InputFile{
		{Name: "unpacked", Kind: runtime.InputDir},
		{Name: "unpacked/word/document.xml", Data: []byte("<w/>")},
		{Name: "unpacked/link", Kind: runtime.InputSymlink, Target: "word/document.xml"},
		{Name: "empty", Kind: runtime.InputDir, Mode: 0o700},
	}
	if len(job.Invocation.Files) != len(want) {
		t.Fatalf("job files %+v", job.Invocation.Files)
	}
	for i := range want {
		g, w := job.Invocation.Files[i], want[i]
		if g.Name != w.Name || g.Kind != w.Kind || string(g.Data) != string(w.Data) || g.Target != w.Target || g.Mode != w.Mode {
			t.Errorf("job file %d: %+v, want %+v", i, g, w)
		}
	}
	start := f.audit.Events(audit.EventRunStart)[0]
	if in := start.Run.Inputs; len(in) != 4 || in[0].Type != "dir" || in[1].Type != "" || in[1].Size != 4 || in[2].Type != "symlink" || in[2].Target != "word/document.xml" {
		t.Errorf("audited inputs %+v", in)
	}
	if got := start.Detail["module_path"]; got != "" {
		t.Errorf("a shell script got a module path: %q", got)
	}
}

// Outputs come back with paths relative to the working directory; a cap
// that left files out is in the result and the audit record; contents
// beyond the inline budget are marked, never dropped silently.
func TestRunScriptOutputsTruncatedAndInlineBudget(t *testing.T) {
	f := newFixture(t, true)
	big := strings.Repeat("x", api.MaxInlineOutputBytes-10)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{
			Outputs: []runtime.OutputFile{
				{Path: "outputs/a.txt", Size: 2, SHA256: "a", Data: []byte("ok")},
				{Path: "unpacked/big.bin", Size: int64(len(big)), SHA256: "b", Data: []byte(big)},
				{Path: "unpacked/c.xml", Size: 20, SHA256: "c", Data: []byte("twenty bytes of xml.")},
				{Path: "z.txt", Size: 1, SHA256: "d", Data: []byte("z")},
			},
			Summary: outcome.Summary{Reason: runtime.ReasonExit, Runtime: "fake",
				OutputsSkipped:   []string{"unpacked/link: symlink, not followed", "unpacked/d.xml: over the cap of 4 output files (output_files); not collected"},
				OutputsTruncated: true, OutputsTruncatedBy: runtime.CapOutputFiles, OutputsOmittedFiles: 1, OutputsOmittedBytes: 7},
		}, nil
	}
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	mustV(f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain"}}))
	res, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OutputsTruncated || res.OutputsTruncatedBy != "output_files" || res.OutputsOmittedFiles != 1 || res.OutputsOmittedBytes != 7 || len(res.OutputsSkipped) != 2 {
		t.Errorf("truncation not reported: %+v", res)
	}
	var inlined, omitted []string
	for _, o := range res.Outputs {
		if o.ContentOmitted {
			omitted = append(omitted, o.Path)
			if o.Content != "" || o.SHA256 == "" || o.Size == 0 {
				t.Errorf("omitted %s: %+v", o.Path, o)
			}
		} else {
			inlined = append(inlined, o.Path)
		}
	}
	if strings.Join(inlined, " ") != "outputs/a.txt unpacked/big.bin" || strings.Join(omitted, " ") != "unpacked/c.xml z.txt" || res.OutputsNotInlined != 2 {
		t.Errorf("inlined %q omitted %q (count %d)", inlined, omitted, res.OutputsNotInlined)
	}
	end := f.audit.Events(audit.EventRunEnd)[0].Run
	if !end.OutputsTruncated || end.OutputsTruncatedBy != "output_files" || end.OutputsOmittedFiles != 1 || end.OutputsOmittedBytes != 7 ||
		len(end.Outputs) != 4 || end.Outputs[1].Path != "unpacked/big.bin" || len(end.OutputsSkipped) != 2 {
		t.Errorf("run.end record: %+v", end)
	}
}
