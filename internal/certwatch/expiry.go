package certwatch

import (
	"github.com/prometheus/client_golang/prometheus"
)

// ExpiryMetric is the name of the gauge ExpiryCollector exports.
const ExpiryMetric = "fencegate_tls_certificate_expiry_timestamp_seconds"

// ExpiryCollector returns a Prometheus collector exporting the NotAfter of
// the certificate w serves, labelled listener=name, so that an alert can
// fire before a rotation that never happened turns into an outage. It is
// read at scrape time, so a reload shows up on the next scrape. Before the
// first valid pair it exports no sample: a listener without a certificate is
// not ready, which readiness already reports. Collectors for several
// listeners can share one registry.
func (w *Watcher) ExpiryCollector(name string) prometheus.Collector {
	// The listener is a constant label, so that each listener's collector
	// has its own descriptor and several register side by side.
	return expiryCollector{w: w, desc: prometheus.NewDesc(ExpiryMetric,
		"NotAfter of the certificate a TLS listener serves, in seconds since the epoch (no sample until one is loaded).",
		nil, prometheus.Labels{"listener": name})}
}

type expiryCollector struct {
	w    *Watcher
	desc *prometheus.Desc
}

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	if c.w == nil {
		return
	}
	cert := c.w.Certificate()
	if cert == nil || cert.Leaf == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(cert.Leaf.NotAfter.Unix()))
}
