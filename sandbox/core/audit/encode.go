package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// hashKey starts the hash member that ends every line.
const hashKey = `,"hash":"`

// suffixLen is the length of `,"hash":"<64 hex>"}`.
const suffixLen = len(hashKey) + 64 + 2

// oneLine makes sure b cannot break the one-record-per-line framing, whatever
// the JSON encoder does: a raw U+2028 or U+2029 (which some readers treat as a
// line break) is escaped — in valid compact JSON such bytes can only be inside
// a string, where the escape means the same — and a raw control character is
// an error, as the encoder never emits one.
func oneLine(b []byte) ([]byte, error) {
	var out []byte
	last := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < 0x20 {
			return nil, fmt.Errorf("audit: encoder produced a raw control character 0x%02x at byte %d", c, i)
		}
		if c == 0xe2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xa8 || b[i+2] == 0xa9) {
			if out == nil {
				out = make([]byte, 0, len(b)+12)
			}
			out = append(out, b[last:i]...)
			if b[i+2] == 0xa8 {
				out = append(out, `\u2028`...)
			} else {
				out = append(out, `\u2029`...)
			}
			i += 2
			last = i + 1
		}
	}
	if out == nil {
		return b, nil
	}
	return append(out, b[last:]...), nil
}

// errNoHash means a line does not end with the hash member.
var errNoHash = errors.New(`line does not end with ,"hash":"<64 hex digits>"}`)

// lineHash checks the framing of line (without its "\n") and returns the hash
// it claims and the hash of its canonical form.
func lineHash(line []byte) (claimed, actual string, err error) {
	n := len(line)
	if n < suffixLen+2 || line[0] != '{' || line[n-1] != '}' || line[n-2] != '"' ||
		!bytes.Equal(line[n-suffixLen:n-suffixLen+len(hashKey)], []byte(hashKey)) {
		return "", "", errNoHash
	}
	claimedB := line[n-66 : n-2]
	for _, c := range claimedB {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", "", errNoHash
		}
	}
	h := sha256.New()
	h.Write(line[:n-suffixLen])
	h.Write([]byte{'}'})
	var sum [32]byte
	return string(claimedB), hex.EncodeToString(h.Sum(sum[:0])), nil
}

// parseLine checks line's own hash and decodes it. A line whose bytes do not
// match their hash returns the decoded record (if it decodes) and an error
// wrapping errHashMismatch.
func parseLine(line []byte) (*Record, string, error) {
	claimed, actual, err := lineHash(line)
	if err != nil {
		return nil, "", err
	}
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, "", fmt.Errorf("not a JSON record: %v", err)
	}
	if claimed != actual || r.Hash != claimed {
		return &r, actual, errHashMismatch
	}
	return &r, actual, nil
}

var errHashMismatch = errors.New("content does not match its hash")

// chainRec is the part of a record the chain checks need. Decoding only
// these members (the JSON is still fully validated) makes Verify several
// times faster than decoding whole Records.
type chainRec struct {
	Seq        uint64      `json:"seq"`
	Time       time.Time   `json:"time"`
	Replica    string      `json:"replica"`
	Event      string      `json:"event"`
	Log        *LogInfo    `json:"log"`
	Checkpoint *Checkpoint `json:"checkpoint"`
	PrevHash   string      `json:"prev_hash"`
	Hash       string      `json:"hash"`
}

// parseChain is parseLine for Verify.
func parseChain(line []byte) (*chainRec, string, error) {
	claimed, actual, err := lineHash(line)
	if err != nil {
		return nil, "", err
	}
	var r chainRec
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, "", fmt.Errorf("not a JSON record: %v", err)
	}
	if claimed != actual || r.Hash != claimed {
		return &r, actual, errHashMismatch
	}
	return &r, actual, nil
}
