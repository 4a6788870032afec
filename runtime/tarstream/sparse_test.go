package tarstream

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// paxRecord is one "len key=value\n" record of a PAX extended header.
func paxRecord(k, v string) string {
	s := " " + k + "=" + v + "\n"
	for n := len(s); ; {
		r := strconv.Itoa(n) + s
		if len(r) == n {
			return r
		}
		n = len(r)
	}
}

// sparseTar is a tar stream of a few hundred bytes holding one PAX 1.0
// sparse file of realsize bytes (5 bytes of data at its end): what archive/
// tar expands into realsize bytes, holes read as zeros.
func sparseTar(t *testing.T, name string, realsize int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") + paxRecord("GNU.sparse.name", name) +
		paxRecord("GNU.sparse.realsize", strconv.FormatInt(realsize, 10))
	// tar.Writer writes no GNU.sparse records: a file entry made into an
	// extended header by its type byte and checksum.
	must(t, tw.WriteHeader(&tar.Header{Name: "pax", Typeflag: tar.TypeReg, Size: int64(len(recs)), Format: tar.FormatUSTAR}))
	_, err := tw.Write([]byte(recs))
	must(t, err)
	must(t, tw.Flush())
	raw := buf.Bytes()
	raw[156] = tar.TypeXHeader
	copy(raw[148:156], "        ")
	sum := 0
	for _, b := range raw[:512] {
		sum += int(b)
	}
	copy(raw[148:156], fmt.Sprintf("%06o\x00 ", sum))
	blk := make([]byte, 512)
	copy(blk, fmt.Sprintf("1\n%d\n5\n", realsize-5))
	data := append(blk, "hello"...)
	must(t, tw.WriteHeader(&tar.Header{Name: "./x", Typeflag: tar.TypeReg, Size: int64(len(data)), Mode: 0o644, Format: tar.FormatUSTAR}))
	_, err = tw.Write(data)
	must(t, err)
	must(t, tw.Close())
	return buf.Bytes()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sparseRealsize is the sparse entry's length: 1 TiB from a stream of
// under 2 KiB.
const sparseRealsize = 1 << 40

// TestUnpackSparse: the workdir's tar stream is bounded in bytes,
// but a sparse entry expands past any such bound as it is written out; it
// is refused by name instead of written.
func TestUnpackSparse(t *testing.T) {
	stream := sparseTar(t, "./big", sparseRealsize)
	dir := t.TempDir()
	skipped, err := Unpack(Bounded(bytes.NewReader(stream), 1<<20), dir)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "big"), &st); err == nil {
		t.Fatalf("the sparse entry was written out: %d bytes, %d allocated", st.Size, st.Blocks*512)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(s, "big: sparse") }) {
		t.Errorf("skipped %q: want the sparse entry named", skipped)
	}
}
