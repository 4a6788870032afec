package api

import (
	"strings"
	"testing"
)

func TestCheckReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"skillbox-0", true},
		{"host.example.com", true},
		{"skillbox-7d9f8c6b5-x2x4q", true},
		{"A_1", true},
		{strings.Repeat("a", MaxReplicaLen), true},
		{"", false},
		{strings.Repeat("a", MaxReplicaLen+1), false},
		{".", false},
		{"..", false},
		{"-x", false},
		{"a/b", false},
		{"a b", false},
		{"a\nb", false},
		{"é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReplica(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckReplica(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
}
