package testutil

import (
	"net"
	"testing"
)

// Listen listens on a free loopback TCP port and closes the listener at
// cleanup (closing it earlier is fine). Prefer it to FreePort wherever the
// code under test can take a listener: the port is never free for
// someone else to take in between.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on a loopback port: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// FreePort returns a loopback port that was free a moment ago, for a
// child process that binds it itself (redis-server, postgres, the
// binary). Racy by nature: another process may take the port before the
// child binds it; use Listen wherever a listener can be passed.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
