package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// Skills as resources, following the MCP skills extension (SEP-2640,
// io.modelcontextprotocol/skills) as published in its final text
// (modelcontextprotocol/ext-skills, specification/stable/skills.mdx, for
// base protocol 2026-07-28): every file of a skill is the resource
// skill://<name>/<path>, skills/list and skills/get return entries with the
// verbatim frontmatter and every file's sha256 digest and size. The earlier
// draft's well-known skill://index.json is served too, holding the same
// entries, for clients written against it. Reading a resource never
// activates a skill: reads go through the service's path-confined read in a
// session of their own.
const (
	SkillsExtension = "io.modelcontextprotocol/skills"
	IndexURI        = "skill://index.json"
	skillTemplate   = "skill://{skill}/{+path}"
	// MaxSkillBytes is the extension's per-skill size limit; no single
	// resource read returns more.
	MaxSkillBytes = 16 << 20
)

// SkillEntry is the extension's Skill entry.
type SkillEntry struct {
	URI         string          `json:"uri"`
	Frontmatter map[string]any  `json:"frontmatter"`
	Resources   []SkillResource `json:"resources"`
}

// SkillResource is one file of a SkillEntry.
type SkillResource struct {
	URI    string `json:"uri"`
	Digest string `json:"digest"` // sha256:<hex>
	Size   int64  `json:"size"`
}

type listSkillsParams struct {
	mcpsdk.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

type listSkillsResult struct {
	mcpsdk.ResultBase
	ResultType string       `json:"resultType"`
	Skills     []SkillEntry `json:"skills"`
	TTLMs      int          `json:"ttlMs"`
	CacheScope string       `json:"cacheScope"`
}

type getSkillParams struct {
	mcpsdk.ParamsBase
	URI string `json:"uri"`
}

type getSkillResult struct {
	mcpsdk.ResultBase
	ResultType string     `json:"resultType"`
	Skill      SkillEntry `json:"skill"`
	TTLMs      int        `json:"ttlMs"`
	CacheScope string     `json:"cacheScope"`
}

// SkillURI is the resource URI of file rel of skill name.
func SkillURI(name, rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "skill://" + name + "/" + strings.Join(parts, "/")
}

// parseSkillURI splits skill://<name>/<path>.
func parseSkillURI(uri string) (name, rel string, err error) {
	rest, ok := strings.CutPrefix(uri, "skill://")
	if !ok {
		return "", "", fmt.Errorf("%s is not a skill:// URI", uri)
	}
	name, rel, ok = strings.Cut(rest, "/")
	if !ok || name == "" || rel == "" {
		return "", "", fmt.Errorf("%s names no file: use skill://<skill>/<path>, like skill://%s/SKILL.md", uri, name)
	}
	if rel, err = url.PathUnescape(rel); err != nil {
		return "", "", fmt.Errorf("%s: %w", uri, err)
	}
	return name, rel, nil
}

func (c *Conn) addSkillsExtension() error {
	c.mcp.AddResource(&mcpsdk.Resource{
		URI:         IndexURI,
		Name:        "index.json",
		Title:       "Skill index",
		Description: "Every skill with its frontmatter and each file's sha256 digest and size (the skills extension's entries)",
		MIMEType:    "application/json",
	}, c.readIndex)
	c.mcp.AddResourceTemplate(&mcpsdk.ResourceTemplate{
		URITemplate: skillTemplate,
		Name:        "skill-file",
		Title:       "Skill file",
		Description: "A file of a skill, by path relative to the skill directory (skill://<skill>/SKILL.md, skill://<skill>/references/…)",
	}, c.readSkillResource)
	if err := mcpsdk.AddReceivingCustomMethod(c.mcp, "skills/list", func(ctx context.Context, _ *mcpsdk.ServerSession, _ *listSkillsParams) (*listSkillsResult, error) {
		entries, err := c.entries(ctx)
		if err != nil {
			return nil, err
		}
		return &listSkillsResult{ResultType: "complete", Skills: entries, CacheScope: "private"}, nil
	}); err != nil {
		return err
	}
	return mcpsdk.AddReceivingCustomMethod(c.mcp, "skills/get", func(ctx context.Context, _ *mcpsdk.ServerSession, p *getSkillParams) (*getSkillResult, error) {
		name, rel, err := parseSkillURI(p.URI)
		if err == nil && rel != "SKILL.md" {
			err = fmt.Errorf("%s is not the URI of a SKILL.md", p.URI)
		}
		var info *api.SkillInfo
		if err == nil {
			if info = c.skillInfo(name); info == nil {
				err = fmt.Errorf("no skill is served at %s", p.URI)
			}
		}
		if err != nil {
			return nil, &sdk.Error{Code: sdk.CodeInvalidParams, Message: err.Error()}
		}
		e, err := c.entry(*info)
		if err != nil {
			return nil, err
		}
		return &getSkillResult{ResultType: "complete", Skill: e, CacheScope: "private"}, nil
	})
}

// syncSkillResources lists each skill's SKILL.md as a resource (other
// files are reached through the template). Called with c.mu held.
func (c *Conn) syncSkillResources(list []api.SkillInfo) {
	var uris []string
	for _, s := range list {
		uri := SkillURI(s.Name, "SKILL.md")
		uris = append(uris, uri)
		c.mcp.AddResource(&mcpsdk.Resource{URI: uri, Name: s.Name, Description: s.Description, MIMEType: "text/markdown"}, c.readSkillResource)
	}
	if gone := missingFrom(uris, c.skillDocs); len(gone) > 0 {
		c.mcp.RemoveResources(gone...)
	}
	c.skillDocs = uris
}

func (c *Conn) skillInfo(name string) *api.SkillInfo {
	for _, s := range c.skillsSnapshot() {
		if s.Name == name {
			return &s
		}
	}
	return nil
}

func (c *Conn) entries(ctx context.Context) ([]SkillEntry, error) {
	if err := c.refresh(ctx); err != nil {
		return nil, toolError(err)
	}
	list := c.skillsSnapshot()
	out := make([]SkillEntry, 0, len(list))
	for _, s := range list {
		e, err := c.entry(s)
		if err != nil {
			c.s.log.Warn("skill left out of the skills index", "skill", s.Name, "error", err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// entry builds a skill's entry from its directory (cached by digest).
func (c *Conn) entry(s api.SkillInfo) (SkillEntry, error) {
	m, err := c.s.manifests.get(s)
	if err != nil {
		return SkillEntry{}, err
	}
	e := SkillEntry{URI: SkillURI(s.Name, "SKILL.md"), Frontmatter: m.frontmatter, Resources: make([]SkillResource, 0, len(m.files))}
	for _, f := range m.files {
		e.Resources = append(e.Resources, SkillResource{URI: SkillURI(s.Name, f.Path), Digest: "sha256:" + f.SHA256, Size: f.Size})
	}
	return e, nil
}

func (c *Conn) readIndex(ctx context.Context, _ *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	entries, err := c.entries(ctx)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(map[string]any{"skills": entries}, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{{URI: IndexURI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// readSkillResource reads skill://<name>/<path> through the service: the
// skill is loaded into the connection's resource session (so policy and
// audit see the read) and the file read with the confined read.
func (c *Conn) readSkillResource(ctx context.Context, req *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	uri := req.Params.URI
	name, rel, err := parseSkillURI(uri)
	if err != nil {
		return nil, &sdk.Error{Code: sdk.CodeInvalidParams, Message: err.Error()}
	}
	c.resMu.Lock()
	defer c.resMu.Unlock()
	if c.resSession == "" {
		sess, err := c.s.svc.CreateSession(ctx, c.caller, api.CreateSessionParams{})
		if err != nil {
			return nil, toolError(err)
		}
		c.resSession = sess.SessionID
	}
	if _, err := c.s.svc.LoadSkills(ctx, c.caller, api.LoadParams{SessionID: c.resSession, Names: []string{name}, Mode: api.LoadReplace}); err != nil {
		if api.KindOf(err) == api.KindNotFound {
			return nil, mcpsdk.ResourceNotFoundError(uri)
		}
		return nil, toolError(err)
	}
	data, err := c.readWhole(ctx, c.resSession, name, rel, MaxSkillBytes)
	if err != nil {
		if api.KindOf(err) == api.KindNotFound {
			return nil, mcpsdk.ResourceNotFoundError(uri)
		}
		return nil, &sdk.Error{Code: sdk.CodeInvalidParams, Message: toolError(err).Error()}
	}
	rc := &mcpsdk.ResourceContents{URI: uri, MIMEType: mimeType(rel)}
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		rc.Text = string(data)
	} else {
		rc.Blob = data
	}
	return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{rc}}, nil
}

func mimeType(rel string) string {
	switch path.Ext(rel) {
	case ".md":
		return "text/markdown"
	case ".py":
		return "text/x-python"
	case ".sh":
		return "text/x-shellscript"
	}
	if t := mime.TypeByExtension(path.Ext(rel)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// readWhole reads a whole file of a loaded skill through the service, in
// the pieces its read cap allows, and checks the bytes against the file's
// sha256 (a file changed mid-read is an error, not a mix of versions).
func (c *Conn) readWhole(ctx context.Context, session, skill, rel string, limit int64) ([]byte, error) {
	var (
		buf  []byte
		want string
	)
	for {
		res, err := c.s.svc.ReadSkillFile(ctx, c.caller, api.ReadParams{SessionID: session, Skill: skill, Path: rel, Offset: int64(len(buf))})
		if err != nil {
			return nil, err
		}
		if res.Size > limit {
			return nil, fmt.Errorf("%s/%s: %w: %d bytes, more than the %d a resource may hold; read it in pieces with skills_read", skill, rel, api.ErrLimitExceeded, res.Size, limit)
		}
		if want == "" {
			want = res.SHA256
		} else if res.SHA256 != want {
			return nil, fmt.Errorf("%s/%s: %w: the file changed while it was read; read it again", skill, rel, api.ErrUnavailable)
		}
		chunk := []byte(res.Content)
		if res.Encoding == "base64" {
			if chunk, err = base64.StdEncoding.DecodeString(res.Content); err != nil {
				return nil, fmt.Errorf("%s/%s: %w: %v", skill, rel, api.ErrInternal, err)
			}
		}
		buf = append(buf, chunk...)
		if !res.Truncated {
			break
		}
		if len(chunk) == 0 {
			return nil, fmt.Errorf("%s/%s: %w: the read made no progress", skill, rel, api.ErrInternal)
		}
	}
	sum := sha256.Sum256(buf)
	if hex.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("%s/%s: %w: the file changed while it was read; read it again", skill, rel, api.ErrUnavailable)
	}
	return buf, nil
}

// manifestCache keeps each skill's entry material (frontmatter, files with
// digests) for the skill digest it was computed at.
type manifestCache struct {
	mu     sync.Mutex
	byName map[string]*skillManifest
}

type skillManifest struct {
	digest      string
	frontmatter map[string]any
	files       []skills.ManifestEntry
}

func newManifestCache() *manifestCache {
	return &manifestCache{byName: map[string]*skillManifest{}}
}

// get returns the manifest of s, computing it from the skill directory
// (confined: skills.Manifest lists only what a confined read serves) when
// the skill's digest changed.
func (mc *manifestCache) get(s api.SkillInfo) (*skillManifest, error) {
	mc.mu.Lock()
	m := mc.byName[s.Name]
	mc.mu.Unlock()
	if m != nil && m.digest == s.Digest {
		return m, nil
	}
	dir := filepath.Dir(s.Location)
	files, err := skills.Manifest(dir)
	if err != nil {
		return nil, err
	}
	f, err := skills.OpenInRoot(dir, "SKILL.md")
	if err != nil {
		return nil, err
	}
	data, err := readCapped(f, skills.MaxFileSize)
	f.Close()
	if err != nil {
		return nil, err
	}
	doc, err := skills.Parse(data)
	if err != nil {
		return nil, err
	}
	m = &skillManifest{digest: s.Digest, frontmatter: doc.Frontmatter, files: files}
	mc.mu.Lock()
	mc.byName[s.Name] = m
	mc.mu.Unlock()
	return m, nil
}

func readCapped(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, errors.New(f.Name() + ": too large")
	}
	data := make([]byte, st.Size())
	_, err = f.ReadAt(data, 0)
	return data, err
}
