package lockserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/lockstore"
)

// newFenceWarnings returns fencegate_fence_warnings_total. The backends log
// past lockstore.FenceWarn but, importing nothing of ours, count nothing;
// the lock API sees every fence it hands out, so it counts them here. It is
// a plain counter, exported as 0 from the start, so an alert on its
// increase works before the first warning.
func newFenceWarnings() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_fence_warnings_total",
		Help: "Fences issued through the lock API past the warning level (lockstore.FenceWarn, a tenth of the maximum): rotate the key namespace.",
	})
}

// noteFence counts res's fence when it is past the warning level and hands
// the acquire's outcome through unchanged.
func (s *Server) noteFence(res lockstore.AcquireResult, err error) (lockstore.AcquireResult, error) {
	if err != nil || !res.OK {
		return res, err
	}
	if n, perr := lockstore.ParseFence(res.Fence); perr == nil && lockstore.FenceNeedsWarning(n) {
		s.fenceWarnings.Inc()
	}
	return res, err
}
