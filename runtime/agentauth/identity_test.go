package agentauth

import (
	"strings"
	"testing"
)

const (
	uidA = "3f1c2a9e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
	uidB = "0b7e5d41-2c3a-4f6e-8d9c-aa11bb22cc33"
)

func TestParsePodIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     PodIdentity // zero: refused
	}{
		{name: "canonical", in: "skillbox://pod/skillbox-ns/pod-a/" + uidA, want: PodIdentity{"skillbox-ns", "pod-a", uidA}},
		{name: "dotted name", in: "skillbox://pod/ns/warm.python-3/" + uidA, want: PodIdentity{"ns", "warm.python-3", uidA}},
		{name: "one-letter parts", in: "skillbox://pod/a/b/" + uidA, want: PodIdentity{"a", "b", uidA}},
		{name: "longest namespace", in: "skillbox://pod/" + strings.Repeat("n", 63) + "/p/" + uidA, want: PodIdentity{strings.Repeat("n", 63), "p", uidA}},
		{name: "longest name", in: "skillbox://pod/ns/" + strings.Repeat("p", 253) + "/" + uidA, want: PodIdentity{"ns", strings.Repeat("p", 253), uidA}},

		{name: "empty", in: ""},
		{name: "daemon identity", in: "skillbox://daemon/skillbox-0"},
		{name: "other scheme", in: "spiffe://pod/ns/pod-a/" + uidA},
		{name: "upper-case scheme", in: "SKILLBOX://pod/ns/pod-a/" + uidA},
		{name: "upper-case host", in: "skillbox://POD/ns/pod-a/" + uidA},
		{name: "userinfo", in: "skillbox://x@pod/ns/pod-a/" + uidA},
		{name: "port", in: "skillbox://pod:1/ns/pod-a/" + uidA},
		{name: "missing uid", in: "skillbox://pod/ns/pod-a"},
		{name: "empty uid", in: "skillbox://pod/ns/pod-a/"},
		{name: "empty name", in: "skillbox://pod/ns//" + uidA},
		{name: "empty namespace", in: "skillbox://pod//pod-a/" + uidA},
		{name: "extra segment", in: "skillbox://pod/ns/pod-a/" + uidA + "/x"},
		{name: "trailing slash", in: "skillbox://pod/ns/pod-a/" + uidA + "/"},
		{name: "double slash", in: "skillbox://pod//ns/pod-a/" + uidA},
		{name: "percent-encoded letter", in: "skillbox://pod/ns/pod-%61/" + uidA},
		{name: "percent-encoded slash", in: "skillbox://pod/ns/pod%2fb/" + uidA},
		{name: "query", in: "skillbox://pod/ns/pod-a/" + uidA + "?x=1"},
		{name: "empty query", in: "skillbox://pod/ns/pod-a/" + uidA + "?"},
		{name: "fragment", in: "skillbox://pod/ns/pod-a/" + uidA + "#x"},
		{name: "dot segment", in: "skillbox://pod/ns/../" + uidA},
		{name: "upper-case name", in: "skillbox://pod/ns/Pod-a/" + uidA},
		{name: "name starts with dash", in: "skillbox://pod/ns/-pod/" + uidA},
		{name: "name ends with dot", in: "skillbox://pod/ns/pod./" + uidA},
		{name: "name with empty label", in: "skillbox://pod/ns/a..b/" + uidA},
		{name: "name with underscore", in: "skillbox://pod/ns/pod_a/" + uidA},
		{name: "namespace with dot", in: "skillbox://pod/n.s/pod-a/" + uidA},
		{name: "namespace too long", in: "skillbox://pod/" + strings.Repeat("n", 64) + "/p/" + uidA},
		{name: "name too long", in: "skillbox://pod/ns/" + strings.Repeat("p", 254) + "/" + uidA},
		{name: "upper-case uid", in: "skillbox://pod/ns/pod-a/" + strings.ToUpper(uidA)},
		{name: "uid without dashes", in: "skillbox://pod/ns/pod-a/" + strings.ReplaceAll(uidA, "-", "")},
		{name: "uid in braces", in: "skillbox://pod/ns/pod-a/{" + uidA + "}"},
		{name: "uid too short", in: "skillbox://pod/ns/pod-a/" + uidA[:35]},
		{name: "uid dash misplaced", in: "skillbox://pod/ns/pod-a/3f1c2a9e7-b4d-4e8a-9c0f-1a2b3c4d5e6f"},
		{name: "space", in: "skillbox://pod/ns/pod a/" + uidA},
		{name: "trailing newline", in: "skillbox://pod/ns/pod-a/" + uidA + "\n"},
		{name: "NUL", in: "skillbox://pod/ns/pod-a\x00/" + uidA},
		{name: "huge", in: "skillbox://pod/" + strings.Repeat("a", 1<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePodIdentity(tc.in)
			if tc.want == (PodIdentity{}) {
				if err == nil {
					t.Fatalf("ParsePodIdentity(%q) = %+v, want an error", tc.in, got)
				}
				if len(err.Error()) > 1024 {
					t.Errorf("error is %d bytes; it must not echo a huge input", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePodIdentity(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParsePodIdentity(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if got.String() != tc.in || got.uri().String() != tc.in {
				t.Fatalf("String() = %q, uri() = %q, want both %q", got.String(), got.uri(), tc.in)
			}
		})
	}
}

func TestParseDaemonIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // instance; "" refused
	}{
		{name: "replica", in: "skillbox://daemon/skillbox-0", want: "skillbox-0"},
		{name: "host name", in: "skillbox://daemon/node-1.example.internal", want: "node-1.example.internal"},
		{name: "empty instance", in: "skillbox://daemon/"},
		{name: "no slash", in: "skillbox://daemon"},
		{name: "extra segment", in: "skillbox://daemon/a/b"},
		{name: "pod identity", in: "skillbox://pod/ns/pod-a/" + uidA},
		{name: "percent-encoding", in: "skillbox://daemon/skillbox%2d0"},
		{name: "upper case", in: "skillbox://daemon/Skillbox-0"},
		{name: "query", in: "skillbox://daemon/skillbox-0?"},
		{name: "too long", in: "skillbox://daemon/" + strings.Repeat("d", 254)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDaemonIdentity(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseDaemonIdentity(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDaemonIdentity(%q): %v", tc.in, err)
			}
			if got.Instance != tc.want || got.String() != tc.in || got.uri().String() != tc.in {
				t.Fatalf("ParseDaemonIdentity(%q) = %+v (String %q, uri %q)", tc.in, got, got.String(), got.uri())
			}
		})
	}
}

// An identity the parser accepts is canonical: it prints back to exactly the
// input, through String and through the URI written into a certificate.
func FuzzParsePodIdentity(f *testing.F) {
	for _, s := range []string{
		"skillbox://pod/skillbox-ns/pod-a/" + uidA,
		"skillbox://pod/ns/a.b/" + uidB,
		"skillbox://pod/ns/pod-%61/" + uidA,
		"skillbox://pod/ns/pod-a/" + uidA + "/",
		"skillbox://daemon/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParsePodIdentity(s)
		if err != nil {
			return
		}
		if id.String() != s || id.uri().String() != s {
			t.Fatalf("ParsePodIdentity(%q) = %+v, which prints as %q / %q", s, id, id.String(), id.uri())
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("ParsePodIdentity(%q) accepted %+v, which Validate refuses: %v", s, id, err)
		}
	})
}

func FuzzParseDaemonIdentity(f *testing.F) {
	for _, s := range []string{
		"skillbox://daemon/skillbox-0",
		"skillbox://daemon/a.b.c",
		"skillbox://daemon/a/b",
		"skillbox://pod/ns/pod-a/" + uidA,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseDaemonIdentity(s)
		if err != nil {
			return
		}
		if id.String() != s || id.uri().String() != s {
			t.Fatalf("ParseDaemonIdentity(%q) = %+v, which prints as %q / %q", s, id, id.String(), id.uri())
		}
	})
}
