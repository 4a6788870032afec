package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecDigest is the digest of a sandbox's spec without what may differ
// when the sandbox is restored from a checkpoint (the rootfs and bind
// mount sources, which are host paths of the new run; the cgroup path and
// resources), followed by extra (say, the digest of a binary a mount
// brings in). gVisor checks most of the rest itself at a restore; this
// digest lets skillbox refuse a checkpoint before runsc sees it, and say
// why.
func SpecDigest(s *specs.Spec, extra ...string) (string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode spec: %w", err)
	}
	var c specs.Spec
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("decode spec: %w", err)
	}
	if c.Root != nil {
		c.Root.Path = ""
	}
	for i := range c.Mounts {
		if c.Mounts[i].Type == "bind" {
			c.Mounts[i].Source = ""
		}
	}
	if c.Linux != nil {
		c.Linux.Resources, c.Linux.CgroupsPath = nil, ""
	}
	norm, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("encode spec: %w", err)
	}
	h := sha256.New()
	h.Write(norm)
	for _, e := range extra {
		h.Write([]byte{0})
		h.Write([]byte(e))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
