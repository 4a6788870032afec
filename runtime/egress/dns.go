package egress

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is the sandbox's only name server. It answers A queries for
// names the rules allow with the proxy's address (the sandbox reaches
// nothing else, and its clients send the name to the proxy anyway), says
// "no such name" to everything else, and forwards nothing: a query can
// carry no data out of the sandbox.
type dnsServer struct {
	rules  []Rule
	answer netip.Addr
	onDeny func(name string)
	udp    net.PacketConn
	tcp    net.Listener
	wg     sync.WaitGroup
}

func (d *dnsServer) serve() {
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := d.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := d.handle(buf[:n]); out != nil {
				_, _ = d.udp.WriteTo(out, from)
			}
		}
	}()
	go func() {
		defer d.wg.Done()
		for {
			c, err := d.tcp.Accept()
			if err != nil {
				return
			}
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				defer c.Close()
				for {
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					msg := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, msg); err != nil {
						return
					}
					out := d.handle(msg)
					if out == nil {
						return
					}
					if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out)))); err != nil {
						return
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
}

func (d *dnsServer) close() {
	d.udp.Close()
	d.tcp.Close()
	d.wg.Wait()
}

// handle answers one query; nil drops it (not a query).
func (d *dnsServer) handle(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	b := dnsmessage.NewBuilder(nil, resp)
	b.EnableCompression()
	if err != nil || h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeFormatError
		if err == nil {
			resp.RCode = dnsmessage.RCodeNotImplemented
		}
		b = dnsmessage.NewBuilder(nil, resp)
		out, _ := b.Finish()
		return out
	}
	name, ok := normalizeName(strings.TrimSuffix(q.Name.String(), "."))
	allowed := ok && NameAllowed(d.rules, name)
	if !allowed {
		resp.RCode = dnsmessage.RCodeNameError
		b = dnsmessage.NewBuilder(nil, resp)
		d.deny(q.Name.String())
	}
	_ = b.StartQuestions()
	_ = b.Question(q)
	if allowed && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET && d.answer.Is4() {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.AResource{A: d.answer.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// deny reports a refused name (the proxy's report budget aggregates a
// script that queries in a loop).
func (d *dnsServer) deny(name string) {
	if d.onDeny != nil {
		d.onDeny(truncate(strings.TrimSuffix(name, "."), 300))
	}
}
