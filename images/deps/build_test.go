package deps

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestPipDownloadErrorNamesHashMismatch(t *testing.T) {
	out := `Collecting tinydep==1.0 (from -r /x/requirements.txt (line 1))
ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
    tinydep==1.0 from http://127.0.0.1:1/files/tinydep-1.0-py3-none-any.whl#sha256=32aa (from -r /x/requirements.txt (line 1)):
        Expected sha256 0000
             Got        32aa
`
	p := &Plan{Missing: &Set{Python: []Requirement{{Name: "tinydep", Spec: "tinydep==1.0", Source: "requirements.txt:1"}}}}
	err := (&Builder{}).pipDownloadError(context.Background(), p, out, errors.New("exit status 1"))
	if !errors.Is(err, ErrHash) {
		t.Fatalf("got %v, want ErrHash", err)
	}
	for _, w := range []string{"tinydep (requirements.txt:1)", "sha256:32aa", "pins sha256:0000"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not mention %q", err, w)
		}
	}
}
