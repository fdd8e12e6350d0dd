package console

import "sync"

// streamSlots counts open event streams, in all and per principal.
type streamSlots struct {
	mu    sync.Mutex
	total int
	by    map[string]int
}

// take reserves a slot for principal (by name; "" with auth off): false
// when the process's maxStreams or the principal's maxStreamsPerPrincipal
// are all in use. With auth off there is one principal, everybody, so only
// the process bound applies.
func (s *streamSlots) take(principal string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= maxStreams || (principal != "" && s.by[principal] >= maxStreamsPerPrincipal) {
		return false
	}
	if s.by == nil {
		s.by = map[string]int{}
	}
	s.total++
	s.by[principal]++
	return true
}

// give returns a slot take reserved.
func (s *streamSlots) give(principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.by[principal]--; s.by[principal] <= 0 {
		delete(s.by, principal)
	}
}
