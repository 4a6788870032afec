package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// maxHostsLines bounds a hosts file.
const maxHostsLines = 100000

// ParseHosts reads a hosts file ("ADDRESS NAME [NAME...]" lines, '#'
// comments) into the static names of Config.Hosts. Names are lower-cased;
// an invalid address or name is an error naming its line.
func ParseHosts(r io.Reader) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		if n > maxHostsLines {
			return nil, fmt.Errorf("more than %d lines", maxHostsLines)
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want \"ADDRESS NAME...\"", n)
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("line %d: %q is not an IP address", n, f[0])
		}
		for _, name := range f[1:] {
			h, ok := normalizeName(name)
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not a host name", n, name)
			}
			out[h] = append(out[h], a.Unmap())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
