package ocicli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/process"
)

// ociCLI drives an OCI runtime's command line (runc and runsc share the
// create/start/run/kill/delete/state/list vocabulary). Every command runs in
// its own process group, so a stuck runtime and anything it forked can be
// killed as a unit, and its stderr is folded into the returned error.
type ociCLI struct {
	name    string   // "runsc", "runc"
	binary  string   // as configured; resolved by lookup
	root    string   // --root state dir, ours alone
	global  []string // global flags after --root, on every command
	install string   // how to install it, for ErrUnavailable

	once    sync.Once
	path    string
	lookErr error
	verMu   sync.Mutex
	version string
}

// waitDelay bounds how long a cancelled command may keep its pipes open.
const waitDelay = 5 * time.Second

// lookup resolves the binary once; a missing one is ErrUnavailable with the
// install hint, never a fallback to another runtime.
func (c *ociCLI) lookup() (string, error) {
	c.once.Do(func() {
		p, err := exec.LookPath(c.binary)
		if err != nil {
			c.lookErr = errkind.Errorf(runtime.ErrUnavailable, "%s not found (%v): install it with: %s", c.name, err, c.install)
			return
		}
		c.path = p
	})
	return c.path, c.lookErr
}

// command builds `binary --root R <global...> <extra...> <args...>` in its own
// process group; cancelling ctx SIGKILLs the whole group.
func (c *ociCLI) command(ctx context.Context, extraGlobal []string, args ...string) (*exec.Cmd, error) {
	bin, err := c.lookup()
	if err != nil {
		return nil, err
	}
	argv := make([]string, 0, 2+len(c.global)+len(extraGlobal)+len(args))
	argv = append(argv, "--root", c.root)
	argv = append(argv, c.global...)
	argv = append(argv, extraGlobal...)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = cliEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = waitDelay
	return cmd, nil
}

// cliEnv is the environment of the runtime CLIs: not the daemon's, which
// may hold secrets and has no business in a sandbox's supervisor.
func cliEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = runtime.DefaultPath
	}
	return []string{"PATH=" + path, "LANG=C"}
}

// killGroup SIGKILLs the process group led by cmd's process.
func killGroup(cmd *exec.Cmd) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// exec runs a short command and returns its stdout; on failure the error
// carries the command and its stderr.
func (c *ociCLI) exec(ctx context.Context, args ...string) ([]byte, error) {
	cmd, err := c.command(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", c.name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// Version returns the first line of `<binary> --version`. A success is
// cached; a failure is not (it may have been a cancelled context).
func (c *ociCLI) Version(ctx context.Context) (string, error) {
	bin, err := c.lookup()
	if err != nil {
		return "", err
	}
	c.verMu.Lock()
	defer c.verMu.Unlock()
	if c.version != "" {
		return c.version, nil
	}
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = cliEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = waitDelay
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", errkind.Errorf(runtime.ErrUnavailable, "%s --version: %v: %s", c.name, err, strings.TrimSpace(string(out)))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	c.version = strings.TrimSpace(line)
	return c.version, nil
}

// kill sends sig to the container's init, or with all to every process in it.
func (c *ociCLI) kill(ctx context.Context, id, sig string, all bool) error {
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	_, err := c.exec(ctx, append(args, id, sig)...)
	return err
}

// delete removes the container, killing it first if it still runs.
// A container that does not exist is not an error.
func (c *ociCLI) delete(ctx context.Context, id string) error {
	_, err := c.exec(ctx, "delete", "--force", id)
	if err != nil && process.IsNotExist(err) {
		return nil
	}
	return err
}

func (c *ociCLI) state(ctx context.Context, id string) (*process.ContainerState, error) {
	out, err := c.exec(ctx, "state", id)
	if err != nil {
		return nil, err
	}
	var st process.ContainerState
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("%s state %s: %w", c.name, id, err)
	}
	return &st, nil
}

// list returns the containers in our state dir.
func (c *ociCLI) list(ctx context.Context) ([]process.ContainerState, error) {
	out, err := c.exec(ctx, "list", "--format=json")
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 || bytes.Equal(out, []byte("null")) {
		return nil, nil
	}
	var list []process.ContainerState
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("%s list: %w", c.name, err)
	}
	return list, nil
}

// cliBackend is what runsc and runc share as backends: their CLI and the
// run driver over it. Each adds its name, its options and Run.
type cliBackend struct {
	cli *ociCLI
	eng *engine
}

// Version is the first line of the CLI's --version.
func (b *cliBackend) Version(ctx context.Context) (string, error) { return b.cli.Version(ctx) }

// Create makes a sandbox (see Lifecycle).
func (b *cliBackend) Create(ctx context.Context, spec runtime.SandboxSpec) (runtime.Sandbox, error) {
	return b.eng.create(ctx, spec)
}

// Close destroys the sandboxes of this backend that are still there.
func (b *cliBackend) Close(ctx context.Context) error { return b.eng.close(ctx) }

// Sweep removes what crashed runs left: see Sweep.
func (b *cliBackend) Sweep(ctx context.Context) error { return b.eng.sweep(ctx) }
