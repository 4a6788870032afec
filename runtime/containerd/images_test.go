package containerd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeStore is the part of a content store writeBlob uses: Writer as
// containerd answers it (ErrAlreadyExists for a blob it has, after adding
// it to the lease), Update for labels. The other methods are not called.
type fakeStore struct {
	content.Store
	blobs   map[digest.Digest][]byte
	labels  map[digest.Digest]map[string]string
	writers []digest.Digest
}

func (f *fakeStore) Writer(_ context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return nil, err
		}
	}
	f.writers = append(f.writers, wo.Desc.Digest)
	if _, ok := f.blobs[wo.Desc.Digest]; ok {
		return nil, errdefs.ErrAlreadyExists
	}
	return &fakeWriter{store: f, want: wo.Desc.Digest}, nil
}

func (f *fakeStore) Update(_ context.Context, info content.Info, _ ...string) (content.Info, error) {
	f.labels[info.Digest] = info.Labels
	return info, nil
}

type fakeWriter struct {
	store *fakeStore
	want  digest.Digest
	buf   bytes.Buffer
}

func (w *fakeWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *fakeWriter) Close() error                { return nil }
func (w *fakeWriter) Digest() digest.Digest       { return digest.FromBytes(w.buf.Bytes()) }
func (w *fakeWriter) Truncate(int64) error        { w.buf.Reset(); return nil }
func (w *fakeWriter) Status() (content.Status, error) {
	return content.Status{Offset: int64(w.buf.Len())}, nil
}
func (w *fakeWriter) Commit(_ context.Context, _ int64, _ digest.Digest, opts ...content.Opt) error {
	var info content.Info
	for _, o := range opts {
		if err := o(&info); err != nil {
			return err
		}
	}
	w.store.blobs[w.want] = w.buf.Bytes()
	if info.Labels != nil {
		w.store.labels[w.want] = info.Labels
	}
	return nil
}

func TestWriteBlobGoesThroughAWriter(t *testing.T) {
	layout := t.TempDir()
	data := []byte("a layer")
	d := digest.FromBytes(data)
	if err := os.MkdirAll(filepath.Join(layout, "blobs", "sha256"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blobPath(layout, d), data, 0o600); err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{Digest: d, Size: int64(len(data))}
	labels := map[string]string{"containerd.io/gc.ref.content.l.0": d.String()}
	tests := []struct {
		name    string
		present bool
	}{
		{"a blob the store lacks is written", false},
		// Through a writer all the same: that is what puts it in the lease.
		{"a blob the store has is opened for writing, then labelled", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := &fakeStore{blobs: map[digest.Digest][]byte{}, labels: map[digest.Digest]map[string]string{}}
			if tt.present {
				cs.blobs[d] = data
			}
			if err := writeBlob(context.Background(), cs, layout, desc, labels); err != nil {
				t.Fatal(err)
			}
			if len(cs.writers) != 1 || cs.writers[0] != d {
				t.Errorf("writers opened for %v, want one for %s", cs.writers, d)
			}
			if !bytes.Equal(cs.blobs[d], data) {
				t.Errorf("blob = %q, want %q", cs.blobs[d], data)
			}
			if cs.labels[d]["containerd.io/gc.ref.content.l.0"] != d.String() {
				t.Errorf("labels = %v", cs.labels[d])
			}
		})
	}
}
