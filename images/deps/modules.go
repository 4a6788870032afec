package deps

import "strings"

// knownModules maps distribution names whose import name differs from the
// name itself (the ones skills and image extras use most).
var knownModules = map[string]string{
	"python-pptx":     "pptx",
	"python-docx":     "docx",
	"pillow":          "PIL",
	"pyyaml":          "yaml",
	"beautifulsoup4":  "bs4",
	"opencv-python":   "cv2",
	"scikit-learn":    "sklearn",
	"pymupdf":         "fitz",
	"pdfminer-six":    "pdfminer",
	"python-dateutil": "dateutil",
}

// ModuleOf is the top-level import name of a Python distribution name.
func ModuleOf(dist string) string {
	n := NormalizeName(dist)
	if m, ok := knownModules[n]; ok {
		return m
	}
	return strings.ReplaceAll(n, "-", "_")
}

// DistOf is the reverse of ModuleOf for the known names; otherwise the
// module name itself.
func DistOf(mod string) string {
	for d, m := range knownModules {
		if m == mod {
			return d
		}
	}
	return mod
}
