package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestInterpreter(t *testing.T) {
	c := mustLoad(t, "testdata/full.hcl") // adds .pyw to python and a ruby image
	for _, tc := range []struct {
		name, path, head string
		image            string
		argv             string
	}{
		{"py", "scripts/a.py", "", "python", "python3"},
		{"py upper", "scripts/A.PY", "", "python", "python3"},
		{"pyw added", "scripts/a.pyw", "", "python", "python3"},
		{"sh", "scripts/a.sh", "", "shell", "bash"},
		{"bash", "scripts/a.bash", "", "shell", "bash"},
		{"js", "scripts/a.js", "", "node", "node"},
		{"mjs", "scripts/a.mjs", "", "node", "node"},
		{"cjs", "scripts/a.cjs", "", "node", "node"},
		{"ruby image", "scripts/a.rb", "", "ruby", "ruby --disable-gems"},
		{"extension beats shebang", "scripts/a.py", "#!/bin/bash\n", "python", "python3"},
		{"env python3", "scripts/tool", "#!/usr/bin/env python3\nprint(1)\n", "python", "python3"},
		{"env -S", "scripts/tool", "#!/usr/bin/env -S python3 -u\n", "python", "python3"},
		{"env -S split", "scripts/tool", "#!/usr/bin/env -S node --no-warnings\n", "node", "node"},
		{"env var", "scripts/tool", "#!/usr/bin/env LC_ALL=C bash\n", "shell", "bash"},
		{"bin bash", "scripts/tool", "#!/bin/bash -e\n", "shell", "bash"},
		{"bin sh", "scripts/tool", "#!/bin/sh\r\n", "shell", "bash"},
		{"minor version", "scripts/tool", "#!/usr/bin/python3.12\n", "python", "python3"},
		{"space after bang", "scripts/tool", "#! /usr/bin/env node\n", "node", "node"},
		{"unknown ext with shebang", "scripts/a.cgi", "#!/usr/bin/env python3\n", "python", "python3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := c.Interpreter(tc.path, []byte(tc.head))
			if err != nil {
				t.Fatal(err)
			}
			if in.Image != tc.image || strings.Join(in.Argv, " ") != tc.argv || !strings.HasPrefix(in.Rule, `image "`+tc.image+`" (`) {
				t.Errorf("got %+v, want image %s argv %q", in, tc.image, tc.argv)
			}
		})
	}
}

func TestInterpreterErrors(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		name, path, head, want string
	}{
		{"unknown ext", "scripts/a.pl", "", `extension ".pl" is not configured and it has no #! line`},
		{"no ext, no shebang", "scripts/tool", "echo hi\n", "it has no extension"},
		{"unknown shebang", "scripts/tool", "#!/usr/bin/perl\n", `names "perl", which no image runs`},
		{"python2 is not python3", "scripts/tool", "#!/usr/bin/python2\n", `"python2"`},
		{"empty shebang", "scripts/tool", "#!\n", "no #! line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Interpreter(tc.path, []byte(tc.head))
			if !errors.Is(err, ErrNoInterpreter) {
				t.Fatalf("err = %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "known extensions: .bash .cjs .js .mjs .py .sh") {
				t.Errorf("error %q lacks %q or the known extensions", err, tc.want)
			}
		})
	}
}

func TestInterpreterArgvIsACopy(t *testing.T) {
	c := Default()
	in, _ := c.Interpreter("a.py", nil)
	in.Argv[0] = "evil"
	if again, _ := c.Interpreter("a.py", nil); again.Argv[0] != "python3" {
		t.Error("caller changed the config through Argv")
	}
}
