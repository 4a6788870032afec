package agentauth

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// The canonical forms of the two identities. Every part is drawn from
// lowercase letters, digits, '-' and '.', so a canonical identity needs no
// escaping and has one spelling only: the parsers refuse anything else
// rather than normalize it.
const (
	podPrefix    = "skillbox://pod/"
	daemonPrefix = "skillbox://daemon/"

	maxLabel     = 63  // a DNS-1123 label: a namespace
	maxSubdomain = 253 // a DNS-1123 subdomain: a pod name, a daemon instance
	uidLen       = 36  // a Kubernetes UID: a UUID, 8-4-4-4-12 lowercase hex

	maxPodIdentity    = len(podPrefix) + maxLabel + 1 + maxSubdomain + 1 + uidLen
	maxDaemonIdentity = len(daemonPrefix) + maxSubdomain
)

// PodIdentity names one incarnation of one sandbox pod. The UID is the one
// the API server gave the pod, which a pod recreated under the same name
// does not share.
type PodIdentity struct {
	Namespace string // a DNS-1123 label
	Name      string // a DNS-1123 subdomain
	UID       string // a UUID in lowercase, as Kubernetes writes pod UIDs
}

// String returns the canonical URI, skillbox://pod/<namespace>/<name>/<uid>.
func (p PodIdentity) String() string {
	return podPrefix + p.Namespace + "/" + p.Name + "/" + p.UID
}

// Validate says which part of p, if any, is not in canonical form.
func (p PodIdentity) Validate() error {
	if err := checkLabel(p.Namespace); err != nil {
		return fmt.Errorf("pod namespace: %w", err)
	}
	if err := checkSubdomain(p.Name); err != nil {
		return fmt.Errorf("pod name: %w", err)
	}
	if err := checkUID(p.UID); err != nil {
		return fmt.Errorf("pod uid: %w", err)
	}
	return nil
}

// describe is p as an operator reads it in an error.
func (p PodIdentity) describe() string {
	return p.Namespace + "/" + p.Name + " uid " + p.UID
}

func (p PodIdentity) uri() *url.URL {
	return &url.URL{Scheme: "skillbox", Host: "pod", Path: "/" + p.Namespace + "/" + p.Name + "/" + p.UID}
}

// ParsePodIdentity parses the canonical URI of a pod identity and refuses
// anything else: another scheme or host, percent-encoding, a query or
// fragment, a missing, empty or extra path segment, upper case, a namespace
// or name that Kubernetes would refuse, a UID that is not a lowercase UUID.
func ParsePodIdentity(s string) (PodIdentity, error) {
	if len(s) > maxPodIdentity {
		return PodIdentity{}, fmt.Errorf("pod identity is %d bytes, at most %d", len(s), maxPodIdentity)
	}
	rest, ok := strings.CutPrefix(s, podPrefix)
	if !ok {
		return PodIdentity{}, fmt.Errorf("pod identity %q: want %s<namespace>/<name>/<uid>", s, podPrefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return PodIdentity{}, fmt.Errorf("pod identity %q: want exactly three segments <namespace>/<name>/<uid> after %s, got %d", s, podPrefix, len(parts))
	}
	id := PodIdentity{Namespace: parts[0], Name: parts[1], UID: parts[2]}
	if err := id.Validate(); err != nil {
		return PodIdentity{}, fmt.Errorf("pod identity %q: %w", s, err)
	}
	return id, nil
}

// DaemonIdentity names one replica of the skillbox daemon, by the name it
// runs under (its pod name in a cluster, a host name elsewhere).
type DaemonIdentity struct {
	Instance string // a DNS-1123 subdomain
}

// String returns the canonical URI, skillbox://daemon/<instance>.
func (d DaemonIdentity) String() string { return daemonPrefix + d.Instance }

// Validate says whether d's instance is in canonical form.
func (d DaemonIdentity) Validate() error {
	if err := checkSubdomain(d.Instance); err != nil {
		return fmt.Errorf("daemon instance: %w", err)
	}
	return nil
}

func (d DaemonIdentity) uri() *url.URL {
	return &url.URL{Scheme: "skillbox", Host: "daemon", Path: "/" + d.Instance}
}

// ParseDaemonIdentity parses the canonical URI of a daemon identity and
// refuses anything else, as ParsePodIdentity does.
func ParseDaemonIdentity(s string) (DaemonIdentity, error) {
	if len(s) > maxDaemonIdentity {
		return DaemonIdentity{}, fmt.Errorf("daemon identity is %d bytes, at most %d", len(s), maxDaemonIdentity)
	}
	rest, ok := strings.CutPrefix(s, daemonPrefix)
	if !ok {
		return DaemonIdentity{}, fmt.Errorf("daemon identity %q: want %s<instance>", s, daemonPrefix)
	}
	id := DaemonIdentity{Instance: rest}
	if err := id.Validate(); err != nil {
		return DaemonIdentity{}, fmt.Errorf("daemon identity %q: %w", s, err)
	}
	return id, nil
}

var (
	errLabel = errors.New("must be a DNS-1123 label: 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit")
	errSub   = errors.New("must be a DNS-1123 subdomain: at most 253 characters, dot-separated labels of lowercase letters, digits or '-', each starting and ending with a letter or digit")
	errUID   = errors.New("must be a Kubernetes UID: a lowercase UUID such as 3f1c2a9e-7b4d-4e8a-9c0f-1a2b3c4d5e6f")
)

// checkLabel is Kubernetes' IsDNS1123Label.
func checkLabel(s string) error {
	if len(s) > maxLabel || !labelOK(s) {
		return fmt.Errorf("%q %w", s, errLabel)
	}
	return nil
}

// checkSubdomain is Kubernetes' IsDNS1123Subdomain, which bounds the whole
// name but not each label.
func checkSubdomain(s string) error {
	if len(s) == 0 || len(s) > maxSubdomain {
		return fmt.Errorf("%q %w", s, errSub)
	}
	for label := range strings.SplitSeq(s, ".") {
		if !labelOK(label) {
			return fmt.Errorf("%q %w", s, errSub)
		}
	}
	return nil
}

// labelOK reports whether s is [a-z0-9]([-a-z0-9]*[a-z0-9])?, of any length.
func labelOK(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// checkUID accepts the canonical text form of a UUID in lowercase, the form
// the API server gives every pod.
func checkUID(s string) error {
	if len(s) != uidLen {
		return fmt.Errorf("%q %w", s, errUID)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return fmt.Errorf("%q %w", s, errUID)
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return fmt.Errorf("%q %w", s, errUID)
			}
		}
	}
	return nil
}
