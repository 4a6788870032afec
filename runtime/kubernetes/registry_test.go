package kubernetes

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	digest "github.com/opencontainers/go-digest"
)

// testRegistry is the part of the OCI distribution API a push by
// containerd and a pull by a node's containerd use, over blobs and
// manifests kept in memory: enough for tests, nothing more (no auth, no
// deletes, no listing, no cross-repository mounts). One testRegistry may
// serve several listeners (the host's loopback for the push, the test
// cluster node's for the pull).
type testRegistry struct {
	mu        sync.Mutex
	blobs     map[string][]byte // by digest, shared by all repositories
	manifests map[string]testManifest
	uploads   map[string]*bytes.Buffer
	puts      int // manifest and blob PUTs, to see what a push sent
	next      int
}

type testManifest struct {
	mediaType string
	data      []byte
}

func newTestRegistry() *testRegistry {
	return &testRegistry{blobs: map[string][]byte{}, manifests: map[string]testManifest{}, uploads: map[string]*bytes.Buffer{}}
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.WriteHeader(http.StatusOK)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case strings.Contains(p, "/blobs/uploads/"):
		r.upload(w, req, p[:strings.Index(p, "/blobs/uploads/")], p[strings.Index(p, "/blobs/uploads/")+len("/blobs/uploads/"):])
	case strings.Contains(p, "/blobs/"):
		d := p[strings.LastIndex(p, "/blobs/")+len("/blobs/"):]
		b, ok := r.blobs[d]
		if !ok || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if req.Method == http.MethodGet {
			_, _ = w.Write(b)
		}
	case strings.Contains(p, "/manifests/"):
		i := strings.LastIndex(p, "/manifests/")
		repo, ref := p[:i], p[i+len("/manifests/"):]
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
			r.manifests[repo+"@"+d] = m
			r.manifests[repo+"@"+ref] = m
			r.puts++
			w.Header().Set("Docker-Content-Digest", d)
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet, http.MethodHead:
			m, ok := r.manifests[repo+"@"+ref]
			if !ok {
				http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", m.mediaType)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(m.data).String())
			w.Header().Set("Content-Length", fmt.Sprint(len(m.data)))
			if req.Method == http.MethodGet {
				_, _ = w.Write(m.data)
			}
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	default:
		http.NotFound(w, req)
	}
}

// upload: POST starts one, PATCH appends, PUT appends and commits it
// under the digest it is asked for, if that is its digest.
func (r *testRegistry) upload(w http.ResponseWriter, req *http.Request, repo, id string) {
	switch req.Method {
	case http.MethodPost:
		r.next++
		id = fmt.Sprint(r.next)
		r.uploads[id] = &bytes.Buffer{}
		w.Header().Set("Location", repo+"/blobs/uploads/"+id)
		w.Header().Set("Range", "0-0")
		w.WriteHeader(http.StatusAccepted)
		return
	case http.MethodPatch, http.MethodPut:
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	buf, ok := r.uploads[id]
	if !ok {
		http.Error(w, `{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	if _, err := io.Copy(buf, req.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Method == http.MethodPatch {
		w.Header().Set("Location", repo+"/blobs/uploads/"+id)
		w.Header().Set("Range", fmt.Sprintf("0-%d", buf.Len()-1))
		w.WriteHeader(http.StatusAccepted)
		return
	}
	want := req.URL.Query().Get("digest")
	if got := digest.FromBytes(buf.Bytes()).String(); got != want {
		http.Error(w, `{"errors":[{"code":"DIGEST_INVALID"}]}`, http.StatusBadRequest)
		return
	}
	delete(r.uploads, id)
	r.blobs[want] = buf.Bytes()
	r.puts++
	w.Header().Set("Docker-Content-Digest", want)
	w.Header().Set("Location", repo+"/blobs/"+want)
	w.WriteHeader(http.StatusCreated)
}

// manifest is the manifest of repo@d, or nil.
func (r *testRegistry) manifest(repo, d string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manifests["/v2/"+repo+"@"+d].data
}

// hasBlob: the registry holds the blob d.
func (r *testRegistry) hasBlob(d string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.blobs[d]
	return ok
}

// putCount is how many blobs and manifests were PUT so far.
func (r *testRegistry) putCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.puts
}
