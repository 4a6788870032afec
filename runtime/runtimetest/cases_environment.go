package runtimetest

import (
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// The environment cases: what a script finds in its sandbox: loopback up,
// its module path from the skill root, a workdir of bounded size.
func environmentCases() []Case {
	return []Case{
		{
			Name: "localhost_server",
			Skill: map[string]string{"scripts/serve.py": `import http.server, socket, threading, urllib.request
print("resolves", socket.gethostbyname("localhost"))
srv = http.server.HTTPServer(("localhost", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
open("page.txt", "w").write("served from the sandbox")
print(urllib.request.urlopen("http://localhost:%d/page.txt" % srv.server_address[1], timeout=20).read().decode())
`},
			Args: Py("serve.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "resolves 127.0.0.1\nserved from the sandbox\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:  "loopback_up_from_shell",
			Skill: map[string]string{"scripts/lo.sh": "getent hosts localhost | awk '{print $2}'\n(echo hi > /dev/tcp/127.0.0.1/9) 2>&1 | tail -n 1 | sed 's/.*: //'\n(echo x >> /etc/hosts) 2>/dev/null && echo WRITABLE\nexit 0\n"},
			Args: func(*CaseEnv) []string {
				return []string{"bash", "/skill/scripts/lo.sh"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				// Refused (nothing listens), not unreachable: lo is up; and
				// the hosts file is read-only.
				if out := string(res.Stdout); out != "localhost\nConnection refused\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name: "module_path_from_skill_root",
			Skill: map[string]string{
				"scripts/__init__.py": "",
				"scripts/utils.py":    "def greet(): return 'from scripts.utils'\n",
				"scripts/sibling.py":  "NAME = 'sibling'\n",
				"scripts/main.py":     "from scripts.utils import greet\nimport sibling\nprint(greet(), sibling.NAME)\n",
			},
			Args: Py("main.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "from scripts.utils sibling\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:   "workdir_size_capped",
			Skill:  map[string]string{"scripts/fill.py": "import errno\ntry:\n    open('big', 'wb').write(b'x' * (8 << 20))\n    print('WROTE')\nexcept OSError as e:\n    print('full', errno.errorcode[e.errno])\n"},
			Args:   Py("fill.py"),
			Limits: runtime.Limits{WorkdirBytes: 4 << 20},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "full ENOSPC\n" {
					t.Errorf("workdir not capped: %q %s", res.Stdout, res.Stderr)
				}
			},
		},
	}
}
