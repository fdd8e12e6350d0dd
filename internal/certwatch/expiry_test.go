package certwatch_test

import (
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/certwatch"
	"github.com/fencegate/fencegate/internal/certwatch/certtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"log/slog"
)

func TestExpiryCollector(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	w, err := certwatch.New(certFile, keyFile, certwatch.Options{
		Logger: slog.New(slog.DiscardHandler), Interval: pollEvery, WaitForFiles: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	// Two listeners on one registry: the same metric, told apart by label.
	c := w.ExpiryCollector("admission")
	reg.MustRegister(c, w.ExpiryCollector("http"))

	if n := testutil.CollectAndCount(c, certwatch.ExpiryMetric); n != 0 {
		t.Fatalf("%d samples before a certificate is loaded, want none", n)
	}

	issued := certtest.NewCA(t, "test CA").Server(t, "webhook", "127.0.0.1")
	issued.Write(t, dir)
	if _, err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := testutil.ToFloat64(c), float64(issued.Cert.NotAfter.Unix()); got != want {
		t.Fatalf("%s = %v, want NotAfter %v", certwatch.ExpiryMetric, got, want)
	}
	if n, err := testutil.GatherAndCount(reg, certwatch.ExpiryMetric); err != nil || n != 2 {
		t.Fatalf("gathered %d samples (%v), want one per listener", n, err)
	}
}
