package service

import "github.com/skillbox/skillbox/sandbox/core/runner"

// The run types of the service's API are the engine's: Service.Run (and
// Start, for a background run) takes a RunRequest, authorizes it and hands
// the engine's Plan of it back to the caller (RunOptions.Authorized) and
// its outcome, Finished (or Started). They are named here
// so that front ends that only call the service need not import the runner.
type (
	RunRequest  = runner.RunRequest
	Origin      = runner.Origin
	Plan        = runner.Plan
	Finished    = runner.Finished
	Started     = runner.Started
	CodeRequest = runner.CodeRequest
	CommandSpec = runner.CommandSpec
)
