package audit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"unicode/utf8"
)

// MaxCodeText is how much of the code of a skills.run_code run a record
// keeps (its run.start and confirmation.request records; the others carry
// only its size and hash). Longer code is kept cut at this size, marked
// truncated, with the whole code's size and sha256 beside it: never
// silently.
const MaxCodeText = 64 << 10

// CodeInfo is the code a skills.run_code run ran: its language, size and
// sha256 always; Text is the code itself, up to MaxCodeText bytes, as
// UTF-8, or base64 (Encoding "base64") when it is not valid UTF-8.
type CodeInfo struct {
	Language  string `json:"language"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Text      string `json:"text,omitempty"`
	Encoding  string `json:"encoding,omitempty"` // "" (UTF-8) or "base64"
	Truncated bool   `json:"truncated,omitempty"`
}

// NewCodeInfo describes code; with withText it keeps the code too, cut at
// maxText bytes (at a character boundary) when longer.
func NewCodeInfo(language string, code []byte, withText bool, maxText int) *CodeInfo {
	sum := sha256.Sum256(code)
	c := &CodeInfo{Language: language, Size: int64(len(code)), SHA256: hex.EncodeToString(sum[:])}
	if !withText || len(code) == 0 {
		return c
	}
	kept := code
	if len(kept) > maxText {
		kept, c.Truncated = kept[:maxText], true
	}
	if !utf8.Valid(code) {
		c.Text, c.Encoding = base64.StdEncoding.EncodeToString(kept), "base64"
		return c
	}
	// Cut before a character the cap split.
	for len(kept) > 0 && !utf8.Valid(kept) {
		kept = kept[:len(kept)-1]
	}
	c.Text = string(kept)
	return c
}
