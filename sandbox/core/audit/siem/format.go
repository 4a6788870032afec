package siem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Format is the shape of the exported records.
type Format string

const (
	// FormatJSON is a record as one flat JSON object (audit.Flatten).
	FormatJSON Format = "json"
	// FormatOCSF is an OCSF 1.3.0 event (OCSFVersion).
	FormatOCSF Format = "ocsf"
	// FormatECS is an ECS 8.11.0 document (ECSVersion).
	FormatECS Format = "ecs"
)

// Schema names the format with its schema's version ("OCSF 1.3.0").
func (f Format) Schema() string {
	switch f {
	case FormatOCSF:
		return "OCSF " + OCSFVersion
	case FormatECS:
		return "ECS " + ECSVersion
	}
	return "flat JSON"
}

// Formats lists the formats, the default first.
var Formats = []Format{FormatJSON, FormatOCSF, FormatECS}

// ParseFormat reads a format name ("" is FormatJSON).
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatJSON, nil
	}
	for _, f := range Formats {
		if strings.EqualFold(s, string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q: give json, ocsf (OCSF %s) or ecs (ECS %s)", s, OCSFVersion, ECSVersion)
}

// Message is one mapped record, with what a transport needs besides the
// body (syslog's timestamp, host, severity and message id).
type Message struct {
	Time  time.Time
	Event string
	// Host is the replica that wrote the record ("" in logs written
	// before replicas).
	Host string
	Seq  uint64
	// Severity is the OCSF severity_id (1 Informational … 6 Fatal).
	Severity int
	// Body is one JSON object, without a newline.
	Body []byte
}

// Product names skillbox as the producer in mapped records.
const (
	ProductName = "skillbox"
	VendorName  = "skillbox"
)

// Mapper turns record lines into one format. It remembers the daemon
// version each replica announced in its last daemon.start, to name the
// producer's version; before one is seen it names ProductVersion.
type Mapper struct {
	format Format
	// productVersion is named when no daemon.start was seen (the
	// exporting binary's version, usually the daemon's too).
	productVersion string
	versions       map[string]string // replica: daemon version
}

// NewMapper returns a Mapper to format f ("" is json); productVersion is named as the
// producer's version until a daemon.start record names one.
func NewMapper(f Format, productVersion string) (*Mapper, error) {
	f, err := ParseFormat(string(f))
	if err != nil {
		return nil, err
	}
	return &Mapper{format: f, productVersion: productVersion, versions: map[string]string{}}, nil
}

// Format is the format m writes.
func (m *Mapper) Format() Format { return m.format }

// Map maps one record line (as stored, without its newline). r is the
// line decoded, or nil to decode it here.
func (m *Mapper) Map(raw []byte, r *audit.Record) (Message, error) {
	if r == nil {
		r = new(audit.Record)
		if err := json.Unmarshal(raw, r); err != nil {
			return Message{}, fmt.Errorf("not an audit record: %w", err)
		}
	}
	msg := Message{Time: r.Time, Event: r.Event, Host: r.Replica, Seq: r.Seq}
	status, _ := statusOf(r)
	msg.Severity, _ = severityOf(r, status)
	if r.Event == audit.EventDaemonStart && r.Daemon != nil && r.Daemon.Version != "" {
		m.versions[r.Replica] = r.Daemon.Version
	}
	var v any
	switch m.format {
	case FormatJSON:
		flat, err := audit.Flatten(raw)
		if err != nil {
			return Message{}, fmt.Errorf("not an audit record: %w", err)
		}
		v = flat
	default:
		orig, err := decodeObject(raw)
		if err != nil {
			return Message{}, fmt.Errorf("not an audit record: %w", err)
		}
		if m.format == FormatOCSF {
			v = m.ocsf(r, orig)
		} else {
			v = m.ecs(r, orig)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return Message{}, fmt.Errorf("seq %d: encoding %s: %w", r.Seq, m.format, err)
	}
	msg.Body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return msg, nil
}

// version is the producer's version for a record of replica.
func (m *Mapper) version(replica string) string {
	if v := m.versions[replica]; v != "" {
		return v
	}
	return m.productVersion
}

// decodeObject decodes a record line keeping its numbers as written.
func decodeObject(raw []byte) (map[string]any, error) {
	o, err := audit.DecodeObject(raw)
	if err == nil && o == nil {
		err = fmt.Errorf("null is not a record")
	}
	return o, err
}

// eventUID identifies a record uniquely: its hash, or replica and seq for
// a record without one.
func eventUID(r *audit.Record) string {
	if r.Hash != "" {
		return r.Hash
	}
	return r.Replica + ":" + strconv.FormatUint(r.Seq, 10)
}

func uidString(u uint32) string { return strconv.FormatUint(uint64(u), 10) }

// message is a short human reading of the record: its event and summary.
func message(r *audit.Record) string {
	if s := r.Summary(); s != "" {
		return r.Event + ": " + s
	}
	return r.Event
}
