package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// sparseSize is the apparent size of the sparse file the tests make: a
// tmpfs /work can hold it in no blocks at all.
const sparseSize = 1 << 40

// allocated is the disk a file or tree uses (st_blocks), in bytes.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var n int64
	seen := map[uint64]bool{}
	must(t, filepath.Walk(p, func(q string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
		return nil
	}))
	return n
}

func TestCopyTreeKeepsHoles(t *testing.T) {
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err)
	// Data at the start, in the middle and at the end, holes between.
	for _, off := range []int64{0, sparseSize / 2, sparseSize - 5} {
		_, err := f.WriteAt([]byte("hello"), off)
		must(t, err)
	}
	must(t, f.Close())
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dst, "sparse"))
	must(t, err)
	if st.Size() != sparseSize {
		t.Fatalf("copy is %d bytes, want %d", st.Size(), int64(sparseSize))
	}
	if got := allocated(t, filepath.Join(dst, "sparse")); got > 1<<20 {
		t.Fatalf("the copy of a sparse file allocates %d bytes: its holes were filled", got)
	}
	g, err := os.Open(filepath.Join(dst, "sparse"))
	must(t, err)
	defer g.Close()
	for _, off := range []int64{0, sparseSize / 2, sparseSize - 5} {
		b := make([]byte, 5)
		if _, err := g.ReadAt(b, off); err != nil || string(b) != "hello" {
			t.Fatalf("at %d: %q, %v", off, b, err)
		}
	}
}

func TestCopyTreeKeepsHardLinks(t *testing.T) {
	src := t.TempDir()
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	first := filepath.Join(src, "target")
	must(t, os.WriteFile(first, make([]byte, 1<<20), 0o644))
	for i := 0; i < 1000; i++ {
		dir := src
		if i%2 == 1 {
			dir = filepath.Join(src, "d")
		}
		must(t, os.Link(first, filepath.Join(dir, fmt.Sprintf("link-%04d", i))))
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	var want unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dst, "target"), &want))
	if want.Nlink != 1001 {
		t.Errorf("the copy's target has %d links, want 1001", want.Nlink)
	}
	for _, rel := range []string{"link-0000", "d/link-0001", "d/link-0999"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dst, rel), &st))
		if st.Ino != want.Ino {
			t.Errorf("%s is inode %d, not a link to target (%d)", rel, st.Ino, want.Ino)
		}
	}
	if got := allocated(t, dst); got > 2<<20 {
		t.Errorf("the copy allocates %d bytes for one 1 MiB file and its links", got)
	}
}

// hostileWork is a /work as a script can make it in a moment: a 1 TiB
// sparse file that uses no blocks and 1,000 hard links to one 1 MiB file.
func hostileWork(t *testing.T) string {
	t.Helper()
	w := t.TempDir()
	must(t, os.WriteFile(filepath.Join(w, "small"), []byte("keep me"), 0o644))
	f, err := os.Create(filepath.Join(w, "sparse"))
	must(t, err)
	must(t, f.Truncate(sparseSize))
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(w, "target"), make([]byte, 1<<20), 0o644))
	for i := 0; i < 1000; i++ {
		must(t, os.Link(filepath.Join(w, "target"), filepath.Join(w, fmt.Sprintf("l%04d", i))))
	}
	return w
}

func TestMeasure(t *testing.T) {
	u, err := Measure(hostileWork(t), 0)
	must(t, err)
	if u.Bytes != sparseSize+1<<20+7 || u.Entries != 1003 || u.Links != 1000 || u.Largest != "sparse" || u.LargestSize != sparseSize {
		t.Fatalf("Measure = %+v", u)
	}
	if u.Allocated > 2<<20 {
		t.Errorf("allocated %d", u.Allocated)
	}
	if _, err := Measure(hostileWork(t), 1<<30); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("Measure with a limit = %v, want ErrBudgetExceeded", err)
	}
}

// TestReserveRefusesBeforeWriting is a pause's order: /work is walked and
// charged before anything is copied, and refused with what it holds and
// what to do; nothing of it reaches the store.
func TestReserveRefusesBeforeWriting(t *testing.T) {
	s, err := OpenLimits(filepath.Join(t.TempDir(), "ckpt"), Limits{Total: 1 << 30, PerSession: 256 << 20})
	must(t, err)
	p, err := s.BeginFor(Account{Session: "ses_1", UID: 1000, HasUID: true})
	must(t, err)
	u, err := Measure(hostileWork(t), 0)
	must(t, err)
	err = p.Reserve(u.Need())
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("Reserve(%d) = %v, want ErrBudgetExceeded", u.Need(), err)
	}
	for _, w := range []string{"session ses_1", "needs 1.0 TiB", "of its 256.0 MiB budget", "delete files", BudgetPerSessionKey} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q lacks %q", err, w)
		}
	}
	if _, err := os.Lstat(p.WorkDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the work copy exists after the refusal: %v", err)
	}
	if got := allocated(t, s.Dir()); got > 64<<10 {
		t.Errorf("the store holds %d bytes after the refusal", got)
	}
	must(t, p.Abort())
	if ents, _ := os.ReadDir(s.Dir()); len(ents) != 0 {
		t.Errorf("the store holds %v after Abort", ents)
	}
	if p.Reserved() != 0 {
		t.Errorf("the refused reservation counts %d", p.Reserved())
	}
}

// TestCopyStopsAtBudget: a tree that grows while it is copied (the walk
// said it fit) stops at the budget, having written no more than it.
func TestCopyStopsAtBudget(t *testing.T) {
	const budget = 8 << 20
	s, err := OpenLimits(filepath.Join(t.TempDir(), "ckpt"), Limits{Total: budget})
	must(t, err)
	p, err := s.Begin()
	must(t, err)
	defer p.Abort()
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "a"), []byte("small"), 0o644))
	u, err := Measure(src, 0)
	must(t, err)
	must(t, p.Reserve(u.Need()))
	grown := false
	charge := func(n int64) error {
		if !grown { // the sandbox writes 64 MiB while the copy runs
			grown = true
			f, err := os.OpenFile(filepath.Join(src, "a"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Write(make([]byte, 64<<20))
			must(t, err)
			must(t, f.Close())
		}
		return p.Charge(n)
	}
	_, err = CopyTreeWith(src, p.WorkDir(), CopyOptions{Charge: charge})
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("copy of a growing tree = %v, want ErrBudgetExceeded", err)
	}
	if got := allocated(t, p.WorkDir()); got > budget {
		t.Errorf("the copy wrote %d bytes, more than the %d budget", got, budget)
	}
	if p.Reserved() > budget {
		t.Errorf("reserved %d, more than the budget", p.Reserved())
	}
}

// TestSparseAndLinksCheckpoint: a checkpoint of sparse files and links
// takes what they took, counts each link once, and restores them so.
func TestSparseAndLinksCheckpoint(t *testing.T) {
	s, err := OpenLimits(filepath.Join(t.TempDir(), "ckpt"), Limits{Total: 64 << 20})
	must(t, err)
	p, err := s.BeginFor(Account{Session: "ses_1", UID: 1000, HasUID: true})
	must(t, err)
	defer p.Abort()
	fakeImage(t, p.ImageDir(), goodImage)
	w := t.TempDir()
	f, err := os.Create(filepath.Join(w, "sparse"))
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 32<<20)
	must(t, err)
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(w, "target"), make([]byte, 1<<20), 0o644))
	for i := 0; i < 1000; i++ {
		must(t, os.Link(filepath.Join(w, "target"), filepath.Join(w, fmt.Sprintf("l%04d", i))))
	}
	u, err := Measure(w, 0)
	must(t, err)
	must(t, p.Reserve(u.Need()))
	_, err = CopyTreeWith(w, p.WorkDir(), CopyOptions{Charge: p.Charge})
	must(t, err)
	ck, err := p.Commit(testManifest())
	must(t, err)
	m := ck.Manifest()
	if m.UID == nil || *m.UID != 1000 {
		t.Errorf("manifest uid %v", m.UID)
	}
	if m.DiskBytes > 34<<20 || m.TotalBytes < 1000<<20 {
		t.Errorf("disk_bytes %d, total_bytes %d", m.DiskBytes, m.TotalBytes)
	}
	if got := allocated(t, ck.Dir()); got > 4<<20 {
		t.Errorf("the checkpoint allocates %d bytes", got)
	}
	// Loaded again (each link hashed once) and restored with its links
	// and holes.
	ld, err := s.Load(ck.ID())
	must(t, err)
	back := filepath.Join(t.TempDir(), "back")
	_, err = CopyTree(ld.WorkDir(), back)
	must(t, err)
	var a, b unix.Stat_t
	must(t, unix.Stat(filepath.Join(back, "target"), &a))
	must(t, unix.Stat(filepath.Join(back, "l0999"), &b))
	if a.Ino != b.Ino || a.Nlink != 1001 {
		t.Errorf("restored links: inodes %d and %d, %d links", a.Ino, b.Ino, a.Nlink)
	}
	if got := allocated(t, back); got > 2<<20 {
		t.Errorf("the restored tree allocates %d bytes", got)
	}

	// The accounts are read back from the manifests at Open.
	s2, err := OpenLimits(s.Dir(), Limits{PerUID: m.DiskBytes + 64<<10})
	must(t, err)
	if _, uid := s2.UsageOf(Account{UID: 1000, HasUID: true}); uid < m.DiskBytes {
		t.Errorf("uid 1000 uses %d after a restart, want at least %d", uid, m.DiskBytes)
	}
	q, err := s2.BeginFor(Account{Session: "ses_2", UID: 1000, HasUID: true})
	must(t, err)
	defer q.Abort()
	if err := q.Reserve(1 << 20); !errors.Is(err, ErrBudgetExceeded) || !strings.Contains(err.Error(), BudgetPerUIDKey) || !strings.Contains(err.Error(), "uid 1000") {
		t.Errorf("uid 1000 over its budget after a restart: %v", err)
	}
	o, err := s2.BeginFor(Account{Session: "ses_3", UID: 1001, HasUID: true})
	must(t, err)
	defer o.Abort()
	if err := o.Reserve(1 << 20); err != nil {
		t.Errorf("another uid is refused: %v", err)
	}
	must(t, s2.Remove(ck.ID()))
	if err := q.Reserve(1 << 20); err != nil {
		t.Errorf("uid 1000 after its checkpoint is removed: %v", err)
	}
}

func TestDiskLimits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lim        Limits
		size, free int64
		n          int64
		want       string
	}{
		{"min free", Limits{MinFree: 64 << 20}, 100 << 30, 100 << 20, 50 << 20, MinFreeKey},
		{"above min free", Limits{MinFree: 64 << 20}, 100 << 30, 200 << 20, 50 << 20, ""},
		{"disk share", Limits{DiskPercent: 10}, 1 << 30, 1 << 30, 200 << 20, DiskPercentKey},
		{"within the share", Limits{DiskPercent: 50}, 1 << 30, 1 << 30, 200 << 20, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenLimits(filepath.Join(t.TempDir(), "ckpt"), tc.lim)
			must(t, err)
			s.statfs = func(string) (int64, int64, error) { return tc.size, tc.free, nil }
			p, err := s.Begin()
			must(t, err)
			defer p.Abort()
			err = p.Reserve(tc.n)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Reserve = %v", err)
			case tc.want != "" && (!errors.Is(err, ErrBudgetExceeded) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Reserve = %v, want a refusal naming %s", err, tc.want)
			}
		})
	}
}
