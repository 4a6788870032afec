package runner

import (
	"context"
	"crypto/x509"
	"net/netip"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// EgressOptions are the engine's settings for runs with egress
// destinations (policy egress = [...]).
type EgressOptions struct {
	// Resolver resolves the names the proxy lets a run reach; nil is the
	// host's resolver. Tests inject their own.
	Resolver egress.Resolver
	// Hosts are static names for the proxy, trusted as written (a private
	// address here is used even though no address rule names it).
	Hosts map[string][]netip.Addr
	// UpstreamRoots verifies the hosts secrets go to (nil: the system's
	// roots); CA is the daemon's CA for them (nil: made on first use).
	UpstreamRoots *x509.CertPool
	CA            *egress.CA
}

// planEgress gives a script run the skill's egress destinations when it
// has no full network: then its sandbox's only way out is the proxy.
func planEgress(p *Plan) error {
	if p.network || p.code != nil || p.request.Skill == nil {
		return nil
	}
	eg := p.policy.Egress
	if len(eg.Value) == 0 {
		return nil
	}
	p.egress, p.egressRule = eg.Value, eg.Rule
	p.egressSecrets = p.policy.Secrets
	for _, s := range p.egressSecrets {
		if _, ok := p.request.Env[s.Name]; ok {
			return errkind.Errorf(errkind.InvalidParams, "env %s is the placeholder of a secret of this run (%s); leave it out", s.Name, s)
		}
	}
	return nil
}

// secretNames are the names of a plan's secrets.
func (p *Plan) secretNames() []string {
	out := make([]string, len(p.egressSecrets))
	for i, s := range p.egressSecrets {
		out[i] = s.Name
	}
	return out
}

// ca returns the daemon's CA, making it on first use.
func (e *Engine) ca() (*egress.CA, error) {
	e.caMu.Lock()
	defer e.caMu.Unlock()
	if e.egress.CA == nil {
		ca, err := egress.NewCA()
		if err != nil {
			return nil, errkind.Errorf(errkind.Internal, "make the egress CA: %w", err)
		}
		e.egress.CA = ca
	}
	return e.egress.CA, nil
}

// EgressNames are the destinations of a plan as written in policy, sorted
// as policy lists them.
func (p *Plan) EgressNames() []string {
	out := make([]string, len(p.egress))
	for i, d := range p.egress {
		out[i] = d.String()
	}
	return out
}

// AuditEgress lists the destinations with the rules that allow them.
func (p *Plan) AuditEgress() []string {
	out := make([]string, len(p.egress))
	for i, d := range p.egress {
		out[i] = d.String() + " (" + d.Source + ")"
	}
	return out
}

// egressConfig is the runtime's egress of a plan: every attempt becomes
// an egress.connect audit record of the run.
func (e *Engine) egressConfig(ctx context.Context, p *Plan) (*egress.Config, error) {
	if len(p.egress) == 0 {
		return nil, nil
	}
	actx := context.WithoutCancel(ctx)
	var secrets []egress.Secret
	var ca *egress.CA
	for _, s := range p.egressSecrets {
		v, err := s.Value()
		if err != nil {
			return nil, errkind.Wrap(errkind.Unavailable, err)
		}
		secrets = append(secrets, egress.Secret{Name: s.Name, Value: v, Hosts: s.Hosts, Header: s.Header})
	}
	if len(secrets) > 0 {
		var err error
		if ca, err = e.ca(); err != nil {
			return nil, err
		}
	}
	var budget egress.Budget
	if og := p.origin; og.Peer != nil {
		budget = e.egressBudgets.of(og.Peer.UID)
	}
	return &egress.Config{
		// Attempts past the run's and the uid's budgets are summed up in
		// aggregate records (runtime/egress/reports.go).
		UIDBudget:     budget,
		Rules:         p.egress,
		Resolver:      e.egress.Resolver,
		Hosts:         e.egress.Hosts,
		Secrets:       secrets,
		CA:            ca,
		UpstreamRoots: e.egress.UpstreamRoots,
		Report: func(a egress.Attempt) {
			r := &audit.Record{
				Event: audit.EventEgress, Peer: p.origin.Peer, SessionID: p.origin.SessionID, RequestID: p.origin.RequestID,
				Method: p.origin.Method, Skill: p.AuditSkill(),
				Egress: &audit.EgressInfo{RunID: p.runID, Attempt: a},
			}
			switch {
			case a.Kind == "aggregate":
				r.Outcome = audit.OutcomeAggregated
			case a.Allowed:
				r.Outcome = audit.OutcomeOK
			default:
				r.Outcome = audit.OutcomeDenied
			}
			wctx, cancel := context.WithTimeout(actx, 10*time.Second)
			defer cancel()
			if err := e.journal.Record(wctx, r); err != nil {
				// The run.end record still sums the run's egress up.
				e.log.Error("egress audit record not written", "run_id", p.runID, "error", err)
			}
		},
	}, nil
}

// Each uid's runs together have egressReportsPerUID egress attempts
// recorded one by one per minute (refilled steadily); past that, and past
// each run's own budget, attempts are aggregated. So a uid running
// denial loops run after run adds at most about this many records a
// minute, plus one aggregate per run and minute.
const egressReportsPerUID = 256

// maxBudgetUIDs bounds the uids remembered; full buckets are dropped first.
const maxBudgetUIDs = 4096

type uidBudgets struct {
	mu sync.Mutex
	m  map[uint32]*uidBucket
}

func (b *uidBudgets) of(uid uint32) egress.Budget {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[uint32]*uidBucket{}
	}
	if k := b.m[uid]; k != nil {
		return k
	}
	if len(b.m) >= maxBudgetUIDs {
		for u, k := range b.m {
			if k.full() {
				delete(b.m, u)
			}
		}
	}
	k := &uidBucket{tokens: egressReportsPerUID, last: time.Now()}
	b.m[uid] = k
	return k
}

// uidBucket is a token bucket of egressReportsPerUID a minute.
type uidBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (k *uidBucket) refill(now time.Time) {
	k.tokens = min(egressReportsPerUID, k.tokens+now.Sub(k.last).Minutes()*egressReportsPerUID)
	k.last = now
}

func (k *uidBucket) Take() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(time.Now())
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

func (k *uidBucket) full() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(time.Now())
	return k.tokens >= egressReportsPerUID
}
