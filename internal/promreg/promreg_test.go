package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func counter(help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_promreg_test_total", Help: help}, labels)
}

// TestShared: the same definition registered twice yields one series both
// count into; a different definition under the same name panics (the
// broken variant, counting locally, is what silentLocal does and the
// clash cases catch); a nil registry counts locally.
func TestShared(t *testing.T) {
	type register func(prometheus.Registerer, *prometheus.CounterVec) *prometheus.CounterVec
	silentLocal := func(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
		if err := reg.Register(c); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				return are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		reg    register
		broken bool
	}{
		{"Shared", Shared[*prometheus.CounterVec], false},
		{"broken: counts locally on a clash", silentLocal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			a := tc.reg(reg, counter("h", "reason"))
			b := tc.reg(reg, counter("h", "reason"))
			a.WithLabelValues("x").Inc()
			b.WithLabelValues("x").Inc()
			if got := promtest.ToFloat64(a.WithLabelValues("x")); got != 2 {
				t.Fatalf("two registrations of one definition: %v counted in the shared series, want 2", got)
			}
			for _, clash := range []*prometheus.CounterVec{counter("h", "other"), counter("other help", "reason")} {
				panicked := func() (p any) {
					defer func() { p = recover() }()
					tc.reg(reg, clash)
					return nil
				}()
				if tc.broken {
					if panicked == nil {
						continue // caught: the broken variant keeps going silently
					}
					t.Fatalf("the broken variant panicked: %v", panicked)
				}
				if panicked == nil || !strings.Contains(panicked.(string), "defined twice") {
					t.Fatalf("a clash: %v, want a panic naming it", panicked)
				}
			}
		})
	}
	c := Shared(nil, counter("h", "reason"))
	c.WithLabelValues("x").Inc()
	if got := promtest.ToFloat64(c.WithLabelValues("x")); got != 1 {
		t.Fatalf("nil registry: %v, want 1 counted locally", got)
	}
}
