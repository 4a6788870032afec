package runtimetest

import "slices"

// The run table: every backend runs the same cases (exit codes, limits,
// timeouts, output caps, hostile scripts, outputs by path, ...), cold and
// warm, through Table. What differs by design between backends is said in
// the checks, through CaseEnv, never by leaving a backend out silently.

// Cases is the table, a fresh copy for each caller: the cases of each
// theme (cases_*.go), in this order.
func Cases() []Case {
	return slices.Concat(basicCases(), limitCases(), isolationCases(), ioCases(), environmentCases())
}
