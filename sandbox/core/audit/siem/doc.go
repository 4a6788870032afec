// Package siem hands the audit log to a SIEM in the schema it already
// understands, so a collector needs no skillbox-specific parser: flat JSON
// lines (the historical `audit export` output), OCSF 1.3.0 events
// (https://schema.ocsf.io/1.3.0) or ECS 8.11.0 documents
// (https://www.elastic.co/guide/en/ecs/8.11/). Every audit event maps to
// one OCSF class and one ECS category; an event this package does not know
// maps to OCSF's Base Event (class_uid 0) and to ECS without a category,
// never dropped. Nothing of a record is lost in a mapping: the whole
// record stays under OCSF's `unmapped` and ECS's `skillbox`.
//
// The records can be written to a stream, to a file (appended and fsynced
// record by record, reopened when a log rotator moves it away) or to a
// syslog receiver as RFC 5424 messages, one record per message. A record a
// transport cannot carry whole is an error naming it, never cut.
//
// Mapping reads records as untrusted text: a record line may hold anything
// a caller or a script put in it.
package siem

// Schema versions this package writes; they are also in every mapped
// record (OCSF metadata.version, ECS ecs.version).
const (
	OCSFVersion = "1.3.0"
	ECSVersion  = "8.11.0"
)
