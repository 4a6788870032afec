package egress

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func buildQuery(t *testing.T, name string) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	_ = b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parseAnswer(t *testing.T, msg []byte) (int, []string) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.SkipAllQuestions()
	var out []string
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if rh.Type == dnsmessage.TypeA {
			a, _ := p.AResource()
			out = append(out, fmtIP(a.A))
		} else {
			_ = p.SkipAnswer()
		}
	}
	return int(h.RCode), out
}

func fmtIP(a [4]byte) string { return netipFrom4(a) }

func netipFrom4(a [4]byte) string { return netip.AddrFrom4(a).String() }
