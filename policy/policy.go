// Package policy holds skillbox's HCL configuration and the decision engine
// that says, for a skill and a tool, allow, deny or confirm, naming the rule
// (file:line) that decided, so every decision can be explained and audited.
//
// The configuration is strict on purpose: a misspelt key in a security policy
// that is silently ignored is a hole, so unknown attributes and blocks are
// errors that point at file:line, and every value is validated before the
// daemon starts. Rules are combined without regard to their order in the file
// (deny beats confirm beats allow, limits take the strictest value), so that
// reordering or splitting a file can never widen what a skill may do.
package policy

import (
	"errors"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Sentinel errors.
var (
	ErrDenied = errkind.New(errkind.Denied, "denied by policy")
	ErrConfig = errors.New("invalid config")
	// ErrNoInterpreter: no image is configured for a script's extension or shebang.
	ErrNoInterpreter = errors.New("no interpreter for script")
)
