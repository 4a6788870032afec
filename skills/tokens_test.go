package skills

import "testing"

func TestEstimateTokens(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{"héllo", 2}, // 6 bytes
		{"日本語", 3},   // 9 bytes
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := EstimateTokens(tc.in); got != tc.want {
				t.Errorf("EstimateTokens(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}
