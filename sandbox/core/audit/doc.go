// Package audit is skillbox's tamper-evident audit trail: an append-only log
// of every session, skill load and unload, file read, script run, policy
// decision, confirmation and refused caller, written so that a security team
// can later prove what ran, who asked and under which policy — and can tell
// when someone has edited, removed, reordered or cut off records.
//
// # Why it is built this way
//
// The log is evidence, so three properties matter more than speed:
//
//   - Nothing the daemon acts on goes unrecorded. [Log.Append] returns only
//     after the record has been written and fsynced; a run's start record is
//     appended before its sandbox starts and its end record before its result
//     is returned. When the log cannot be written (disk full, I/O error,
//     read-only file system) Append fails with an error wrapping
//     [ErrUnavailable] and [Log.Healthy] keeps reporting it, so the daemon
//     refuses new runs (fail closed). The log heals itself: it retries in the
//     background and on the next Append, and the first record written after
//     an outage is an "audit.resumed" record saying how long it lasted and how
//     many appends were refused.
//   - A record is one line that untrusted text cannot break. Scripts choose
//     their arguments, output file names and error text; all of it is JSON
//     string-escaped (control characters, U+2028 and U+2029 included), so a
//     raw newline can never appear inside a record and a script cannot forge
//     a line. A write that fails half way is cut back to the last whole line
//     before anything else is written.
//   - Edits are evident. Each record carries the hash of the one before it
//     (prev_hash) and its own hash over its canonical form, so changing,
//     dropping, reordering or inserting a record breaks the chain at that
//     record. A chain alone cannot reveal a cut-off tail, nor a whole chain
//     recomputed by someone with write access; signed checkpoints (below),
//     kept by someone else, catch both.
//
// # Files
//
// A log is a directory holding audit-000001.jsonl, audit-000002.jsonl, …
// (numbered in order; more digits once past 999999), one JSON object per line,
// each line ending in "\n". A file is rotated when it reaches
// [Options.RotateBytes] or [Options.RotateAge]; the chain continues across
// files. audit.lock is the single-writer lock (flock) and holds the writer's
// pid; checkpoints.jsonl (by default) holds the signed checkpoints, one per
// line.
//
// # Replicas
//
// Daemons replicated over several machines each keep their own chain, never
// one shared: a global chain would make every run wait on a cross-node
// lock, while per-replica chains keep the fail-closed rule local. A replica
// writes [Options.Replica] into every record and its chain into its own
// directory, [ReplicaDir] (audit_dir/<replica>), so replicas may share one
// volume; the writer lock then refuses a second daemon with the same name.
// A directory can thus hold several chains: itself (a daemon without a
// replica name, or a log from before replicas) and its subdirectories
// ([Chains]). [VerifyAll] checks each on its own; [Scan], [Read] and
// [Export] merge them by time, ties broken by replica and seq, keeping each
// chain's own order. Records written before replicas have no replica
// member; the hash covers the line as written, so they verify unchanged.
//
// # Records
//
// Every record has seq (1, 2, 3, … without gaps across all files), time (UTC,
// RFC 3339 with nanoseconds), replica (the daemon replica that wrote it, see
// Replicas below), event (one of the Event constants), prev_hash and hash. The rest depends on the event: peer (uid, gid, pid, process),
// session_id, request_id, trace_id (the OpenTelemetry trace of a traced
// call), method, skill {name, digest}, skills, read, run,
// decision, confirmation, daemon, log, checkpoint, outcome, error, detail.
// Members that are empty are omitted (a missing number means 0).
//
// The first record of the first file is "audit.genesis": its log.id is 32
// random bytes in lowercase hex, and its prev_hash equals that id, anchoring
// the chain. The first record of every later file is "audit.rotate" (log.id,
// log.file, log.prev_file); its prev_hash is the hash of the last record of
// the previous file, so one file on its own says where it belongs.
// "audit.recovered" records a torn last line found on open (log.dropped:
// file, offset, bytes, sha256 and a base64 excerpt of the dropped bytes);
// "audit.resumed" ends an outage; "audit.checkpoint" carries a signed
// checkpoint.
//
// # Canonical form and hash
//
// The writer puts hash last, so every line ends with
//
//	,"hash":"<64 lowercase hex digits>"}
//
// The canonical form of a record is its line, without the final "\n", with
// that suffix replaced by "}" — that is, the record's JSON exactly as written
// with the hash member removed. The record's hash is the lowercase hex SHA-256
// of its canonical form. The canonical form includes prev_hash, so
//
//	hash(n) = SHA-256(line(n) minus its hash member), and line(n) contains prev_hash = hash(n-1)
//
// Verification is byte-level: a verifier never re-serializes JSON, so it can
// be written in any language in a few lines (strip the suffix, append "}",
// hash, compare, parse seq and prev_hash, compare with the previous record).
// For the record, the writer produces the bytes with Go's encoding/json:
// members in the fixed order of the [Record] struct (seq, time, replica, event, peer,
// session_id, request_id, trace_id, method, skill, skills, read, run, decision,
// confirmation, daemon, log, checkpoint, outcome, error, detail, prev_hash,
// hash), nested objects in their structs' field order and maps with sorted
// keys, no insignificant whitespace, strings escaped with \" \\ \n \r \t and
// \u00XX for other control characters and \u2028 \u2029 for the line
// separators, invalid UTF-8 replaced by U+FFFD, "<", ">" and "&" left as is.
//
// # Checkpoints
//
// With [Options.SigningKey] set, the log periodically (and on Close) signs its
// head with Ed25519 and writes the checkpoint both as an "audit.checkpoint"
// record and as a line of the checkpoints file, meant to be shipped off the
// machine. A checkpoint is {log_id, seq, hash, time, key_id, sig}: seq and hash
// are those of the record just before the checkpoint record; key_id is the
// first 16 hex digits of SHA-256 of the raw 32-byte public key; sig is the
// base64 (standard, padded) Ed25519 signature of the message
//
//	"skillbox-audit-checkpoint-v1\n" + log_id + "\n" + seq + "\n" + hash + "\n" + time + "\n"
//
// where seq is decimal and time is Unix nanoseconds in decimal. Anyone holding
// an earlier checkpoint and the public key can tell whether the log still
// reaches that seq with that hash: a tail cut off after the checkpoint, or a
// chain rewritten and re-hashed before it, fails [Verify]. Keys are PEM
// (PKCS #8 private, PKIX public), readable by openssl; see [GenerateKey].
//
// # Limits
//
// The log is tamper-evident, not tamper-proof: root on the machine can delete
// it. Records written after the last checkpoint that leaves the machine can be
// cut off without trace. The env hash ([EnvSummary]) is a plain SHA-256, so a
// short, guessable value can be recovered by trying candidates; the log never
// stores values, but it is not a secret store either.
package audit
