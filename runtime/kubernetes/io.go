package kubernetes

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
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
// /work with their modes (0644 files and 0755 directories by default, as
// the local backends make them), the directories their paths need first,
// and an empty outputs/ unless the inputs give one. files must be valid
// (runtime.ValidateInputs).
func writeDelivery(w io.Writer, frame []byte, files []runtime.InputFile, now time.Time) error {
	tw := tar.NewWriter(w)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uid, h.Gid, h.Format = now, runtime.ContainerUID, runtime.ContainerGID, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(framePath, "/"), Mode: 0o400, Size: int64(len(frame))}); err != nil {
		return err
	}
	if _, err := tw.Write(frame); err != nil {
		return err
	}
	work := strings.TrimPrefix(runtime.WorkDir, "/") + "/"
	made := map[string]bool{}
	dir := func(name string, mode uint32) error {
		made[name] = true
		return hdr(&tar.Header{Typeflag: tar.TypeDir, Name: work + name + "/", Mode: int64(mode)})
	}
	outputs := path.Base(runtime.OutputsDir)
	given := false
	for i := range files {
		f := &files[i]
		// The directories the path needs, unless made already.
		for j := strings.IndexByte(f.Name, '/'); j >= 0; {
			if parent := f.Name[:j]; !made[parent] {
				if err := dir(parent, 0o755); err != nil {
					return err
				}
			}
			next := strings.IndexByte(f.Name[j+1:], '/')
			if next < 0 {
				break
			}
			j += 1 + next
		}
		mode := f.Mode & 0o777
		var err error
		switch f.EffectiveKind() {
		case runtime.InputDir:
			if mode == 0 {
				mode = 0o755
			}
			given = given || f.Name == outputs
			err = dir(f.Name, mode)
		case runtime.InputSymlink:
			err = hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: work + f.Name, Linkname: f.Target, Mode: 0o777})
		default:
			if mode == 0 {
				mode = 0o644
			}
			if err = hdr(&tar.Header{Typeflag: tar.TypeReg, Name: work + f.Name, Mode: int64(mode), Size: int64(len(f.Data))}); err == nil {
				_, err = tw.Write(f.Data)
			}
		}
		if err != nil {
			return fmt.Errorf("input %s: %w", runtime.QuoteName(f.Name), err)
		}
	}
	if !given && !made[outputs] {
		if err := dir(outputs, 0o755); err != nil {
			return err
		}
	}
	return tw.Close()
}

// errStreamOver is the error of a boundedReader past its bound.
var errStreamOver = errors.New("stream over its bound")

// boundedReader reads r up to n bytes, then fails with errStreamOver.
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		// One byte more says whether the stream ends here.
		var one [1]byte
		if n, err := b.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, errStreamOver
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}

// unpackOutputs unpacks the workdir's tar stream r into dir, a private
// directory made for it, and returns what it did not unpack, as the local
// backends' collector names it ("path: why"). Names are confined to dir
// (os.Root: no "..", no link followed on the way); regular files become
// 0600 and directories 0700 whatever their modes (the collector reads
// content only); symlinks and hard links are made as such, never
// followed; fifos and devices are named, never made. An error is a stream that broke or went over its
// bound: what was unpacked until then stays, a file cut short removed.
func unpackOutputs(r io.Reader, dir string) (skipped []string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open outputs dir: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return skipped, nil
		}
		if err != nil {
			return skipped, err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." {
			continue
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			skipped = append(skipped, oci.ReportName(h.Name)+": name outside the workdir, not collected")
			continue
		}
		skip := func(why string) { skipped = append(skipped, oci.ReportName(name)+": "+why) }
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				skip("cannot make directory: " + err.Error())
			}
		case tar.TypeReg:
			if sparseEntry(h) {
				// archive/tar reads its holes as zeros: a few bytes of
				// stream would be written out as h.Size bytes, past the
				// stream's bound. tar -c without --sparse makes none.
				skip(fmt.Sprintf("sparse file of %d bytes, not collected (write outputs as plain files)", h.Size))
				continue
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				skip("cannot create: " + err.Error())
				continue
			}
			_, cerr := io.Copy(f, tr)
			if err := errors.Join(cerr, f.Close()); err != nil {
				_ = root.Remove(name)
				if cerr != nil {
					return skipped, cerr
				}
				skip("cannot write: " + err.Error())
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				skip("symlink, not followed")
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			if err := root.Link(target, name); err != nil {
				skip("hard link to " + oci.ReportName(target) + " that cannot be made again, not collected: " + err.Error())
			}
		case tar.TypeFifo:
			skip("fifo, not collected")
		case tar.TypeChar:
			skip("character device, not collected")
		case tar.TypeBlock:
			skip("block device, not collected")
		default:
			skip(fmt.Sprintf("tar entry of type %q, not collected", h.Typeflag))
		}
	}
}

// sparseEntry says whether a tar entry is a sparse file (GNU or PAX
// sparse formats), whose length is not what the stream carries.
func sparseEntry(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
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
	ctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	ex, err := k.executor(cs, cfg, name, collectCommand)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	var errOut noteBuffer
	exit := make(chan error, 1)
	go func() {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errOut})
		pw.CloseWithError(err)
		exit <- err
	}()
	bound := lim.WorkdirBytes + outputsSlack
	br := &boundedReader{r: pr, n: bound}
	skipped, uerr := unpackOutputs(br, dir)
	if uerr == nil {
		// tar pads its archive past the end the reader stops at: read
		// the padding too, so that the exec ends by itself.
		_, uerr = io.Copy(io.Discard, br)
	}
	over := errors.Is(uerr, errStreamOver)
	if uerr != nil {
		cancel() // the rest of the stream is not read
	}
	pr.CloseWithError(io.ErrClosedPipe)
	execErr := <-exit
	switch {
	case over:
	case uerr != nil && execErr != nil:
		return nil, fmt.Errorf("stream the workdir of pod %s/%s back (tar -c): %w: %s", k.namespace, name, execErr, errOut.String())
	case uerr != nil:
		return nil, fmt.Errorf("read the workdir's tar stream from pod %s/%s: %w", k.namespace, name, uerr)
	case execErr != nil:
		// tar read everything it could and said what it could not (a
		// file that changed or vanished as it read, a socket).
		skipped = append(skipped, fmt.Sprintf("outputs may be incomplete: tar -c in the pod: %v: %s", execErr, errOut.String()))
	}
	outs, err := oci.CollectCopy(dir, lim, job.Invocation.Files)
	if err != nil {
		return nil, err
	}
	outs.Skipped = append(limitNotes(skipped), outs.Skipped...)
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

// maxNotes is how many entries unpackOutputs' notes name, as the
// collector names at most so many skipped entries.
const maxNotes = 100

// limitNotes keeps the first maxNotes notes and counts the rest.
func limitNotes(notes []string) []string {
	if len(notes) <= maxNotes {
		return notes
	}
	return append(notes[:maxNotes:maxNotes], fmt.Sprintf("... and %d more entries of the workdir's tar stream not collected", len(notes)-maxNotes))
}
