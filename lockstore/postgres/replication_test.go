package postgres

import (
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// TestClassifyReplication: a commit waits for a standby only with both a
// synchronous standby named and synchronous_commit waiting for it.
func TestClassifyReplication(t *testing.T) {
	for _, c := range []struct {
		names, commit            string
		standbys, syncSB, hidden int64
		want                     string
	}{
		{"ANY 1 (s1, s2)", "on", 2, 1, 0, lockstore.ReplicationSynchronous},
		{"s1", "remote_apply", 1, 1, 0, lockstore.ReplicationSynchronous},
		{"s1", "remote_write", 0, 0, 0, lockstore.ReplicationSynchronous}, // commits hang rather than go alone
		{"s1", "local", 1, 1, 0, lockstore.ReplicationAsynchronous},       // local: the commit does not wait
		{"s1", "off", 1, 0, 0, lockstore.ReplicationAsynchronous},
		{"", "on", 2, 0, 0, lockstore.ReplicationAsynchronous},
		{"", "on", 1, 0, 1, lockstore.ReplicationUnknown},
		{"", "on", 0, 0, 0, lockstore.ReplicationNone},
	} {
		got := classifyReplication(c.names, c.commit, c.standbys, c.syncSB, c.hidden)
		if got.Mode != c.want || got.Detail == "" {
			t.Errorf("classifyReplication(%q, %s, %d standbys) = %+v, want mode %s", c.names, c.commit, c.standbys, got, c.want)
		}
	}
}

// TestReplicationOnTheTestServer: the test server has no standby.
func TestReplicationOnTheTestServer(t *testing.T) {
	s := openNS(t, testNS(t))
	defer s.Close()
	r, err := s.Replication(tctx(t))
	if err != nil || r.Mode != lockstore.ReplicationNone {
		t.Fatalf("Replication = %+v, %v; want none", r, err)
	}
}
