//go:build integration

package main

// A host's model working on the user's files through `skillbox mcp`: the
// official TypeScript SDK client with its roots set to a project directory,
// real gVisor sandboxes, the python image's own pypdf and zipfile.

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var docsScripts = map[string]string{
	"SKILL.md": "---\nname: docs\ndescription: Fills PDF forms and edits Word documents in the user's project.\n---\n" +
		"Fill a form with scripts/fill.py FORM OUT VALUE; unpack a .docx with scripts/unpack.py, pack it with scripts/pack.py.\n",
	"scripts/fill.py": `import sys
from pypdf import PdfReader, PdfWriter
form, out, value = sys.argv[1:4]
w = PdfWriter()
w.append(PdfReader(form))
w.update_page_form_field_values(w.pages[0], {"name": value})
w.write(out)
print("filled", out)
`,
	"scripts/check.py": `import sys
from pypdf import PdfReader
print(PdfReader(sys.argv[1]).get_fields()["name"].value)
`,
	"scripts/unpack.py": `import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall("unpacked")
print("unpacked", sys.argv[1])
`,
	"scripts/pack.py": `import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for d, _, files in os.walk("unpacked"):
        for f in sorted(files):
            p = os.path.join(d, f)
            z.write(p, os.path.relpath(p, "unpacked"))
print("packed", sys.argv[1])
`,
	"scripts/big.py": `import sys
with open("big.bin", "wb") as f:
    for _ in range(50):
        f.write(b"x" * (1 << 20))
for i in range(12000):
    print("line", i, "of a script that talks a lot")
`,
}

// fillablePDF is a one-page PDF with one text field, "name".
func fillablePDF() []byte {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [4 0 R] /DR << /Font << /Helv 5 0 R >> >> /DA (/Helv 12 Tf 0 g) >> >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Annots [4 0 R] /Resources << /Font << /Helv 5 0 R >> >> >>",
		"<< /Type /Annot /Subtype /Widget /FT /Tx /T (name) /V () /Rect [50 100 250 130] /P 3 0 R /F 4 /DA (/Helv 12 Tf 0 g) >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.7\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// minimalDocx is a zip with the parts a .docx has.
func minimalDocx(t *testing.T, text string) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, body := range map[string]string{
		"[Content_Types].xml": `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/></Types>`,
		"word/document.xml":   `<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>` + text + `</w:t></w:r></w:p></w:body></w:document>`,
	} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestMCPWorkspace(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	clientDir := mcpClientDir(t)
	base := t.TempDir()
	t.Cleanup(func() { unmountNullNetns(filepath.Join(base, "runsc")) })
	root, project := filepath.Join(base, "skills"), filepath.Join(base, "project")
	writeFiles(t, filepath.Join(root, "docs"), docsScripts)
	pdf := fillablePDF()
	writeFiles(t, project, map[string]string{"form.pdf": string(pdf), "report.docx": string(minimalDocx(t, "first draft")), "notes.txt": "keep me\n"})
	cfgPath := filepath.Join(base, "skillbox.hcl")
	writeFiles(t, base, map[string]string{"skillbox.hcl": `
daemon { audit_dir = "` + filepath.Join(base, "audit") + `" }
images { dir = "` + itImages + `" }
runtime "runsc" { state_dir = "` + filepath.Join(base, "runsc") + `" }
policy "docs" {
  skills    = ["docs"]
  tools     = ["skills.read", "skills.run_script"]
  workspace = "write"
  limits {
    outputs      = "128MiB"
    timeout      = "2m"
  }
}
`})
	run := func(path string, args []string, inputs ...string) map[string]any {
		a := map[string]any{"path": path, "args": args}
		if len(inputs) > 0 {
			a["inputs"] = inputs
		}
		return map[string]any{"op": "callTool", "name": "skills_run_script", "arguments": a}
	}
	plan, _ := json.Marshal(map[string]any{
		"roots": []string{"file://" + project},
		"steps": []map[string]any{
			{"op": "callTool", "name": "skills_load", "arguments": map[string]any{"names": []string{"docs"}}},
			run("scripts/fill.py", []string{"form.pdf", "filled.pdf", "Ada Lovelace"}, "form.pdf"),
			run("scripts/check.py", []string{"filled.pdf"}, "filled.pdf"),
			run("scripts/unpack.py", []string{"report.docx"}, "report.docx"),
			{"op": "writeFile", "path": filepath.Join(project, "unpacked", "word", "document.xml"),
				"content": `<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>edited on the host</w:t></w:r></w:p></w:body></w:document>`},
			run("scripts/pack.py", []string{"packed.docx"}, "unpacked/**"),
			run("scripts/big.py", nil, "notes.txt"),
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Started elsewhere than the project: the workspace comes from the roots.
	cmd := exec.CommandContext(ctx, "node", filepath.Join(clientDir, "client.mjs"), string(plan), "--",
		itBin, "mcp", "--root", root, "--config", cfgPath)
	cmd.Dir = base
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("MCP client: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var out mcpClientResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output: %v\n%s", err, stdout.String())
	}
	type link struct{ Type, URI, Name, MimeType, Text string }
	result := func(i int) (raw string, content []link, isError bool) {
		r := out.Results[i]
		if r.Error != nil {
			t.Fatalf("step %d (%s %s) failed: %s", i, r.Op, r.Name, r.Error.Message)
		}
		var tr struct {
			IsError bool   `json:"isError"`
			Content []link `json:"content"`
		}
		json.Unmarshal(r.Result, &tr)
		return string(r.Result), tr.Content, tr.IsError
	}
	for i := 1; i < len(out.Results); i++ {
		if out.Results[i].Op != "callTool" {
			continue
		}
		raw, _, isErr := result(i)
		if isErr {
			t.Errorf("step %d is an error: %s", i, raw)
		}
		if len(raw) > 8<<10 {
			t.Errorf("step %d's result is %d bytes, over 8 KiB", i, len(raw))
		}
	}

	// The filled form is in the project, linked, never inlined.
	raw, content, _ := result(1)
	if strings.Contains(raw, base64.StdEncoding.EncodeToString(pdf[:60])) {
		t.Error("the form travelled as base64")
	}
	linked := false
	for _, c := range content {
		if c.Type == "resource_link" && c.URI == "file://"+filepath.Join(project, "filled.pdf") && c.MimeType == "application/pdf" {
			linked = true
		}
	}
	if !linked {
		t.Errorf("no resource link to filled.pdf: %s", raw)
	}
	filled, err := os.ReadFile(filepath.Join(project, "filled.pdf"))
	if err != nil || !bytes.HasPrefix(filled, []byte("%PDF")) {
		t.Fatalf("filled.pdf in the project: %v", err)
	}
	if raw, _, _ := result(2); !strings.Contains(raw, "Ada Lovelace") {
		t.Errorf("the filled field reads back as: %s", raw)
	}

	// Unpack, a change on the host, pack: the change is in the document.
	zr, err := zip.OpenReader(filepath.Join(project, "packed.docx"))
	if err != nil {
		t.Fatalf("packed.docx: %v", err)
	}
	defer zr.Close()
	found := false
	for _, f := range zr.File {
		if f.Name == "word/document.xml" {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			rc.Close()
			found = strings.Contains(string(b), "edited on the host")
		}
	}
	if !found {
		t.Error("the packed document lacks the host's change")
	}

	// 50 MB written and a flood of stdout: a small result, pointing at the
	// whole log; the big file is in the project.
	raw, _, _ = result(len(out.Results) - 1)
	if !strings.Contains(raw, "skillbox://runs/") {
		t.Errorf("the big run's result does not point to its whole log: %s", raw)
	}
	if fi, err := os.Stat(filepath.Join(project, "big.bin")); err != nil || fi.Size() != 50<<20 {
		t.Errorf("big.bin in the project: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "notes.txt")); string(b) != "keep me\n" {
		t.Errorf("notes.txt changed: %q", b)
	}
}
