package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
)

func TestDirFiles(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "doc")
	secret := filepath.Join(dir, "secret.txt")
	for p, body := range map[string]string{"doc/word/document.xml": "<w/>", "doc/[Content_Types].xml": "<t/>", "secret.txt": "do not send"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(tree, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(tree, "word", "leak")); err != nil {
		t.Fatal(err)
	}
	files, err := client.DirFiles(tree, "unpacked")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		s := f.Name + ":" + f.Type + ":" + f.Target
		if f.Type == "" {
			data, err := api.Output{Content: f.Content}.Data()
			if err != nil || strings.Contains(string(data), "do not send") {
				t.Errorf("%s: %q %v", f.Name, data, err)
			}
			s += ":" + string(data)
		}
		got = append(got, s)
	}
	want := "unpacked:dir: unpacked/[Content_Types].xml:::<t/> unpacked/empty:dir: unpacked/word:dir: unpacked/word/document.xml:::<w/> unpacked/word/leak:symlink:" + secret
	if strings.Join(got, " ") != want {
		t.Errorf("entries\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if files[2].Mode != 0o700 || files[1].Mode != 0o640 {
		t.Errorf("modes: %o %o", files[2].Mode, files[1].Mode)
	}

	if err := syscall.Mkfifo(filepath.Join(tree, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DirFiles(tree, "unpacked"); !errors.Is(err, client.ErrNotCopyable) || !strings.Contains(err.Error(), "pipe is a special file (fifo)") {
		t.Errorf("fifo: %v", err)
	}
}
