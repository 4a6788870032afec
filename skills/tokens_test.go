package skills

import (
	"fmt"
	"strings"
	"testing"
)

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

// The catalog budget in tokens: within it, everything is shown; over it,
// the catalog shrinks to fit and says what it left out.
func TestRenderAvailableTokens(t *testing.T) {
	var list []*Skill
	for i := range 40 {
		list = append(list, &Skill{Name: fmt.Sprintf("skill-%02d", i), Description: strings.Repeat("does a useful thing. ", 10),
			Location: fmt.Sprintf("/skills/skill-%02d/SKILL.md", i)})
	}
	total := 0
	for _, s := range list {
		total += CatalogEntryTokens(s)
	}
	full := RenderAvailableTokens(list, 0)
	if EstimateTokens(full) < total {
		t.Fatalf("unbudgeted catalog is %d tokens, its entries %d", EstimateTokens(full), total)
	}
	if got := RenderAvailableTokens(list, EstimateTokens(full)); got != full {
		t.Errorf("a budget the catalog fits changed it")
	}
	for _, budget := range []int{total / 2, total / 8, 200} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			got := RenderAvailableTokens(list, budget)
			if n := EstimateTokens(got); n > budget {
				t.Errorf("catalog is %d tokens, budget %d", n, budget)
			}
			if got == full {
				t.Errorf("over budget and unchanged")
			}
		})
	}
}
