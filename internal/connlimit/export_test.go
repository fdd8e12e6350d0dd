package connlimit

import (
	"net"
	"net/netip"
	"testing"
)

// PeerOf is peerOf, for the external tests.
func PeerOf(a net.Addr) netip.Addr { return peerOf(a) }

// Resolved is l with its defaults filled in.
func Resolved(l Limits) Limits { return l.resolved() }

// Unlimited turns the per-peer request limit off until the test ends: the
// broken variant the tests must catch.
func Unlimited(t testing.TB) {
	unlimitedRequests = true
	t.Cleanup(func() { unlimitedRequests = false })
}
