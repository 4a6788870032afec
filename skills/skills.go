// Package skills understands Agent Skills: it parses and validates SKILL.md
// files as the open standard defines them, indexes skills from several roots
// with precedence and content digests, renders the prompt blocks hosts give
// to models and a skill's body for activation (Render), and reads skill
// files without ever leaving the skill's directory. It also holds what the
// service builds a skill's lifecycle on: hooks (ParseHooks), a proposal's
// diff (ApplyDiff), the lock file that pins digests, and token estimates
// (EstimateTokens).
//
// Skill directories are untrusted input: anyone who can drop a folder into a
// root can try to make the daemon slow (hostile YAML), leak host files
// (symlinks, hardlinks, /proc links) or hang (FIFOs). So SKILL.md is
// size-capped and checked before YAML decoding, reads are resolved by the
// kernel with openat2(RESOLVE_BENEATH), and the registry keeps only metadata
// and SKILL.md bodies in memory. Validation follows the agentskills.io
// specification strictly for authors (LoadDir, 'skillbox skills validate')
// but indexing is lenient, so a cosmetic slip never hides a skill from
// users.
package skills

import (
	"errors"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Sentinel errors, wrapped with %w by every function in this package; each
// but ErrInvalid is of an errkind kind.
var (
	ErrNotFound   = errkind.New(errkind.NotFound, "not found") // no such skill or file
	ErrInvalid    = errors.New("invalid skill")                // SKILL.md fails parsing or validation
	ErrEscape     = errkind.New(errkind.InvalidParams, "path escapes the skill directory")
	ErrNotRegular = errkind.New(errkind.InvalidParams, "not a regular file")
	ErrTooLarge   = errkind.New(errkind.InvalidParams, "too large")
	ErrBadName    = errkind.New(errkind.InvalidParams, "invalid skill name")
	// ErrConflict: more than one skill directory claims a name, so none
	// of them gets it until the conflict is resolved.
	ErrConflict = errkind.New(errkind.Denied, "skill name conflict")
)

// Skill is one indexed skill. Properties keeps the frontmatter as written
// (keys as in the file, e.g. "allowed-tools"), with metadata values as strings.
type Skill struct {
	Name          string            `json:"name"`
	Description   string            `json:"description"`
	License       string            `json:"license,omitempty"`
	Compatibility string            `json:"compatibility,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// AllowedTools is nil when the field is absent, empty when declared empty.
	AllowedTools []string `json:"allowed-tools,omitempty"`
	// Extension fields (accepted with AllowExtensions, or leniently when indexing).
	DisableModelInvocation bool     `json:"disable-model-invocation,omitempty"`
	Tags                   []string `json:"tags,omitempty"`
	Requires               []string `json:"requires,omitempty"`
	// Hooks are the skill's hooks frontmatter, validated (nil: none).
	Hooks Hooks `json:"hooks,omitempty"`
	// HookErrors are the problems of a hooks field that does not validate
	// (kept when indexing leniently): such a skill's hooks cannot vouch
	// for anything, so tools.check denies while it is active.
	HookErrors []string `json:"-"`

	Properties map[string]any `json:"-"` // the frontmatter, for receipts and `skills show`
	Body       string         `json:"-"` // markdown after the frontmatter
	Dir        string         `json:"-"` // absolute path of the skill directory
	Location   string         `json:"-"` // absolute path of SKILL.md
	Digest     string         `json:"-"` // "sha256:<hex>" over the whole directory
	Warnings   []string       `json:"-"` // problems tolerated by lenient indexing
}

// UserInvocable reports whether a person may invoke the skill (a slash
// command, an MCP prompt): true unless its frontmatter sets
// user-invocable: false (background knowledge the model loads itself).
func (s *Skill) UserInvocable() bool {
	v, ok := s.Properties["user-invocable"].(bool)
	return !ok || v
}
