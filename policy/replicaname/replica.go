// Package replicaname is the name of a daemon replica: it goes into every
// audit record and names the replica's audit directory, and the config,
// the audit log and the daemon check it the same way.
package replicaname

import (
	"fmt"
	"os"
)

// MaxLen bounds a replica name: a Kubernetes pod name (a DNS
// subdomain) fits, and so does a directory name.
const MaxLen = 253

// Check says whether name can identify a daemon replica. The name
// goes into every audit record and names the replica's audit directory, so
// it is kept to a charset that is safe in a path and on a terminal: a letter
// or digit, then letters, digits, '.', '_' and '-'.
func Check(name string) error {
	if name == "" {
		return fmt.Errorf("replica name is empty: give a name like \"skillbox-0\"")
	}
	if len(name) > MaxLen {
		return fmt.Errorf("replica name is %d bytes, longer than %d: give a shorter one", len(name), MaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("replica name %q: byte %d (%q) is not allowed: use letters, digits, '.', '_' and '-', starting with a letter or digit", name, i, c)
		}
	}
	return nil
}

// Default is the replica name of a daemon that names none: the host
// name (in Kubernetes, the pod's name), if it passes Check.
func Default() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no replica name: the host name cannot be read (%v); set daemon { replica = \"NAME\" }", err)
	}
	if err := Check(h); err != nil {
		return "", fmt.Errorf("the host name cannot name this replica: %v; set daemon { replica = \"NAME\" }", err)
	}
	return h, nil
}
