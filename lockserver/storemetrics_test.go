package lockserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// TestStoreMetrics: a real store behind storetelemetry.WithTelemetry feeds the
// per-backend store-call metrics, domain failures as "fail" and errors as
// their LockError code.
func TestStoreMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := lockserver.NewStoreMetrics(reg, "bolt")
	if err != nil {
		t.Fatal(err)
	}
	s := storetelemetry.WithTelemetry(locktest.OpenBolt(t), storetelemetry.TelemetryOptions{OnEvent: m.Observe})
	ctx := context.Background()
	a, err := s.Acquire(ctx, "k", time.Minute)
	if err != nil || !a.OK {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if r, _ := s.Acquire(ctx, "k", time.Minute); r.OK {
		t.Fatal("second acquire took a held lock")
	}
	if _, err := s.Acquire(ctx, "", time.Minute); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Fatalf("empty key: %v", err)
	}
	if err := s.Close(); err != nil { // delivers the queued events
		t.Fatal(err)
	}
	for result, want := range map[string]float64{"ok": 1, "fail": 1, "InvalidArgument": 1} {
		if got := testutil.ToFloat64(counter(t, reg, "acquire", result)); got != want {
			t.Errorf("fencegate_store_ops_total{backend=bolt,op=acquire,result=%s} = %v, want %v", result, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "fencegate_store_op_duration_seconds"); n != 5 {
		t.Errorf("duration series = %d, want one per operation (5)", n)
	}
}

// counter returns the collector of one fencegate_store_ops_total series.
func counter(t *testing.T, reg *prometheus.Registry, op, result string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "fencegate_store_ops_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["backend"] == "bolt" && labels["op"] == op && labels["result"] == result {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
