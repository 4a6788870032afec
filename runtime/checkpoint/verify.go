package checkpoint

import (
	"fmt"
	"sort"
)

// Expect is what a restore would use: the daemon's runsc and the sandbox
// the session would get now. Every field is compared, the empty ones too.
type Expect struct {
	RunscVersion string
	Platform     string
	Network      string
	ImageDigest  string
	SpecDigest   string
	SkillDigests map[string]string
}

// Fields a MismatchError names.
const (
	FieldRunscVersion = "runsc_version"
	FieldPlatform     = "platform"
	FieldNetwork      = "network"
	FieldImageDigest  = "image_digest"
	FieldSpecDigest   = "spec_digest"
	FieldSkill        = "skill" // SkillDigests; Skill names which
)

// DefaultFix is what a MismatchError tells the caller to do, unless the
// caller sets its own Fix.
const DefaultFix = "Start the session fresh (sessions.resume with fresh: true) to discard it."

// MismatchError is a sound checkpoint that the restore at hand cannot
// use: Have is the checkpoint's value, Want the one the restore would use.
// It wraps ErrMismatch.
type MismatchError struct {
	ID    string // the checkpoint
	Field string // a Field* constant
	Skill string // for FieldSkill: the skill's name
	Have  string // the checkpoint's value ("" for a skill it lacks)
	Want  string // the restore's value ("" for a skill it would not mount)
	// Fix is the last sentence: what to do (DefaultFix unless changed).
	Fix string
}

func (e *MismatchError) Error() string {
	var why string
	switch e.Field {
	case FieldRunscVersion:
		why = fmt.Sprintf("was made by runsc %s; this daemon runs %s: gVisor cannot restore it", orNone(e.Have), orNone(e.Want))
	case FieldPlatform:
		why = fmt.Sprintf("was made on gVisor's %s platform; this daemon uses %s: gVisor cannot restore it", orNone(e.Have), orNone(e.Want))
	case FieldNetwork:
		why = fmt.Sprintf("was made with network mode %s; the session's sandbox now gets %s, and its processes would keep the old network", orNone(e.Have), orNone(e.Want))
	case FieldImageDigest:
		why = fmt.Sprintf("was made on image %s; the image is now %s, and its processes would run on files they did not start from (runsc does not check this)", orNone(e.Have), orNone(e.Want))
	case FieldSpecDigest:
		why = fmt.Sprintf("was made with sandbox spec %s; the session's sandbox would now get %s: runsc restores only onto the same spec", orNone(e.Have), orNone(e.Want))
	case FieldSkill:
		switch {
		case e.Have == "":
			why = fmt.Sprintf("had no skill %q mounted; the session now mounts it (%s)", e.Skill, e.Want)
		case e.Want == "":
			why = fmt.Sprintf("had skill %q mounted (%s); the session no longer mounts it", e.Skill, e.Have)
		default:
			why = fmt.Sprintf("was made with skill %q at %s; it is now %s", e.Skill, e.Have, e.Want)
		}
	default:
		why = fmt.Sprintf("has %s %s; the restore would use %s", e.Field, orNone(e.Have), orNone(e.Want))
	}
	msg := fmt.Sprintf("checkpoint %s %s.", e.ID, why)
	if e.Fix != "" {
		msg += " " + e.Fix
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

func orNone(s string) string {
	if s == "" {
		return "(none recorded)"
	}
	return s
}

// Verify compares the checkpoint with what the restore would use and
// returns the first difference as a *MismatchError, in the order runsc
// version, platform, network, image, spec, skills by name. Call it after
// Load, before runsc restore: runsc itself checks only its version.
func (c *Checkpoint) Verify(want Expect) error {
	return c.m.Verify(want)
}

// Verify is Checkpoint.Verify on a manifest.
func (m *Manifest) Verify(want Expect) error {
	mismatch := func(field, have, w string) error {
		return &MismatchError{ID: m.ID, Field: field, Have: have, Want: w, Fix: DefaultFix}
	}
	for _, f := range []struct{ field, have, want string }{
		{FieldRunscVersion, m.RunscVersion, want.RunscVersion},
		{FieldPlatform, m.Platform, want.Platform},
		{FieldNetwork, m.Network, want.Network},
		{FieldImageDigest, m.ImageDigest, want.ImageDigest},
		{FieldSpecDigest, m.SpecDigest, want.SpecDigest},
	} {
		if f.have != f.want {
			return mismatch(f.field, f.have, f.want)
		}
	}
	names := map[string]bool{}
	for n := range m.SkillDigests {
		names[n] = true
	}
	for n := range want.SkillDigests {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		if have, w := m.SkillDigests[n], want.SkillDigests[n]; have != w {
			e := mismatch(FieldSkill, have, w).(*MismatchError)
			e.Skill = n
			return e
		}
	}
	return nil
}
