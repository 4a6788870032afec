// Package store keeps the daemon's persistent state in one bbolt database
// (<state_dir>/state.db): sessions (which skills a conversation has loaded)
// and confirmations (approvals bound to one run's digest). It knows nothing
// of transports or policy: the service decides, the store remembers, and a
// restart of the daemon loses neither.
package store
