package oci

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/skillbox/skillbox/runtime"
	"golang.org/x/sys/unix"
)

// Outputs are read on the host after the container has stopped, so nothing
// in the sandbox can swap a file for a link while we read. Even so every
// open is relative to an already-open directory with O_NOFOLLOW, and only
// regular files and directories are entered: a symlink the script left
// behind (to /etc/shadow, say) is named in Skipped, never followed.
//
// Every regular file the script created or changed anywhere in the workdir
// is an output; inputs it left alone are not. An input is unchanged when
// its host-side fingerprint (inode, size, mtime, ctime) is what it was
// after writing it, or, when that differs, when its bytes still equal the
// input's.

// maxOutputDepth bounds how deep the workdir is walked.
const maxOutputDepth = 64

// Outputs is what CollectOutputs found.
type Outputs struct {
	Files []runtime.OutputFile
	// Skipped names entries not collected and why ("path: why"), the first
	// maxSkippedNamed by name, then one line counting the rest.
	Skipped []string
	// Truncated says a cap left changed files out; TruncatedBy is the
	// first cap hit; OmittedFiles and OmittedBytes count what caps left out.
	Truncated    bool
	TruncatedBy  string
	OmittedFiles int
	OmittedBytes int64
	// Deleted are the input files and symlinks the script removed, in
	// lexical order.
	Deleted []string
}

// Apply copies o into a result.
func (o *Outputs) Apply(r *runtime.Result) {
	r.Outputs, r.OutputsSkipped = o.Files, o.Skipped
	r.OutputsTruncated, r.OutputsTruncatedBy = o.Truncated, o.TruncatedBy
	r.OutputsOmittedFiles, r.OutputsOmittedBytes = o.OmittedFiles, o.OmittedBytes
	r.Deleted = o.Deleted
}

// CollectOutputs reads, from the host side of the stopped container's
// workdir, every regular file the script created or changed, within the
// bundle's Limits (OutputFiles, OutputBytes, OutputFileBytes). Files are
// visited in lexical order, so which ones fit under the caps is stable.
func (b *Bundle) CollectOutputs() (*Outputs, error) {
	return collectOutputs(b.Workdir, b.Limits, b.inputs)
}

// collectOutputs walks workdir; inputs says what was written there before
// the run (nil: nothing).
func collectOutputs(workdir string, lim runtime.Limits, inputs inputManifest) (*Outputs, error) {
	lim = lim.WithDefaults()
	wd, err := unix.Open(workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workdir: %w", err)
	}
	dir := os.NewFile(uintptr(wd), workdir)
	defer dir.Close()
	c := &collector{lim: lim, inputs: inputs}
	c.walkDir(dir, "", 0)
	if c.unlisted > 0 {
		c.out.Skipped = append(c.out.Skipped, fmt.Sprintf("... and %d more entries not collected (only the first %d are named)", c.unlisted, maxSkippedNamed))
	}
	c.out.Deleted = deletedInputs(wd, inputs)
	return &c.out, nil
}

// deletedInputs returns the input files and symlinks of which nothing is
// left at their path: the path or one of its directories is gone. Each is
// looked up on its own, beneath the workdir and through no symlink, so a
// walk cut short by a cap never makes an input look deleted; an input
// whose path now holds something else (a directory, a link, a file where
// a directory was) is not deleted but replaced, and is reported as what
// is there now.
func deletedInputs(wd int, inputs inputManifest) []string {
	var out []string
	for name, in := range inputs {
		if in.kind != runtime.InputRegular && in.kind != runtime.InputSymlink {
			continue
		}
		dir, base := ".", name
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			dir, base = name[:i], name[i+1:]
		}
		dfd, err := unix.Openat2(wd, dir, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err != nil {
			if err == unix.ENOENT {
				out = append(out, name)
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			out = append(out, name)
		}
		unix.Close(dfd)
	}
	sort.Strings(out)
	return out
}

// A script decides how many entries outputs/ holds and how they are named;
// what is reported about them (in results and audit records) stays small.
const (
	maxSkippedNamed = 100 // skipped entries named one by one
	maxNameReported = 256 // bytes of a path kept in a report
	maxOutputWalk   = 1e5 // entries visited at most
)

type collector struct {
	lim    runtime.Limits
	inputs inputManifest
	// exclude is a name at the top of the workdir that is never an
	// output (a session sandbox's state dir).
	exclude  string
	out      Outputs
	unlisted int // skipped but not named
	visited  int
	total    int64 // bytes collected
}

func (c *collector) skip(rel, why string) {
	if len(c.out.Skipped) >= maxSkippedNamed {
		c.unlisted++
		return
	}
	c.out.Skipped = append(c.out.Skipped, reportName(rel)+": "+why)
}

// omit records a changed file a cap left out.
func (c *collector) omit(rel string, size int64, capName, why string) {
	c.out.Truncated = true
	if c.out.TruncatedBy == "" {
		c.out.TruncatedBy = capName
	}
	c.out.OmittedFiles++
	c.out.OmittedBytes += size
	c.skip(rel, why+" ("+capName+"); not collected")
}

// reportName makes a script-chosen path safe to show and store: quoted when
// it holds anything but printable characters, and cut to a bounded length.
func reportName(rel string) string {
	if len(rel) > maxNameReported {
		rel = strings.ToValidUTF8(rel[:maxNameReported], "") + "..."
	}
	for _, r := range rel {
		if !unicode.IsPrint(r) {
			return strconv.Quote(rel)
		}
	}
	return rel
}

// printableName reports whether a file name is valid UTF-8 of printable
// characters only.
func printableName(n string) bool {
	if !utf8.ValidString(n) {
		return false
	}
	for _, r := range n {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// walkDir collects the entries of the open directory dir, whose path
// relative to the workdir is rel ("" for the workdir itself).
func (c *collector) walkDir(dir *os.File, rel string, depth int) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		c.skip(relOr(rel, "."), "cannot list directory: "+err.Error())
		return
	}
	sort.Strings(names)
	fd := int(dir.Fd())
	for _, n := range names {
		r := n
		if rel != "" {
			r = rel + "/" + n
		}
		if c.visited++; c.visited > maxOutputWalk {
			c.unlisted++
			continue
		}
		if rel == "" && n == c.exclude {
			continue
		}
		if !printableName(n) {
			// Results, logs and terminals would carry the name raw
			// (escape sequences, forged lines); reportName quotes it here.
			c.skip(r, "name holds control characters or invalid UTF-8, not collected (give output files plain names)")
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.skip(r, "cannot stat: "+err.Error())
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth+1 >= maxOutputDepth {
				c.skip(r, fmt.Sprintf("directory nested deeper than %d levels, not collected", maxOutputDepth))
				continue
			}
			sfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				c.skip(r, "cannot open directory: "+err.Error())
				continue
			}
			sub := os.NewFile(uintptr(sfd), n)
			c.walkDir(sub, r, depth+1)
			sub.Close()
		case unix.S_IFREG:
			c.regular(fd, n, r, &st)
		case unix.S_IFLNK:
			if in := c.inputs[r]; in != nil && in.kind == runtime.InputSymlink && c.sameTarget(fd, n, in.target) {
				continue // an input link left as it was
			}
			c.skip(r, "symlink, not followed")
		default:
			if in := c.inputs[r]; in != nil && in.kind == inputOther && in.fp == fingerprintOf(&st) {
				continue // there before the run, untouched
			}
			c.skip(r, kindOf(st.Mode)+", not collected")
		}
	}
}

func (c *collector) sameTarget(dirfd int, name, target string) bool {
	buf := make([]byte, len(target)+1)
	n, err := unix.Readlinkat(dirfd, name, buf)
	return err == nil && n == len(target) && string(buf[:n]) == target
}

// regular collects one regular file unless it is an unchanged input or a
// cap leaves it out.
func (c *collector) regular(dirfd int, name, rel string, st *unix.Stat_t) {
	in := c.inputs[rel]
	if in != nil && in.kind != runtime.InputRegular {
		in = nil // a file where an input dir or link was: new
	}
	if in != nil && fingerprintOf(st) == in.fp {
		return // not written to since we wrote it
	}
	size := st.Size
	// An input whose size is unchanged may still hold its bytes; read it
	// before the caps decide, to compare.
	mayBeSame := in != nil && size == int64(len(in.data))
	if !mayBeSame && !c.fits(rel, size) {
		return
	}
	data, ok := c.read(dirfd, name, rel, size)
	if !ok {
		return
	}
	if mayBeSame {
		if bytes.Equal(data, in.data) {
			return
		}
		if !c.fits(rel, size) {
			return
		}
	}
	sum := sha256.Sum256(data)
	c.out.Files = append(c.out.Files, runtime.OutputFile{
		Path:   rel,
		Size:   int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]),
		Data:   data,
	})
	c.total += int64(len(data))
}

// fits checks the caps for one more file of size bytes; a file left out is
// recorded (never silently).
func (c *collector) fits(rel string, size int64) bool {
	switch {
	case len(c.out.Files) >= c.lim.OutputFiles:
		c.omit(rel, size, runtime.CapOutputFiles, fmt.Sprintf("over the cap of %d output files", c.lim.OutputFiles))
	case size > c.lim.OutputFileBytes:
		c.omit(rel, size, runtime.CapOutputFileBytes, fmt.Sprintf("%d bytes, over the %d-byte cap for one output file", size, c.lim.OutputFileBytes))
	case c.total+size > c.lim.OutputBytes:
		c.omit(rel, size, runtime.CapOutputBytes, fmt.Sprintf("%d bytes would exceed the %d-byte cap for all outputs", size, c.lim.OutputBytes))
	default:
		return true
	}
	return false
}

// read reads a file of the size fstatat reported, refusing one that is no
// longer that regular file.
func (c *collector) read(dirfd int, name, rel string, size int64) ([]byte, bool) {
	// O_NONBLOCK so that a FIFO swapped in (it cannot be: the container is
	// stopped) would not hang us; we check the type again on the open fd.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		c.skip(rel, "cannot open: "+err.Error())
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != size {
		c.skip(rel, "changed while collecting, not collected")
		return nil, false
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		c.skip(rel, "cannot read: "+err.Error())
		return nil, false
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n > 0 {
		c.skip(rel, "grew while collecting, not collected")
		return nil, false
	}
	return data, true
}

func relOr(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFDIR:
		return "directory"
	default:
		return "special file"
	}
}

// CollectCopy collects the outputs of a workdir copied out of a sandbox
// that ran elsewhere (the kubernetes backend's tar stream) into dir, by
// the rules CollectOutputs applies, within lim's caps. files are the
// job's input entries: the copy has new inodes, so an input counts as
// unchanged when its bytes (a link: its target) are what the job gave.
func CollectCopy(dir string, lim runtime.Limits, files []runtime.InputFile) (*Outputs, error) {
	m := make(inputManifest, len(files)+1)
	for i := range files {
		f := &files[i]
		m[f.Name] = &inputRecord{kind: f.EffectiveKind(), data: f.Data, target: f.Target}
	}
	if _, given := m[path.Base(runtime.OutputsDir)]; !given {
		m[path.Base(runtime.OutputsDir)] = &inputRecord{kind: runtime.InputDir}
	}
	return collectOutputs(dir, lim, m)
}

// ReportName is how a result names a path a script chose (quoted when it
// holds anything but printable characters, cut to a bounded length).
func ReportName(rel string) string { return reportName(rel) }
