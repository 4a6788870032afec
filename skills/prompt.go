package skills

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// minDescription is how far descriptions may be cut before skills are left
// out instead: below this a description no longer tells a model when to use
// the skill.
const minDescription = 40

// RenderAvailable renders the <available_skills> catalog a host puts in the
// model's instructions: name, description and the absolute location of
// SKILL.md for each skill the model may invoke (disable-model-invocation
// skills are left out). budget caps the output in characters (0 = no cap):
// descriptions are shortened evenly first, and only when that is not enough
// are trailing skills left out, with a line saying how many.
func RenderAvailable(skills []*Skill, budget int) string {
	return renderAvailable(skills, budget, utf8.RuneCountInString)
}

// RenderAvailableTokens is RenderAvailable with the budget in tokens as
// EstimateTokens counts them (each entry counted on its own, so the sum
// never under-counts the whole).
func RenderAvailableTokens(skills []*Skill, budget int) string {
	return renderAvailable(skills, budget, EstimateTokens)
}

// CatalogEntryTokens is the estimated token cost of a skill's entry in
// <available_skills>, its description uncut.
func CatalogEntryTokens(s *Skill) int { return EstimateTokens(entry(s, -1)) }

func renderAvailable(skills []*Skill, budget int, measure func(string) int) string {
	var shown []*Skill
	for _, s := range skills {
		if s != nil && !s.DisableModelInvocation {
			shown = append(shown, s)
		}
	}
	size := func(ss []*Skill, cut, omitted int) int { return sizeOf(ss, cut, omitted, measure) }
	if budget <= 0 || size(shown, -1, 0) <= budget {
		return render(shown, -1, 0)
	}
	// Keep as many skills as fit with descriptions at minDescription ...
	keep := len(shown)
	if size(shown, minDescription, 0) > budget {
		keep = fitCount(shown, budget, measure)
	}
	omitted := len(shown) - keep
	kept := shown[:keep]
	// ... then give the descriptions as much room as the budget allows.
	lo, hi := 0, maxDescLen(kept)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if size(kept, mid, omitted) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return render(kept, lo, omitted)
}

// fitCount is the largest number of leading skills whose catalog, with
// descriptions cut to minDescription, fits the budget.
func fitCount(shown []*Skill, budget int, measure func(string) int) int {
	total := measure(header) + measure(footer)
	for i, s := range shown {
		total += measure(entry(s, minDescription))
		if total+measure(omittedLine(len(shown)-i-1)) > budget {
			return i
		}
	}
	return len(shown)
}

const (
	header = "<available_skills>\n"
	footer = "</available_skills>\n"
)

func omittedLine(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("<!-- %d more skills left out to fit the catalog budget; call skills.list to see them all -->\n", n)
}

// sizeOf is the measure of render(skills, cut, omitted), piece by piece.
func sizeOf(skills []*Skill, cut, omitted int, measure func(string) int) int {
	n := measure(header) + measure(footer) + measure(omittedLine(omitted))
	for _, s := range skills {
		n += measure(entry(s, cut))
	}
	return n
}

func render(skills []*Skill, cut, omitted int) string {
	var b strings.Builder
	b.WriteString(header)
	for _, s := range skills {
		b.WriteString(entry(s, cut))
	}
	b.WriteString(omittedLine(omitted))
	b.WriteString(footer)
	return b.String()
}

func entry(s *Skill, cut int) string {
	desc := s.Description
	if cut >= 0 {
		desc = truncate(desc, cut)
	}
	return "<skill>\n<name>" + EscapeXML(s.Name) + "</name>\n<description>" + EscapeXML(desc) +
		"</description>\n<location>" + EscapeXML(s.Location) + "</location>\n</skill>\n"
}

func maxDescLen(skills []*Skill) int {
	m := 0
	for _, s := range skills {
		m = max(m, utf8.RuneCountInString(s.Description))
	}
	return m
}

// truncate cuts s to at most n characters, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " \t\n") + "…"
}

// RenderActive renders the <active_skills> block: the SKILL.md body of each
// loaded skill, in load order. Bodies go into CDATA sections so markdown and
// code reach the model verbatim, while a body can never close the block.
func RenderActive(skills []*Skill) string {
	var b strings.Builder
	b.WriteString("<active_skills>\n")
	for _, s := range skills {
		if s == nil {
			continue
		}
		fmt.Fprintf(&b, "<skill name=\"%s\" location=\"%s\">\n<![CDATA[%s]]>\n</skill>\n",
			EscapeXML(s.Name), EscapeXML(s.Location), strings.ReplaceAll(s.Body, "]]>", "]]]]><![CDATA[>"))
	}
	b.WriteString("</active_skills>\n")
	return b.String()
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// EscapeXML escapes the five XML special characters.
func EscapeXML(s string) string { return xmlEscaper.Replace(s) }
