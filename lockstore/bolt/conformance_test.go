package bolt

import (
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestConformance runs the shared suite; each namespace is its own file in
// one temporary directory, so reopening a namespace reopens its file.
func TestConformance(t *testing.T) {
	storetest.Run(t, harness(t, func(s *Store) lockstore.Store { return s }))
}

// harness opens bolt stores for the suite, each passed through wrap.
func harness(t *testing.T, wrap func(*Store) lockstore.Store) storetest.Harness {
	dir := t.TempDir()
	return storetest.Harness{
		Open: func(t *testing.T, ns string) lockstore.Store {
			s, err := Open(t.Context(), Config{Path: filepath.Join(dir, ns+".db")})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return wrap(s)
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			if w, ok := s.(interface{ base() *Store }); ok {
				s = w.base()
			}
			if err := s.(*Store).setFence(key, n); err != nil {
				t.Fatalf("setFence: %v", err)
			}
		},
	}
}
