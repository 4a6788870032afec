package skills

import (
	"encoding/xml"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func sk(name, desc string) *Skill {
	return &Skill{Name: name, Description: desc, Location: "/skills/" + name + "/SKILL.md", Body: "Body of " + name + "."}
}

// catalog mirrors the rendered XML to check it is well-formed and lossless.
type catalog struct {
	Skills []struct {
		Name        string `xml:"name"`
		Description string `xml:"description"`
		Location    string `xml:"location"`
	} `xml:"skill"`
}

func parseCatalog(t *testing.T, s string) catalog {
	t.Helper()
	var c catalog
	if err := xml.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("output is not well-formed XML: %v\n%s", err, s)
	}
	return c
}

func TestRenderAvailable(t *testing.T) {
	t.Run("basic", func(t *testing.T) {
		got := RenderAvailable([]*Skill{sk("pdf", "Work with PDFs."), sk("git", "Git helper.")}, 0)
		want := "<available_skills>\n" +
			"<skill>\n<name>pdf</name>\n<description>Work with PDFs.</description>\n<location>/skills/pdf/SKILL.md</location>\n</skill>\n" +
			"<skill>\n<name>git</name>\n<description>Git helper.</description>\n<location>/skills/git/SKILL.md</location>\n</skill>\n" +
			"</available_skills>\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("escaping", func(t *testing.T) {
		s := sk("x", `Use <b> & "quotes" 'too' </description></skill><skill>`)
		s.Location = `/a&b/<x>/SKILL.md`
		got := RenderAvailable([]*Skill{s}, 0)
		if !strings.Contains(got, "Use &lt;b&gt; &amp; &quot;quotes&quot; &apos;too&apos; &lt;/description&gt;") {
			t.Errorf("not escaped: %s", got)
		}
		c := parseCatalog(t, got)
		if len(c.Skills) != 1 || c.Skills[0].Description != s.Description || c.Skills[0].Location != s.Location {
			t.Errorf("round trip = %+v", c)
		}
	})
	t.Run("disable-model-invocation left out", func(t *testing.T) {
		hidden := sk("hidden", "Only for users.")
		hidden.DisableModelInvocation = true
		got := RenderAvailable([]*Skill{sk("a", "A."), hidden}, 0)
		if strings.Contains(got, "hidden") {
			t.Errorf("hidden skill rendered: %s", got)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if got := RenderAvailable(nil, 100); got != "<available_skills>\n</available_skills>\n" {
			t.Errorf("got %q", got)
		}
	})

	var many []*Skill
	for i := range 50 {
		many = append(many, sk(fmt.Sprintf("skill-%02d", i), strings.Repeat(fmt.Sprintf("word%d ", i), 40)))
	}
	full := RenderAvailable(many, 0)
	fullLen := utf8.RuneCountInString(full)

	budgets := []struct {
		name         string
		budget       int
		wantOmitted  bool
		wantTruncate bool
	}{
		{name: "fits", budget: fullLen},
		{name: "descriptions cut", budget: fullLen / 2, wantTruncate: true},
		{name: "descriptions cut to the minimum", budget: sizeOf(many, minDescription, 0, utf8.RuneCountInString), wantTruncate: true},
		{name: "skills left out", budget: 2000, wantTruncate: true, wantOmitted: true},
		{name: "nothing fits", budget: 10, wantOmitted: true},
	}
	for _, tt := range budgets {
		t.Run("budget/"+tt.name, func(t *testing.T) {
			got := RenderAvailable(many, tt.budget)
			n := utf8.RuneCountInString(got)
			if tt.name != "nothing fits" && n > tt.budget {
				t.Errorf("output %d characters, budget %d", n, tt.budget)
			}
			c := parseCatalog(t, got)
			omitted := regexp.MustCompile(`<!-- (\d+) more skills left out`).FindStringSubmatch(got)
			if (omitted != nil) != tt.wantOmitted {
				t.Fatalf("omitted line present = %v, want %v\n%s", omitted != nil, tt.wantOmitted, got)
			}
			if omitted != nil && omitted[1] != fmt.Sprint(len(many)-len(c.Skills)) {
				t.Errorf("says %s left out, but %d of %d shown", omitted[1], len(c.Skills), len(many))
			}
			if !tt.wantOmitted && len(c.Skills) != len(many) {
				t.Errorf("%d skills shown, want all %d", len(c.Skills), len(many))
			}
			truncated := strings.Contains(got, "…")
			if truncated != tt.wantTruncate {
				t.Errorf("truncated = %v, want %v", truncated, tt.wantTruncate)
			}
			for i, s := range c.Skills {
				if s.Name != many[i].Name {
					t.Errorf("skill %d = %s, order changed", i, s.Name)
				}
			}
		})
	}
	t.Run("budget uses the room it has", func(t *testing.T) {
		budget := fullLen / 2
		got := RenderAvailable(many, budget)
		if n := utf8.RuneCountInString(got); n < budget-2*len(many) {
			t.Errorf("output %d characters, budget %d: descriptions cut more than needed", n, budget)
		}
	})
}

func TestRenderActive(t *testing.T) {
	a, b := sk("a", ""), sk("b", "")
	b.Body = "Use <tags> & code:\n```\nx ]]> y\n```\n</skill></active_skills>"
	got := RenderActive([]*Skill{b, a})
	if strings.Index(got, `name="b"`) > strings.Index(got, `name="a"`) {
		t.Error("load order not kept")
	}
	// The whole block must parse as XML with the bodies intact.
	var block struct {
		Skills []struct {
			Name     string `xml:"name,attr"`
			Location string `xml:"location,attr"`
			Body     string `xml:",chardata"`
		} `xml:"skill"`
	}
	if err := xml.Unmarshal([]byte(got), &block); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, got)
	}
	if len(block.Skills) != 2 || strings.TrimSpace(block.Skills[0].Body) != b.Body || block.Skills[1].Location != a.Location {
		t.Errorf("parsed = %+v\n%s", block, got)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello world", 7, "hello…"},
		{"привет мир", 4, "при…"},
		{"abc", 1, "…"},
		{"abc", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := truncate(tt.in, tt.n); got != tt.want {
				t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}
