package kubernetes

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
)

// testRegistry is the part of the OCI distribution API a push by
// containerd and a pull by a node's containerd use, with blobs in a
// directory and manifests in memory: enough for tests, nothing more (no
// auth, no deletes, no listing, no cross-repository mounts). One
// testRegistry may serve several listeners (the host's loopback for the
// push, the test cluster node's for the pull).
type testRegistry struct {
	dir string // blobs/HEX, uploads/ID

	mu        sync.Mutex
	manifests map[string]testManifest
	puts      int      // manifest and blob PUTs, to see what a push sent
	served    []string // the manifests sent by GET, as repo@ref, to see what a pull took
	next      int
}

type testManifest struct {
	mediaType string
	data      []byte
}

func newTestRegistry(t testing.TB) *testRegistry {
	dir := t.TempDir()
	for _, d := range []string{"blobs", "uploads"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return &testRegistry{dir: dir, manifests: map[string]testManifest{}}
}

func (r *testRegistry) blobFile(d string) string {
	return filepath.Join(r.dir, "blobs", strings.TrimPrefix(d, "sha256:"))
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		w.WriteHeader(http.StatusOK)
	case strings.Contains(p, "/blobs/uploads/"):
		i := strings.Index(p, "/blobs/uploads/")
		r.upload(w, req, p[:i], p[i+len("/blobs/uploads/"):])
	case strings.Contains(p, "/blobs/"):
		d := p[strings.LastIndex(p, "/blobs/")+len("/blobs/"):]
		f, err := os.Open(r.blobFile(d))
		if !digestPattern.MatchString(d) || err != nil || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", d)
		http.ServeContent(w, req, "", time.Time{}, f)
	case strings.Contains(p, "/manifests/"):
		i := strings.LastIndex(p, "/manifests/")
		r.manifest(w, req, p[:i], p[i+len("/manifests/"):])
	default:
		http.NotFound(w, req)
	}
}

func (r *testRegistry) manifest(w http.ResponseWriter, req *http.Request, repo, ref string) {
	switch req.Method {
	case http.MethodPut:
		b, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d := digest.FromBytes(b).String()
		if strings.HasPrefix(ref, "sha256:") && ref != d {
			http.Error(w, `{"errors":[{"code":"DIGEST_INVALID"}]}`, http.StatusBadRequest)
			return
		}
		m := testManifest{mediaType: req.Header.Get("Content-Type"), data: b}
		r.mu.Lock()
		r.manifests[repo+"@"+d] = m
		r.manifests[repo+"@"+ref] = m
		r.puts++
		r.mu.Unlock()
		w.Header().Set("Docker-Content-Digest", d)
		w.WriteHeader(http.StatusCreated)
	case http.MethodGet, http.MethodHead:
		r.mu.Lock()
		m, ok := r.manifests[repo+"@"+ref]
		r.mu.Unlock()
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", m.mediaType)
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(m.data).String())
		w.Header().Set("Content-Length", fmt.Sprint(len(m.data)))
		if req.Method == http.MethodGet {
			r.mu.Lock()
			r.served = append(r.served, strings.TrimPrefix(repo, "/v2/")+"@"+ref)
			r.mu.Unlock()
			_, _ = w.Write(m.data)
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// servedManifests are the manifests sent by GET so far, as repo@ref.
func (r *testRegistry) servedManifests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.served)
}

// upload: POST starts one, PATCH appends, PUT appends and commits it
// under the digest it is asked for, if that is its digest.
func (r *testRegistry) upload(w http.ResponseWriter, req *http.Request, repo, id string) {
	if req.Method == http.MethodPost {
		r.mu.Lock()
		r.next++
		id = fmt.Sprint(r.next)
		r.mu.Unlock()
		if err := os.WriteFile(filepath.Join(r.dir, "uploads", id), nil, 0o600); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", repo+"/blobs/uploads/"+id)
		w.Header().Set("Range", "0-0")
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if req.Method != http.MethodPatch && req.Method != http.MethodPut {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if strings.ContainsAny(id, "/.") {
		http.Error(w, "bad upload id", http.StatusBadRequest)
		return
	}
	path := filepath.Join(r.dir, "uploads", id)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		http.Error(w, `{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	_, err = io.Copy(f, req.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Method == http.MethodPatch {
		st, _ := os.Stat(path)
		w.Header().Set("Location", repo+"/blobs/uploads/"+id)
		w.Header().Set("Range", fmt.Sprintf("0-%d", st.Size()-1))
		w.WriteHeader(http.StatusAccepted)
		return
	}
	want := req.URL.Query().Get("digest")
	got, err := fileDigest(path)
	if err != nil || got != want || !digestPattern.MatchString(want) {
		http.Error(w, `{"errors":[{"code":"DIGEST_INVALID"}]}`, http.StatusBadRequest)
		return
	}
	if err := os.Rename(path, r.blobFile(want)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	r.mu.Lock()
	r.puts++
	r.mu.Unlock()
	w.Header().Set("Docker-Content-Digest", want)
	w.Header().Set("Location", repo+"/blobs/"+want)
	w.WriteHeader(http.StatusCreated)
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	d, err := digest.FromReader(f)
	return d.String(), err
}

// manifestOf is the manifest of repo@d, or nil.
func (r *testRegistry) manifestOf(repo, d string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manifests["/v2/"+repo+"@"+d].data
}

// hasBlob: the registry holds the blob d.
func (r *testRegistry) hasBlob(d string) bool {
	_, err := os.Stat(r.blobFile(d))
	return err == nil
}

// putCount is how many blobs and manifests were PUT so far.
func (r *testRegistry) putCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.puts
}
