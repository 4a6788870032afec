package mcp

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
)

// TestRunResultStaysWithinBudget: whatever a script writes, the result a
// model reads fits the budget, names what it left out and where to get
// it, and holds no file contents.
func TestRunResultStaysWithinBudget(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 50<<20/16) // 50 MB
	pdf := []byte("%PDF-1.7 filled form")
	var outs []api.Output
	for i := 0; i < 40; i++ {
		outs = append(outs, api.Output{Path: "out/f" + strings.Repeat("x", i) + ".txt", Size: 1, Content: base64.StdEncoding.EncodeToString([]byte("x"))})
	}
	cases := []struct {
		name string
		res  api.RunScriptResult
	}{
		{"50 MB of stdout", api.RunScriptResult{RunID: "run_1", Path: "scripts/big.py", Stdout: big, Stderr: big[:1<<20], Summary: outcome.Summary{Reason: "exit"}}},
		{"a filled form in the workspace", api.RunScriptResult{
			RunID:   "run_2",
			Path:    "scripts/fill.py",
			Outputs: []api.Output{{Path: "filled.pdf", Size: int64(len(pdf)), SHA256: "ab", Content: base64.StdEncoding.EncodeToString(pdf)}},
			Workspace: &api.WorkspaceReport{Dir: "/home/ann/project", Mode: api.WorkspaceWrite, Inputs: 1,
				Written: []api.WorkspaceChange{{Path: "filled.pdf", After: "ab", Size: int64(len(pdf))}}},
			Summary: outcome.Summary{Reason: "exit"},
		}},
		{"many files and findings", api.RunScriptResult{
			RunID:   "run_3",
			Path:    "scripts/many.sh",
			Outputs: outs,
			Workspace: &api.WorkspaceReport{Dir: "/p", Mode: api.WorkspaceWrite,
				Conflicts: repeatFindings(30, strings.Repeat("c", 300)), Refused: repeatFindings(30, strings.Repeat("r", 300))},
			Summary: outcome.Summary{Reason: "exit", ExitCode: 2},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{s: &Server{opts: Options{}}, runs: newRunStore(maxStoredRuns, maxStoredBytes)}
			tr, out := c.runResult(&tc.res)
			wire, _ := json.Marshal(tr.Content)
			structured, _ := json.Marshal(out)
			if n := len(wire) + len(structured); n > DefaultResultBytes {
				t.Errorf("result is %d bytes, over %d", n, DefaultResultBytes)
			}
			for _, o := range tc.res.Outputs {
				if o.Content != "" && strings.Contains(string(wire)+string(structured), o.Content) && len(o.Content) > 4 {
					t.Errorf("file contents in the result: %s", o.Path)
				}
			}
			if tr.IsError != (tc.res.ExitCode != 0) {
				t.Errorf("isError %v for exit %d", tr.IsError, tc.res.ExitCode)
			}
		})
	}

	c := &Conn{s: &Server{opts: Options{}}, runs: newRunStore(maxStoredRuns, maxStoredBytes)}
	tr, out := c.runResult(&cases[0].res)
	if out.StdoutLog == "" || !strings.Contains(tr.Content[0].(*sdk.TextContent).Text, out.StdoutLog) {
		t.Fatalf("no pointer to the whole stdout: %+v", out)
	}
	if whole, err := c.runs.get(out.StdoutLog); err != nil || len(whole) != len(big) {
		t.Errorf("the whole stdout is not kept: %d bytes, %v", len(whole), err)
	}
	_, out = c.runResult(&cases[1].res)
	if len(out.Files) != 1 || !out.Files[0].InWorkspace || out.Files[0].URI != "file:///home/ann/project/filled.pdf" || out.Files[0].MIMEType != "application/pdf" {
		t.Errorf("the filled form's link: %+v", out.Files)
	}
	tr, out = c.runResult(&cases[2].res)
	links := 0
	for _, ct := range tr.Content {
		if l, ok := ct.(*sdk.ResourceLink); ok {
			links++
			if data, err := c.runs.get(l.URI); err != nil || string(data) != "x" {
				t.Errorf("%s: %q %v", l.URI, data, err)
			}
		}
	}
	if links == 0 || links+out.FilesNotListed != 40 || out.Workspace.NotListed == 0 {
		t.Errorf("links %d, not listed %d, findings not listed %d", links, out.FilesNotListed, out.Workspace.NotListed)
	}
}

func repeatFindings(n int, why string) []api.WorkspaceFinding {
	out := make([]api.WorkspaceFinding, n)
	for i := range out {
		out[i] = api.WorkspaceFinding{Path: "p", Why: why}
	}
	return out
}

func TestRunStoreBounds(t *testing.T) {
	s := newRunStore(2, 100)
	for _, id := range []string{"a", "b", "c"} {
		s.put(&api.RunScriptResult{RunID: id, Stdout: "12345"})
	}
	if _, err := s.get(runURI("a", "stdout")); err == nil {
		t.Error("kept more runs than its bound")
	}
	if b, err := s.get(runURI("c", "stdout")); err != nil || string(b) != "12345" {
		t.Errorf("the newest run: %q %v", b, err)
	}
	if s.put(&api.RunScriptResult{RunID: "d", Stdout: strings.Repeat("x", 200)}) {
		t.Error("kept a run over the byte bound")
	}
	for _, bad := range []string{"skillbox://runs/c/../a/stdout", "skillbox://runs/c/files/../../etc/passwd", "file:///etc/passwd"} {
		if _, err := s.get(bad); err == nil {
			t.Errorf("%s: served", bad)
		}
	}
}

func TestFirstImage(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nsmall")
	res := &api.RunScriptResult{Outputs: []api.Output{
		{Path: "notes.txt", Size: 2, Content: base64.StdEncoding.EncodeToString([]byte("hi"))},
		{Path: "big.png", Size: MaxImageBytes + 1, ContentOmitted: true},
		{Path: "chart.png", Size: int64(len(png)), Content: base64.StdEncoding.EncodeToString(png)},
	}}
	img := firstImage(res)
	if img == nil || img.MIMEType != "image/png" || string(img.Data) != string(png) {
		t.Fatalf("firstImage = %+v", img)
	}
	if firstImage(&api.RunScriptResult{Outputs: res.Outputs[:2]}) != nil {
		t.Error("an image over the cap, or no image, is shown")
	}
}
