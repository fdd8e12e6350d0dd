package fencecheck

import (
	"net/netip"
	"sync"
)

// waiterShare is the fraction (1/waiterShare) of the Checker's waiter
// slots (Options.BarrierMaxWaiters) that the writes of one key, or of one
// client, may hold at once (issue #26 item 6). With one shared pool, one
// client holding a lock on its own key could park a few hundred writes at
// the barrier and so refuse every other key's handover at once ("draining"
// in milliseconds, though its own wait would have succeeded). With the
// shares, a write on another key, from another client, finds a slot unless
// waiterShare clients (source addresses; see waiterClient) each fill their
// share at once: the documented assumption (SECURITY.md), and the reason
// the share is not smaller. At the default 256 slots: 32 per key, 32 per
// client.
const waiterShare = 8

// waiterSlots are the Checker's barrier waiter slots: at most max writes
// waiting at once over all keys, perKey of one key, perClient of one
// client. The maps hold an entry only while a write waits, so they never
// have more than max entries.
type waiterSlots struct {
	max, perKey, perClient int

	mu       sync.Mutex
	total    int
	byKey    map[string]int
	byClient map[string]int
}

func newWaiterSlots(n int, global bool) *waiterSlots {
	s := &waiterSlots{max: n, perKey: max(1, n/waiterShare), perClient: max(1, n/waiterShare),
		byKey: map[string]int{}, byClient: map[string]int{}}
	if global {
		// The broken variant the tests catch: one pool, no shares.
		s.perKey, s.perClient = n, n
	}
	return s
}

// Why a write that would wait was refused a slot (the label of
// fencegate_barrier_waiters_full_total).
const (
	waitersFullGateway = "gateway"
	waitersFullKey     = "key"
	waitersFullClient  = "client"
)

// take gives a write on key from client ("" : unknown, no client share) a
// slot, or says which bound refused it.
func (s *waiterSlots) take(key, client string) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return false, waitersFullGateway
	case s.byKey[key] >= s.perKey:
		return false, waitersFullKey
	case client != "" && s.byClient[client] >= s.perClient:
		return false, waitersFullClient
	}
	s.total++
	s.byKey[key]++
	if client != "" {
		s.byClient[client]++
	}
	return true, ""
}

// give returns a slot take gave.
func (s *waiterSlots) give(key, client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key)
	}
	if client != "" {
		if s.byClient[client]--; s.byClient[client] <= 0 {
			delete(s.byClient, client)
		}
	}
}

// waiterClient is the client a write's slot is counted under: the IP of
// Request.Peer ("ip:port" or "ip"), an IPv6 address's /64 (one host is
// commonly given a whole /64, as the listeners' connection slots count it),
// or, for a peer that is not an address, one bucket all such peers share
// (a client must not become many clients by spelling its address
// otherwise); "" when unknown.
func waiterClient(peer string) string {
	if peer == "" {
		return ""
	}
	a, err := netip.ParseAddrPort(peer)
	ip := a.Addr()
	if err != nil {
		if ip, err = netip.ParseAddr(peer); err != nil {
			return "not-an-address"
		}
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().Addr().String()
	}
	return ip.String()
}
