package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sizeUnits follows the IEC/SI convention: "Ki"/"KiB" are powers of 1024,
// "K"/"KB" powers of 1000, so "512MiB" means exactly what it says.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// ParseSize parses a byte size: a plain number of bytes ("1048576") or a
// number with a unit ("512MiB", "1G", "64KiB", "1.5GiB"). Units are
// case-insensitive; K/M/G/T are decimal, Ki/Mi/Gi/Ti binary.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q: use bytes or a number with a unit, like \"512MiB\", \"1G\" or \"65536\"", s)
	}
	mult, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, or K, M, G, T)", s, m[2])
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %v", s, err)
	}
	v := n * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	return int64(v), nil
}

// FormatSize renders n with the largest binary unit that divides it exactly.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		v    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d%s", n/u.v, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// parseDuration is time.ParseDuration with an error that shows examples.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use a Go duration like \"30s\", \"5m\" or \"168h\"", s)
	}
	return d, nil
}

// parseMode parses an octal permission string such as "0660".
func parseMode(s string) (uint32, error) {
	if s == "" || strings.TrimLeft(s, "01234567") != "" {
		return 0, fmt.Errorf("invalid mode %q: use octal digits like \"0660\"", s)
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("invalid mode %q: must be permission bits between \"0000\" and \"0777\"", s)
	}
	return uint32(v), nil
}
