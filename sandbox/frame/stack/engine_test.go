package stack_test

import (
	"strings"
	"testing"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

func TestRecipesByImage(t *testing.T) {
	recipes, err := images.DefaultRecipes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, image, wantRecipe, wantErr string
	}{
		{name: "defaults", src: ``, image: "python", wantRecipe: "python"},
		{name: "block naming another recipe", image: "py3", wantRecipe: "python",
			src: `image "py3" {
  extensions  = [".pyx"]
  interpreter = ["python3"]
  recipe      = "python"
}`},
		{name: "unknown recipe", wantErr: `recipe "pythn" does not exist`,
			src: `image "py3" {
  extensions  = [".pyx"]
  interpreter = ["python3"]
  recipe      = "pythn"
}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := policy.Parse([]byte(tc.src), "t.hcl")
			if err != nil {
				t.Fatal(err)
			}
			got, err := stack.RecipesByImage(cfg, recipes)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := got[tc.image]; r == nil || r.Name != tc.wantRecipe {
				t.Fatalf("image %s → %v, want recipe %s", tc.image, r, tc.wantRecipe)
			}
		})
	}
}
