// Package promreg registers the collectors that several components of one
// process share (the checker's and the admission webhook's metrics: authz
// and admission each build a Checker on the gateway's one registry).
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Shared registers c with reg and returns the collector to use: c, or the
// one already registered under the same definition when another component
// got there first, so that both count into one series. reg nil: c, counted
// locally (tests, and components built without metrics).
//
// A name clash with a different definition (other labels, help or type)
// panics. It is a programming error found at construction, in every test
// that builds the two components on one registry; counting locally instead
// would keep the process up with the metric silently missing from
// /metrics, and every alert on it quiet.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		err = fmt.Errorf("%w (the registered collector is a %T)", err, are.ExistingCollector)
	}
	panic(fmt.Sprintf("promreg: a metric of this process is defined twice, differently: %v", err))
}
