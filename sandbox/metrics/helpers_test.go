package metrics_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// flatten turns metric families into "name{k="v",...}" -> value: a
// counter's or gauge's value, a histogram's _count and _sum. Only the
// families whose names start with prefix are kept.
func flatten(fams map[string]*dto.MetricFamily, prefix string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			labels := "{" + strings.Join(ls, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name+labels] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			default:
				out[name+labels] = -1 // a type this package does not use
			}
		}
	}
	return out
}

// checkExact compares got with want key by key, leaving out the keys
// that skip matches (timed values).
func checkExact(t *testing.T, got, want map[string]float64, skip func(key string) bool) {
	t.Helper()
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if skip != nil && skip(k) {
			continue
		}
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("missing %s (want %v)", k, w)
		case !wok:
			t.Errorf("unexpected %s = %v", k, g)
		case g != w:
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}
