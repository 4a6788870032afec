package kubernetes

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/tarstream"
)

// A job travels into its pod and its outputs out of it as tar streams over
// exec, never as exec arguments: an exec's command is in its URL, which
// the API server's audit log and any proxy on the way keep. Before the
// job, one exec of `tar -x` (as the pod's user) unpacks a stream made here
// that holds the job's frame (its environment and argv, as a shell script
// of quoted words, at framePath in a memory emptyDir outside the workdir)
// and its input files under /work; the job is then exec'd as the fixed
// command jobCommand, which reads the frame, with the job's stdin on the
// exec's stdin. After the job, one exec of `tar -c` streams /work back,
// read up to a bound, unpacked into a private host directory and
// collected by runtime/oci's rules (CollectCopy).
//
// The frame is a script for sh, not NUL-separated words for xargs, though
// every image has both: xargs reports a command's exit status 1-125 as
// 123, and a job's exit code must arrive as it is. The script is one
// line, `exec env -i 'K=V'… 'argv0' 'arg'…`, each word in single quotes
// (a quote in a word is '\''), so that no byte but the quote means
// anything to sh; NUL bytes are refused by ValidateJob.

// Where the frame lives in the pod.
const (
	frameDir  = "/run/skillbox" // a memory emptyDir, not under /work
	framePath = frameDir + "/job"
	// frameDirBytes is the size of frameDir's emptyDir: the largest frame
	// (runtime's caps on arguments and environment, every byte a quote
	// written as four) fits.
	frameDirBytes = 4 << 20
)

// jobCommand is the exec that runs the job: sh reads the frame, which
// replaces sh with env and env with the job.
var jobCommand = []string{"sh", framePath}

// deliverCommand unpacks the delivery stream (paths relative to /) as
// the pod's user, with the modes the stream gives.
var deliverCommand = []string{"tar", "-x", "-p", "-f", "-", "-C", "/"}

// collectCommand streams the workdir back.
var collectCommand = []string{"tar", "-c", "-f", "-", "-C", runtime.WorkDir, "."}

// outputsSlack is what a tar stream of the workdir may hold beyond its
// files' bytes: a header, padding and long names for each entry, at about
// 1 KiB each for 65536 entries. A stream longer than the workdir's size
// plus outputsSlack is cut there and the outputs are marked truncated.
const outputsSlack = 64 << 20

// jobFrame is the frame of job: a script that execs env -i with exactly
// the job's environment (runtime.ContainerEnv, then its module path, then
// egressEnv: its proxy's variables, see egress.go), then the job's argv. An exec inherits the container's environment, which is
// the image's: env -i replaces it. The working directory is the
// container's, WorkDir.
func jobFrame(job runtime.Job, egressEnv []string) ([]byte, error) {
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("exec env -i")
	for _, words := range [][]string{env, job.Invocation.ModuleEnv, egressEnv, job.Invocation.Args} {
		for _, w := range words {
			if strings.IndexByte(w, 0) >= 0 {
				return nil, fmt.Errorf("run %s: %q holds a NUL byte, which no argument or variable can", job.Sandbox.ID, w)
			}
			b.WriteByte(' ')
			b.WriteString(shellQuote(w))
		}
	}
	b.WriteByte('\n')
	if b.Len() > frameDirBytes {
		return nil, fmt.Errorf("run %s: the job's arguments and environment make a frame of %d bytes, over %d", job.Sandbox.ID, b.Len(), frameDirBytes)
	}
	return []byte(b.String()), nil
}

// shellQuote is s as one literal word for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeDelivery writes the tar stream deliverCommand unpacks: the frame
// at framePath (read-only, the pod's user's), then the input entries under
// /work as tarstream.WriteInputs writes them. files must be valid
// (runtime.ValidateInputs).
func writeDelivery(w io.Writer, frame []byte, files []runtime.InputFile, now time.Time) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: strings.TrimPrefix(framePath, "/"), Mode: 0o400, Size: int64(len(frame)),
		ModTime: now, Uid: runtime.ContainerUID, Gid: runtime.ContainerGID, Format: tar.FormatPAX,
	}); err != nil {
		return err
	}
	if _, err := tw.Write(frame); err != nil {
		return err
	}
	if err := tarstream.WriteInputs(tw, strings.TrimPrefix(runtime.WorkDir, "/")+"/", files, now); err != nil {
		return err
	}
	return tw.Close()
}

// maxNoteBytes bounds what an exec's stderr adds to an error or a note.
const maxNoteBytes = 4 << 10

// noteBuffer keeps the first maxNoteBytes written to it, and drops the rest.
type noteBuffer struct{ b []byte }

func (n *noteBuffer) Write(p []byte) (int, error) {
	if room := maxNoteBytes - len(n.b); room > 0 {
		n.b = append(n.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (n *noteBuffer) String() string { return strings.TrimSpace(strings.ToValidUTF8(string(n.b), "?")) }

// deliverTimeout bounds the exec that delivers a job's frame and inputs.
const deliverTimeout = runtime.BootTimeout

// deliver unpacks the job's frame and input files into the pod (see
// writeDelivery). Inputs that do not fit the workdir are the job's fault
// (ErrInvalidJob); anything else is the pod's.
func (k *Kubernetes) deliver(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string, job runtime.Job, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	ex, err := k.executor(cs, cfg, name, deliverCommand)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeDelivery(pw, frame, job.Invocation.Files, time.Now())) }()
	var out, errOut noteBuffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Stderr: &errOut})
	pr.CloseWithError(io.ErrClosedPipe) // the writer, if still writing, stops
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(errOut.String() + " " + out.String())
	if strings.Contains(msg, "No space left on device") || strings.Contains(msg, "Disk quota exceeded") {
		lim := job.Limits()
		return errkind.Errorf(runtime.ErrInvalidJob, "the inputs do not fit in the workdir (%d bytes): send fewer or smaller files, or raise the workdir limit (%s)", lim.WorkdirBytes, msg)
	}
	return fmt.Errorf("deliver the job and its %d input entries into pod %s/%s (tar -x): %w: %s", len(job.Invocation.Files), k.namespace, name, err, msg)
}

// collectTimeout bounds the exec that streams the workdir back.
const collectTimeout = 2 * time.Minute

// collect streams the pod's workdir back into a private directory on this
// host and collects the outputs from it as the local backends do
// (oci.CollectCopy). The run happened even when its outputs cannot be
// read back: that is said in the outputs rather than failing the run.
func (k *Kubernetes) collect(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string, job runtime.Job) *oci.Outputs {
	outs, err := k.collectOutputs(ctx, cs, cfg, name, job)
	if err != nil {
		k.log.Warn("collecting outputs failed", "id", job.Sandbox.ID, "pod", name, "error", err)
		return &oci.Outputs{Skipped: []string{"outputs not collected: " + err.Error()}}
	}
	return outs
}

func (k *Kubernetes) collectOutputs(ctx context.Context, cs k8s.Interface, cfg *rest.Config, name string, job runtime.Job) (*oci.Outputs, error) {
	return k.outputsVia(job, func(dir string, bound int64) ([]string, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, collectTimeout)
		defer cancel()
		ex, err := k.executor(cs, cfg, name, collectCommand)
		if err != nil {
			return nil, false, err
		}
		pr, pw := io.Pipe()
		var errOut noteBuffer
		exit := make(chan error, 1)
		go func() {
			err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errOut})
			pw.CloseWithError(err)
			exit <- err
		}()
		br := tarstream.Bounded(pr, bound)
		skipped, uerr := tarstream.Unpack(br, dir)
		if uerr == nil {
			// tar pads its archive past the end the reader stops at:
			// read the padding too, so that the exec ends by itself.
			_, uerr = io.Copy(io.Discard, br)
		}
		over := errors.Is(uerr, tarstream.ErrOver)
		if uerr != nil {
			cancel() // the rest of the stream is not read
		}
		pr.CloseWithError(io.ErrClosedPipe)
		execErr := <-exit
		switch {
		case over:
		case uerr != nil && execErr != nil:
			return nil, false, fmt.Errorf("stream the workdir of pod %s/%s back (tar -c): %w: %s", k.namespace, name, execErr, errOut.String())
		case uerr != nil:
			return nil, false, fmt.Errorf("read the workdir's tar stream from pod %s/%s: %w", k.namespace, name, uerr)
		case execErr != nil:
			// tar read everything it could and said what it could not
			// (a file that changed or vanished as it read, a socket).
			skipped = append(skipped, fmt.Sprintf("outputs may be incomplete: tar -c in the pod: %v: %s", execErr, errOut.String()))
		}
		return skipped, over, nil
	})
}

// outputsVia collects job's outputs from the pod's workdir, which fetch
// unpacks into dir, a private directory made for it, reading at most
// bound bytes of its tar stream: it returns what it did not unpack, and
// whether the stream went over bound (the rest is then not collected).
// The outputs are then taken from dir by runtime/oci's rules, as the local
// backends take them.
func (k *Kubernetes) outputsVia(job runtime.Job, fetch func(dir string, bound int64) (skipped []string, over bool, err error)) (*oci.Outputs, error) {
	lim := job.Limits()
	dir, err := os.MkdirTemp(k.opts.RunDir, "skillbox-kube-outputs-") // 0700
	if err != nil {
		return nil, fmt.Errorf("make a private directory for the outputs: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			k.log.Warn("remove outputs dir", "dir", dir, "error", err)
		}
	}()
	bound := lim.WorkdirBytes + outputsSlack
	skipped, over, err := fetch(dir, bound)
	if err != nil {
		return nil, err
	}
	outs, err := oci.CollectCopy(dir, lim, job.Invocation.Files)
	if err != nil {
		return nil, err
	}
	outs.Skipped = append(tarstream.LimitNotes(skipped), outs.Skipped...)
	if over {
		outs.Truncated = true
		if outs.TruncatedBy == "" {
			outs.TruncatedBy = runtime.CapOutputBytes
		}
		outs.Skipped = append(outs.Skipped, fmt.Sprintf("outputs truncated: the workdir's tar stream went over %d bytes (the workdir's %d plus %d for the archive's headers); the files after that point were not collected", bound, lim.WorkdirBytes, outputsSlack))
		if len(outs.Deleted) > 0 {
			// A file not read is not a file deleted.
			outs.Skipped = append(outs.Skipped, fmt.Sprintf("deleted inputs not reported: the outputs were truncated, so %d inputs not seen may still be there", len(outs.Deleted)))
			outs.Deleted = nil
		}
	}
	return outs, nil
}
