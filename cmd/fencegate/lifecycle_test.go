package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLaterListenerFailureClosesEarlierOnes: when a listener cannot be
// built (its address is in use), serve fails and the listeners it had
// already bound are closed: their addresses can be bound again at once.
// The broken variant (closeBuiltOnError off: what serve did before, a
// plain return) leaves the HTTP listener bound, and the test catches it.
func TestLaterListenerFailureClosesEarlierOnes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		close  bool
		leaked bool
	}{{"correct", true, false}, {"broken: no close on build error", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			old := closeBuiltOnError
			closeBuiltOnError = tc.close
			t.Cleanup(func() { closeBuiltOnError = old })

			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			httpAddr, debugAddr := freeAddr(t), freeAddr(t)
			cfg, set, err := loadArgs(t, "--store", "bolt://"+filepath.Join(t.TempDir(), "locks.db"),
				"--http-addr", httpAddr, "--debug-addr", debugAddr, "--grpc-addr", busy.Addr().String(),
				"--authz-addr", "off", "--admission-addr", "off")
			if err != nil {
				t.Fatal(err)
			}
			// http is built first, then grpc (in use), so debug is never
			// reached: only http was bound when the build failed.
			err = serve(context.Background(), cfg, set, discardLogger())
			if err == nil || !strings.Contains(err.Error(), "grpc listener") {
				t.Fatalf("serve = %v, want the grpc listener's error", err)
			}
			ln, err := net.Listen("tcp", httpAddr)
			if leaked := err != nil; leaked != tc.leaked {
				t.Fatalf("http address bound again: %v; leaked %v, want %v", err, leaked, tc.leaked)
			}
			if ln != nil {
				ln.Close()
			}
		})
	}
}

// TestShutdownDelayConfig: --shutdown-delay (and shutdown.delay) is a
// duration from 0 up to config.MaxShutdownDelay; the default is 0.
func TestShutdownDelayConfig(t *testing.T) {
	cfg, _, err := loadArgs(t)
	if err != nil || cfg.Shutdown.Delay != 0 {
		t.Fatalf("default: %v %v", cfg.Shutdown.Delay, err)
	}
	cfg, _, err = loadArgs(t, "--shutdown-delay", "5s")
	if err != nil || cfg.Shutdown.Delay.Std() != 5*time.Second {
		t.Fatalf("5s: %v %v", cfg.Shutdown.Delay, err)
	}
	for _, bad := range []string{"-1s", "10m", "soon"} {
		if _, _, err := loadArgs(t, "--shutdown-delay", bad); err == nil || !strings.Contains(err.Error(), "shutdown") {
			t.Errorf("%s: %v, want a shutdown-delay problem", bad, err)
		}
	}
}
