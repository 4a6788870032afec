package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// A run's tool result is what a host's model reads, and hosts cut tool
// output at tens of thousands of tokens: whatever the script writes, the
// result stays within Options.ResultBytes. It is a short summary, the
// ends of stdout and stderr, and the files the run wrote as resource_link
// items: file:// links into the workspace for the files applied there,
// skillbox://runs/ links for the others, which resources/read serves
// from what the connection keeps of its last runs (with the whole
// logs). File contents never travel as base64 in a result.

// DefaultResultBytes is Options.ResultBytes' default: well under the 8 KiB
// a host may give one tool result.
const DefaultResultBytes = 6 << 10

const (
	maxStoredRuns  = 32        // runs whose logs and files the connection keeps
	maxStoredBytes = 512 << 20 // bytes it keeps in all
	maxLinks       = 10        // files linked one by one in a result
	maxFindings    = 5         // conflicts and refusals named in a result
	runURIScheme   = "skillbox://runs/"
)

// RunOutput is skills_run_script's and skills_run_code's structured
// result: the run, sized for a model's context. Its names are those of
// the API's run result where they mean the same. It does not embed the
// run's outcome.Summary: it keeps only part of it, with signal and the
// truncation flags left out when empty; runOutput builds it.
type RunOutput struct {
	RunID      string `json:"run_id"`
	Skill      string `json:"skill,omitempty"`
	Path       string `json:"path"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	Reason     string `json:"reason"`
	DurationMS int64  `json:"duration_ms"`
	// Stdout and Stderr are the streams, or their ends when long: then
	// StdoutLog and StderrLog are the resources holding them whole.
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutBytes     int    `json:"stdout_bytes"`
	StderrBytes     int    `json:"stderr_bytes"`
	StdoutLog       string `json:"stdout_log,omitempty"`
	StderrLog       string `json:"stderr_log,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"` // the run's own cap cut it
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// Files are the files the run wrote, the first ones by name with
	// where to get them; FilesNotListed counts the rest.
	Files          []FileLink `json:"files"`
	FilesNotListed int        `json:"files_not_listed,omitempty"`
	// OutputsTruncatedBy names the output cap that left files out.
	OutputsTruncatedBy string            `json:"outputs_truncated_by,omitempty"`
	Skipped            []string          `json:"skipped,omitempty"`
	Workspace          *WorkspaceSummary `json:"workspace,omitempty"`
	Hint               string            `json:"hint,omitempty"`
	Warnings           []string          `json:"warnings,omitempty"`
	ConfirmationID     string            `json:"confirmation_id,omitempty"`
	// Skills are the skills a skills_run_code run mounted, and where.
	Skills []api.MountedSkill `json:"skills,omitempty"`
	// LimitsEnforcedBy names what held each limit (see
	// api.RunScriptResult).
	LimitsEnforcedBy map[string]string `json:"limits_enforced_by,omitempty"`
	// Background is the run a background call started (it has not ended:
	// follow it with runs_logs, runs_wait, runs_signal).
	Background *api.BackgroundRun `json:"background,omitempty"`
}

// FileLink is a file a run wrote and where to read it.
type FileLink struct {
	Path     string `json:"path"` // relative to the run's /work
	URI      string `json:"uri,omitempty"`
	MIMEType string `json:"mime_type,omitempty"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256,omitempty"`
	// InWorkspace: the file was applied to the workspace (URI is file://).
	InWorkspace bool `json:"in_workspace,omitempty"`
}

// WorkspaceSummary is the run's workspace report, with its lists cut to
// what a result holds (the counts are whole).
type WorkspaceSummary struct {
	Dir        string                 `json:"dir"`
	Mode       string                 `json:"mode"`
	Inputs     int                    `json:"inputs"`
	Written    int                    `json:"written"`
	Deleted    int                    `json:"deleted"`
	Conflicts  []api.WorkspaceFinding `json:"conflicts"`
	Refused    []api.WorkspaceFinding `json:"refused"`
	NotListed  int                    `json:"not_listed,omitempty"` // conflicts and refusals left out here
	NotApplied string                 `json:"not_applied,omitempty"`
}

// runResult makes a run's tool result within the connection's budget,
// keeping what the result points to.
func (c *Conn) runResult(res *api.RunScriptResult) (*sdk.CallToolResult, *RunOutput) {
	stored := c.runs.put(res)
	budget := c.s.opts.ResultBytes
	if budget <= 0 {
		budget = DefaultResultBytes
	}
	// Halve the streams' ends and the lists until the whole result fits.
	for level := 0; ; level++ {
		cut := resultCut{tail: budget / 4 >> level, links: max(1, maxLinks>>level), findings: max(1, maxFindings>>level), why: max(80, 400>>level)}
		out := runOutput(res, stored, cut)
		tr := &sdk.CallToolResult{Content: resultContent(out)}
		if resultSize(tr, out) <= budget || level >= 8 {
			tr.IsError = res.Background == nil && (res.ExitCode != 0 || (res.Reason != "" && res.Reason != runtime.ReasonExit))
			return tr, out
		}
	}
}

func resultSize(tr *sdk.CallToolResult, out *RunOutput) int {
	b, _ := json.Marshal(tr.Content)
	s, _ := json.Marshal(out)
	return len(b) + len(s)
}

// resultCut is how much of each part a result keeps: the streams' ends
// (bytes), the files linked, the findings named, the bytes of each
// finding's reason.
type resultCut struct{ tail, links, findings, why int }

// runOutput is the one place a run result becomes the door's: its summary
// (outcome.Summary) in the door's form, the streams' ends, the files as
// links, the lists cut to cut.
func runOutput(res *api.RunScriptResult, stored bool, cut resultCut) *RunOutput {
	tail := cut.tail
	s := &res.Summary
	out := &RunOutput{
		RunID: res.RunID, Skill: res.Skill, Path: res.Path, DurationMS: res.DurationMS,
		ExitCode: s.ExitCode, Signal: s.Signal, Reason: string(s.Reason),
		StdoutTruncated: s.StdoutTruncated, StderrTruncated: s.StderrTruncated,
		OutputsTruncatedBy: s.OutputsTruncatedBy, LimitsEnforcedBy: s.LimitsEnforcedBy,
		StdoutBytes: len(res.Stdout), StderrBytes: len(res.Stderr),
		Hint: res.Hint, Warnings: res.Warnings, ConfirmationID: res.ConfirmationID,
		Files: []FileLink{}, Skills: res.Skills, Background: res.Background,
	}
	var cutShort bool
	if out.Stdout, cutShort = streamEnd(res.Stdout, tail); cutShort && stored {
		out.StdoutLog = runURI(res.RunID, "stdout")
	}
	if out.Stderr, cutShort = streamEnd(res.Stderr, tail); cutShort && stored {
		out.StderrLog = runURI(res.RunID, "stderr")
	}
	applied := map[string]bool{}
	if ws := res.Workspace; ws != nil {
		for _, w := range ws.Written {
			applied[w.Path] = true
		}
		sum := &WorkspaceSummary{Dir: ws.Dir, Mode: ws.Mode, Inputs: ws.Inputs, Written: len(ws.Written), Deleted: len(ws.Deleted),
			Conflicts: firstFindings(ws.Conflicts, cut), Refused: firstFindings(ws.Refused, cut), NotApplied: ws.NotApplied}
		sum.NotListed = len(ws.Conflicts) - len(sum.Conflicts) + len(ws.Refused) - len(sum.Refused)
		out.Workspace = sum
	}
	for i, o := range res.Outputs {
		if i == cut.links {
			out.FilesNotListed = len(res.Outputs) - i
			break
		}
		l := FileLink{Path: o.Path, Size: o.Size, SHA256: o.SHA256, MIMEType: mimeType(o.Path)}
		switch {
		case applied[o.Path]:
			l.URI, l.InWorkspace = fileURI(filepath.Join(res.Workspace.Dir, filepath.FromSlash(o.Path))), true
		case stored && !o.ContentOmitted:
			l.URI = runURI(res.RunID, "files/"+o.Path)
		}
		out.Files = append(out.Files, l)
	}
	for i, s := range res.OutputsSkipped {
		if i == cut.findings {
			out.Skipped = append(out.Skipped, fmt.Sprintf("... and %d more", len(res.OutputsSkipped)-i))
			break
		}
		out.Skipped = append(out.Skipped, clip(s, cut.why))
	}
	return out
}

func firstFindings(fs []api.WorkspaceFinding, cut resultCut) []api.WorkspaceFinding {
	out := []api.WorkspaceFinding{}
	for _, f := range fs[:min(len(fs), cut.findings)] {
		out = append(out, api.WorkspaceFinding{Path: clip(f.Path, cut.why), Why: clip(f.Why, cut.why)})
	}
	return out
}

// clip is s, or its first n bytes (to a rune start) and an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// streamEnd is s, or its last n bytes (from a rune start) when longer.
func streamEnd(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:], true
}

// resultContent is what the model reads: a summary, the streams' ends,
// and a resource_link per listed file.
func resultContent(out *RunOutput) []sdk.Content {
	var b strings.Builder
	switch out.Reason {
	case "", string(runtime.ReasonExit):
		fmt.Fprintf(&b, "%s exited with code %d", out.Path, out.ExitCode)
	default:
		fmt.Fprintf(&b, "%s stopped: %s (exit code %d", out.Path, out.Reason, out.ExitCode)
		if out.Signal != "" {
			fmt.Fprintf(&b, ", signal %s", out.Signal)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " after %d ms (run %s).", out.DurationMS, out.RunID)
	if ws := out.Workspace; ws != nil {
		fmt.Fprintf(&b, "\nWorkspace %s (%s): %d file(s) in, %d written, %d deleted.", ws.Dir, ws.Mode, ws.Inputs, ws.Written, ws.Deleted)
		if ws.NotApplied != "" {
			fmt.Fprintf(&b, " Not applied: %s.", ws.NotApplied)
		}
		for _, f := range ws.Conflicts {
			fmt.Fprintf(&b, "\nConflict, not applied: %s: %s", f.Path, f.Why)
		}
		for _, f := range ws.Refused {
			fmt.Fprintf(&b, "\nNot copied: %s: %s", f.Path, f.Why)
		}
		if ws.NotListed > 0 {
			fmt.Fprintf(&b, "\n... and %d more conflicts or refusals (in the audit log)", ws.NotListed)
		}
	}
	if n := len(out.Files) + out.FilesNotListed; n > 0 {
		fmt.Fprintf(&b, "\nThe run wrote %d file(s)", n)
		if out.FilesNotListed > 0 {
			fmt.Fprintf(&b, "; the first %d are linked", len(out.Files))
		}
		b.WriteString(".")
	}
	if out.OutputsTruncatedBy != "" {
		fmt.Fprintf(&b, "\nFiles were left out by the %s cap.", out.OutputsTruncatedBy)
	}
	for _, s := range out.Skipped {
		fmt.Fprintf(&b, "\nIn /work: %s", s)
	}
	for _, st := range []struct{ name, text, log string }{{"stderr", out.Stderr, out.StderrLog}, {"stdout", out.Stdout, out.StdoutLog}} {
		if st.text == "" {
			continue
		}
		if st.log != "" {
			fmt.Fprintf(&b, "\n%s (the end; whole: %s):\n%s", st.name, st.log, st.text)
		} else {
			fmt.Fprintf(&b, "\n%s:\n%s", st.name, st.text)
		}
	}
	if out.Hint != "" {
		fmt.Fprintf(&b, "\nHint: %s", out.Hint)
	}
	for _, n := range out.Warnings {
		fmt.Fprintf(&b, "\nWarning: %s", n)
	}
	content := []sdk.Content{&sdk.TextContent{Text: b.String()}}
	for _, f := range out.Files {
		if f.URI == "" {
			continue
		}
		size := f.Size
		content = append(content, &sdk.ResourceLink{URI: f.URI, Name: f.Path, MIMEType: f.MIMEType, Size: &size})
	}
	return content
}

func fileURI(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

func runURI(runID, rest string) string {
	return runURIScheme + url.PathEscape(runID) + "/" + (&url.URL{Path: rest}).EscapedPath()
}

// runStore keeps the last runs' whole streams and files, for the
// skillbox://runs/ resources results link to, bounded in runs and bytes
// (the oldest go first).
type runStore struct {
	mu       sync.Mutex
	maxRuns  int
	maxBytes int64
	bytes    int64
	order    []string
	runs     map[string]*storedRun
}

type storedRun struct {
	stdout, stderr []byte
	files          map[string][]byte
	size           int64
}

func newRunStore(maxRuns int, maxBytes int64) *runStore {
	return &runStore{maxRuns: maxRuns, maxBytes: maxBytes, runs: map[string]*storedRun{}}
}

// put keeps res's streams and inlined files; it reports false when they
// are too large to keep.
func (s *runStore) put(res *api.RunScriptResult) bool {
	r := &storedRun{stdout: []byte(res.Stdout), stderr: []byte(res.Stderr), files: map[string][]byte{}}
	r.size = int64(len(r.stdout) + len(r.stderr))
	for _, o := range res.Outputs {
		if o.ContentOmitted {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(o.Content)
		if err != nil {
			continue
		}
		r.files[o.Path] = data
		r.size += int64(len(data))
	}
	if r.size > s.maxBytes || res.RunID == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.runs[res.RunID]; ok {
		s.bytes -= old.size
	} else {
		s.order = append(s.order, res.RunID)
	}
	s.runs[res.RunID] = r
	s.bytes += r.size
	for len(s.order) > 0 && (len(s.order) > s.maxRuns || s.bytes > s.maxBytes) {
		old := s.order[0]
		s.order = s.order[1:]
		s.bytes -= s.runs[old].size
		delete(s.runs, old)
	}
	return true
}

// get returns what a skillbox://runs/ URI names.
func (s *runStore) get(uri string) ([]byte, error) {
	rest, ok := strings.CutPrefix(uri, runURIScheme)
	if !ok {
		return nil, fmt.Errorf("not a run resource: %s", uri)
	}
	id, what, _ := strings.Cut(rest, "/")
	id, err1 := url.PathUnescape(id)
	what, err2 := url.PathUnescape(what)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("malformed run resource URI %q", uri)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil {
		return nil, fmt.Errorf("run %q is not kept any more (the last %d runs are): run it again", id, s.maxRuns)
	}
	switch {
	case what == "stdout":
		return r.stdout, nil
	case what == "stderr":
		return r.stderr, nil
	case strings.HasPrefix(what, "files/"):
		if data, ok := r.files[strings.TrimPrefix(what, "files/")]; ok {
			return data, nil
		}
	}
	return nil, fmt.Errorf("run %q has no %q", id, what)
}

// addRunResources serves the skillbox://runs/ resources.
func (c *Conn) addRunResources() {
	c.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "run",
		Title:       "Run logs and files",
		URITemplate: runURIScheme + "{run}/{+what}",
		Description: "The whole stdout and stderr of a recent run (…/stdout, …/stderr) and the files it wrote that are not in the workspace (…/files/PATH); run results link to them.",
	}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		uri := req.Params.URI
		data, err := c.runs.get(uri)
		if err != nil {
			return nil, sdk.ResourceNotFoundError(uri)
		}
		rc := &sdk.ResourceContents{URI: uri, MIMEType: mimeType(uri)}
		if strings.HasSuffix(uri, "/stdout") || strings.HasSuffix(uri, "/stderr") {
			rc.MIMEType = "text/plain"
		}
		if utf8.Valid(data) && strings.HasPrefix(rc.MIMEType, "text/") {
			rc.Text = string(data)
		} else {
			rc.Blob = data
		}
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
	})
}

// MaxImageBytes bounds the image a run result shows when the call asks
// for it (show_images); images count against a model's context apart
// from text, and only one is shown.
const MaxImageBytes = 256 << 10

// firstImage is the first output that is a small image whose bytes the
// result has, as image content.
func firstImage(res *api.RunScriptResult) *sdk.ImageContent {
	for _, o := range res.Outputs {
		mt := mimeType(o.Path)
		switch mt {
		case "image/png", "image/jpeg", "image/gif", "image/webp":
		default:
			continue
		}
		if o.ContentOmitted || o.Size > MaxImageBytes {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(o.Content)
		if err != nil || len(data) > MaxImageBytes {
			continue
		}
		return &sdk.ImageContent{Data: data, MIMEType: mt}
	}
	return nil
}
