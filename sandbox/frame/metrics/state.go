package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skillbox/skillbox/runtime"
)

// stateCollector reads what the daemon holds (the warm pool's sandboxes
// and counts, the open sessions) when scraped, so nothing below the
// daemon keeps a second count of it.
type stateCollector struct {
	mu       sync.Mutex
	pool     func() runtime.PoolStats // nil: no warm pool, no pool metrics
	sessions func() (int, error)      // nil: no session store
}

var (
	poolSandboxes = prometheus.NewDesc("skillbox_pool_sandboxes",
		"Pre-booted sandboxes in the warm pool, by state (idle: ready for a run; booting).", []string{"state"}, nil)
	poolKeys = prometheus.NewDesc("skillbox_pool_keys",
		"Keys (runtime, image, skill digest, dependency layer, limits) the warm pool keeps sandboxes for.", nil, nil)
	poolMemory = prometheus.NewDesc("skillbox_pool_idle_memory_bytes",
		"Memory (PSS) the idle sandboxes of the warm pool hold.", nil, nil)
	poolHits = prometheus.NewDesc("skillbox_pool_hits_total",
		"Runs that took a pre-booted sandbox from the warm pool.", nil, nil)
	poolMisses = prometheus.NewDesc("skillbox_pool_misses_total",
		"Runs the warm pool started cold: none was ready for their key, or they cannot run warm (network, egress, run_code, other limits).", nil, nil)
	poolBootFailures = prometheus.NewDesc("skillbox_pool_boot_failures_total",
		"Sandboxes the warm pool failed to boot.", nil, nil)
	sessionsOpen = prometheus.NewDesc("skillbox_sessions_open",
		"Sessions open (not closed or expired) in the state store; with a shared store, those of every replica.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolSandboxes, poolKeys, poolMemory, poolHits, poolMisses, poolBootFailures, sessionsOpen} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	pool, sessions := c.pool, c.sessions
	c.mu.Unlock()
	if pool != nil {
		s := pool()
		ch <- prometheus.MustNewConstMetric(poolSandboxes, prometheus.GaugeValue, float64(s.Idle), "idle")
		ch <- prometheus.MustNewConstMetric(poolSandboxes, prometheus.GaugeValue, float64(s.Booting), "booting")
		ch <- prometheus.MustNewConstMetric(poolKeys, prometheus.GaugeValue, float64(s.Keys))
		ch <- prometheus.MustNewConstMetric(poolMemory, prometheus.GaugeValue, float64(s.IdlePSS))
		ch <- prometheus.MustNewConstMetric(poolHits, prometheus.CounterValue, float64(s.Warm))
		ch <- prometheus.MustNewConstMetric(poolMisses, prometheus.CounterValue, float64(s.Cold))
		ch <- prometheus.MustNewConstMetric(poolBootFailures, prometheus.CounterValue, float64(s.BootFails))
	}
	if sessions != nil {
		n, err := sessions()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(sessionsOpen, fmt.Errorf("counting open sessions: %w", err))
		} else {
			ch <- prometheus.MustNewConstMetric(sessionsOpen, prometheus.GaugeValue, float64(n))
		}
	}
}
