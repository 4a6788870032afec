package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Checkpoint is a signed statement "log LogID had record Seq with hash Hash
// at Time". See the package comment for the signed message.
type Checkpoint struct {
	LogID string    `json:"log_id"`
	Seq   uint64    `json:"seq"`
	Hash  string    `json:"hash"`
	Time  time.Time `json:"time"`
	KeyID string    `json:"key_id"`
	Sig   string    `json:"sig"`
}

// checkpointDomain separates checkpoint signatures from anything else the
// same key might sign.
const checkpointDomain = "skillbox-audit-checkpoint-v1\n"

// message is the exact byte string that is signed.
func (c *Checkpoint) message() []byte {
	return []byte(checkpointDomain + c.LogID + "\n" + strconv.FormatUint(c.Seq, 10) + "\n" +
		c.Hash + "\n" + strconv.FormatInt(c.Time.UnixNano(), 10) + "\n")
}

// sign fills KeyID and Sig.
func (c *Checkpoint) sign(key ed25519.PrivateKey) {
	c.KeyID = KeyID(key.Public().(ed25519.PublicKey))
	c.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, c.message()))
}

// Verify checks the checkpoint's signature against pub.
func (c *Checkpoint) Verify(pub ed25519.PublicKey) error {
	if id := KeyID(pub); c.KeyID != id {
		return fmt.Errorf("signed by key %s, not by the given key %s", c.KeyID, id)
	}
	sig, err := base64.StdEncoding.DecodeString(c.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("signature is not a base64 Ed25519 signature")
	}
	if !ed25519.Verify(pub, c.message(), sig) {
		return errors.New("signature does not match the checkpoint")
	}
	return nil
}

// KeyID names a public key: the first 16 hex digits of SHA-256 of its 32 raw
// bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey makes a new Ed25519 signing key and writes it to path (PEM
// PKCS #8, mode 0600) and its public half to path+".pub" (PEM PKIX, 0644).
// It refuses to overwrite either file. The private key stays with the daemon;
// the public key goes to whoever verifies.
func GenerateKey(path string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(path)
		return nil, err
	}
	return pub, nil
}

func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// LoadPrivateKey reads an Ed25519 private key written by GenerateKey (or
// `openssl genpkey -algorithm ed25519`).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM \"PRIVATE KEY\" (make one with 'skillbox audit keygen FILE')", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}

// LoadPublicKey reads an Ed25519 public key (PEM "PUBLIC KEY"); given a
// private key file it uses its public half.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not a PEM key file", path)
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%s: not an Ed25519 key", path)
		}
		return pub, nil
	case "PRIVATE KEY":
		priv, err := LoadPrivateKey(path)
		if err != nil {
			return nil, err
		}
		return priv.Public().(ed25519.PublicKey), nil
	}
	return nil, fmt.Errorf("%s: PEM block %q is not a key", path, blk.Type)
}

// ReadCheckpoints reads a checkpoints file: one Checkpoint JSON object per
// line. An incomplete last line (a write in progress) is ignored.
func ReadCheckpoints(path string) ([]Checkpoint, error) {
	var out []Checkpoint
	lineNo := 0
	_, err := forEachLine(path, 0, func(line []byte, _ int64, complete bool) error {
		lineNo++
		if !complete || len(line) == 0 {
			return nil
		}
		var c Checkpoint
		if err := json.Unmarshal(line, &c); err != nil {
			return fmt.Errorf("%s:%d: not a checkpoint: %v", path, lineNo, err)
		}
		out = append(out, c)
		return nil
	})
	return out, err
}
