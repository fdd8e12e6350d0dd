package config

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// TestBarrierMaxInFlight: check.barrierMaxInFlight is read, and refused
// outside what the stores accept (before any store sees it), for serve and
// for proxy; the bound is lockstore's.
func TestBarrierMaxInFlight(t *testing.T) {
	if maxBarrierInFlight != lockstore.MaxInFlightLimit {
		t.Fatalf("maxBarrierInFlight = %d, lockstore.MaxInFlightLimit = %d", maxBarrierInFlight, lockstore.MaxInFlightLimit)
	}
	cfg, err := load(t, []string{"--config", writeFile(t, "check: {barrierMaxInFlight: 64}\n")}, nil)
	if err != nil || cfg.Check.BarrierMaxInFlight != 64 {
		t.Fatalf("barrierMaxInFlight 64: %+v, %v", cfg.Check, err)
	}
	for _, bad := range []string{"-1", "8193"} {
		_, err := load(t, []string{"--config", writeFile(t, "check: {barrierMaxInFlight: "+bad+"}\n")}, nil)
		if err == nil || !strings.Contains(err.Error(), "check.barrierMaxInFlight") {
			t.Errorf("barrierMaxInFlight %s: %v, want a problem naming it", bad, err)
		}
		c := Default()
		c.Check.BarrierMaxInFlight = -1
		if err := c.ValidateProxy(); err == nil || !strings.Contains(err.Error(), "check.barrierMaxInFlight") {
			t.Errorf("proxy config with barrierMaxInFlight -1: %v, want a problem naming it", err)
		}
	}
}
