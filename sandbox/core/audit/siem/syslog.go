package siem

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Go's log/syslog writes the older BSD format (RFC 3164) and cannot say a
// datagram was too large, so SyslogSink writes RFC 5424 itself: the format
// is one line of fields before the JSON body.

// ErrTooLarge is returned for a record the transport cannot carry whole;
// it is never cut to fit.
var ErrTooLarge = errors.New("record larger than the syslog transport carries")

// maxUDPPayload is the largest UDP datagram payload over IPv4.
const maxUDPPayload = 65507

// FacilityLogAudit is RFC 5424's facility 13, "log audit".
const FacilityLogAudit = 13

// SyslogSink sends each record as one RFC 5424 message: over a unix
// datagram socket (the local syslog daemon's, e.g. /dev/log), or over UDP
// or TCP (octet-counted frames, RFC 6587) to a receiver on the loopback
// interface. APP-NAME is skillbox, MSGID the event, HOSTNAME the replica
// that wrote the record, the severity follows the record's (Informational:
// info, Low: notice, Medium: warning, High and above: err), the facility
// is log audit (13), and MSG is the mapped record.
type SyslogSink struct {
	network, addr string
	conn          net.Conn
	host          string // used for records without a replica
}

// ParseSyslogAddr reads a syslog destination: "unixgram:PATH" or a PATH
// alone (a unix datagram socket), "udp:HOST:PORT" or "tcp:HOST:PORT" with
// HOST a loopback address or localhost. "NET://ADDR" is read the same.
// Audit records leave the host only through a local syslog daemon, which
// can forward them with TLS.
func ParseSyslogAddr(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		network, addr = "unixgram", s
	}
	addr = strings.TrimPrefix(addr, "//")
	switch network {
	case "unixgram":
		if addr == "" {
			return "", "", fmt.Errorf("syslog address %q: give the socket's path, e.g. unixgram:/dev/log", s)
		}
		return network, addr, nil
	case "udp", "tcp":
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return "", "", fmt.Errorf("syslog address %q: %w (give %s:127.0.0.1:514)", s, err, network)
		}
		if host != "localhost" {
			ip, err := netip.ParseAddr(host)
			if err != nil || !ip.IsLoopback() {
				return "", "", fmt.Errorf("syslog address %q: only a receiver on loopback (127.0.0.1, ::1, localhost) is allowed: send to the local syslog daemon and let it forward with TLS", s)
			}
		}
		return network, addr, nil
	}
	return "", "", fmt.Errorf("syslog address %q: unknown transport %q: give unixgram:PATH, udp:HOST:PORT or tcp:HOST:PORT", s, network)
}

// DialSyslog connects to a syslog destination (see ParseSyslogAddr).
func DialSyslog(dest string) (*SyslogSink, error) {
	network, addr, err := ParseSyslogAddr(dest)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	s := &SyslogSink{network: network, addr: addr, host: host}
	if err := s.dial(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *SyslogSink) dial() error {
	c, err := net.DialTimeout(s.network, s.addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("connecting to syslog at %s:%s: %w", s.network, s.addr, err)
	}
	s.conn = c
	return nil
}

// Format returns m as an RFC 5424 message (without transport framing).
func (s *SyslogSink) Format(m Message) []byte {
	pri := FacilityLogAudit*8 + syslogSeverity(m.Severity)
	host := m.Host
	if host == "" {
		host = s.host
	}
	b := make([]byte, 0, len(m.Body)+128)
	b = append(b, '<')
	b = strconv.AppendInt(b, int64(pri), 10)
	b = append(b, ">1 "...)
	if m.Time.IsZero() {
		b = append(b, '-')
	} else {
		b = m.Time.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	}
	b = append(b, ' ')
	b = append(b, headerField(host, 255)...)
	b = append(b, " "+ProductName+" - "...)
	b = append(b, headerField(m.Event, 32)...)
	b = append(b, " - "...)
	return append(b, m.Body...)
}

// Write sends one record as one message. A record the transport cannot
// carry is refused with ErrTooLarge, naming it; a broken connection is
// redialled once.
func (s *SyslogSink) Write(m Message) error {
	msg := s.Format(m)
	if s.network == "udp" && len(msg) > maxUDPPayload {
		return s.tooLarge(m, len(msg), fmt.Sprintf("a UDP datagram carries at most %d bytes", maxUDPPayload))
	}
	frame := msg
	if s.network == "tcp" {
		frame = append(strconv.AppendInt(nil, int64(len(msg)), 10), ' ')
		frame = append(frame, msg...)
	}
	err := s.send(frame)
	if errors.Is(err, syscall.EMSGSIZE) || (errors.Is(err, syscall.ENOBUFS) && s.network == "unixgram") {
		return s.tooLarge(m, len(msg), "the socket refused the datagram: "+err.Error())
	}
	if err != nil {
		// The receiver may have restarted: dial again once.
		s.conn.Close()
		if derr := s.dial(); derr != nil {
			return fmt.Errorf("sending seq %d to syslog: %v; %w", m.Seq, err, derr)
		}
		if err := s.send(frame); err != nil {
			return fmt.Errorf("sending seq %d to syslog at %s:%s: %w", m.Seq, s.network, s.addr, err)
		}
	}
	return nil
}

func (s *SyslogSink) send(frame []byte) error {
	s.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := s.conn.Write(frame)
	return err
}

func (s *SyslogSink) tooLarge(m Message, n int, why string) error {
	return fmt.Errorf("seq %d (%s) is a %d-byte syslog message and %s; nothing of it was sent: forward over tcp (no size limit), or to --output FILE: %w",
		m.Seq, m.Event, n, why, ErrTooLarge)
}

func (s *SyslogSink) Flush() error { return nil }
func (s *SyslogSink) Close() error { return s.conn.Close() }

// syslogSeverity maps an OCSF severity_id to a syslog severity.
func syslogSeverity(ocsf int) int {
	switch {
	case ocsf <= severityInformational:
		return 6 // informational
	case ocsf == severityLow:
		return 5 // notice
	case ocsf == severityMedium:
		return 4 // warning
	case ocsf == 4:
		return 3 // error
	case ocsf == 5:
		return 2 // critical
	}
	return 1 // alert
}

// headerField makes s a valid RFC 5424 header field: printable US-ASCII
// without spaces, at most max bytes ("-" when empty). The record in MSG
// keeps the value as written.
func headerField(s string, max int) string {
	if s == "" {
		return "-"
	}
	b := []byte(s)
	for i, c := range b {
		if c < 33 || c > 126 {
			b[i] = '_'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	return string(b)
}
