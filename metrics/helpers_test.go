package metrics_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// scrape gathers reg and returns the metric families by name.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// series returns the series of the named family whose labels include
// labels (given as name, value pairs), or nil.
func series(mfs map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns the value of a counter or gauge series; it fails t when
// the series is missing.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := series(mfs, name, labels...)
	switch {
	case m == nil:
		t.Fatalf("%s%v: no such series; have %v", name, labels, slices.Sorted(maps.Keys(mfs)))
		return 0
	case m.Counter == nil && m.Gauge == nil:
		t.Fatalf("%s%v: neither counter nor gauge", name, labels)
		return 0
	}
	return sum(mfs, name, labels...)
}

// sum adds up every counter or gauge series of name with the labels given
// (shareq_jobs_total{ack="accept"} over its outcomes).
func sum(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var n float64
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && got[labels[i]] == labels[i+1]
		}
		if match {
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n
}

// hist is a histogram series: its count, sum and cumulative bucket counts
// by upper bound.
type hist struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

func histogram(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) hist {
	t.Helper()
	m := series(mfs, name, labels...)
	if m == nil || m.Histogram == nil {
		t.Fatalf("%s%v: no such histogram series", name, labels)
	}
	h := hist{count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum(), buckets: map[float64]uint64{}}
	for _, b := range m.GetHistogram().GetBucket() {
		h.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return h
}
