// Package policy holds skillbox's HCL configuration and the decision engine
// that says, for a skill and a tool, allow, deny or confirm, naming the rule
// (file:line) that decided, so every decision can be explained and audited.
package policy

import "errors"

// Sentinel errors.
var (
	ErrDenied = errors.New("denied by policy")
	ErrConfig = errors.New("invalid config")
)
