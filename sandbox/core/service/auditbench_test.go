package service_test

import (
	"context"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

// BenchmarkAuditSearch is one audit search on a log of 150,000 runs: by a
// non-approver who may see 1% of it (own), and by an approver for one
// skill's newest 200 records (approver). The first search, which builds
// the index, is outside the timing.
func BenchmarkAuditSearch(b *testing.B) {
	cfg, err := policy.Parse([]byte(serviceConfig), "service.hcl")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Daemon.AuditDir = bigAuditLog(b)
	j := audit.NewJournal(&servicetest.Auditor{}, nil)
	eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: &servicetest.Runtime{}, Audit: j, Pins: servicetest.LivePins{}})
	svc := service.New(service.Options{Config: cfg, Skills: servicetest.NewIndex(), Engine: eng, Audit: j})
	ctx := context.Background()
	run := func(name string, search func() error) {
		b.Run(name, func(b *testing.B) {
			if err := search(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := search(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("own", func() error {
		_, err := svc.SearchAudit(ctx, stranger, service.AuditSearchParams{})
		return err
	})
	run("approver", func() error {
		p := service.AuditSearchParams{}
		p.Filter.Skill = "pdf-tools-3"
		_, err := svc.SearchAudit(ctx, approver, p)
		return err
	})
}
