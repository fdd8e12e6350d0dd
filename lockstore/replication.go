package lockstore

import "context"

// Replication says how an acknowledged acquire survives a failover of the
// store, as far as the store can tell from where the gateway sits.
type Replication struct {
	// Mode is one of the Replication* constants.
	Mode string `json:"mode"`
	// Detail is the evidence, for operators (settings, standby counts);
	// it holds no key, lockId or credential.
	Detail string `json:"detail,omitempty"`
}

// Replication modes.
const (
	// ReplicationSynchronous: an acquire is acknowledged only once a standby
	// has it (PostgreSQL synchronous replication, Redis ack=replicas), so a
	// promoted standby has every fence handed out, with no clock
	// assumption.
	ReplicationSynchronous = "synchronous"
	// ReplicationAsynchronous: standbys exist and may lag; on a failover
	// only the clock floor (FloorClock) keeps fences from repeating.
	ReplicationAsynchronous = "asynchronous"
	// ReplicationNone: no standby is attached; a restore from a backup is
	// the loss the clock floor guards against.
	ReplicationNone = "none"
	// ReplicationUnknown: the store could not tell (e.g. the role may not
	// read pg_stat_replication).
	ReplicationUnknown = "unknown"
)

// ReplicationReporter is implemented by stores that can report their
// Replication. The gateway logs it at start, exports it as
// fencegate_store_replication and shows it in /readyz.
type ReplicationReporter interface {
	Replication(ctx context.Context) (Replication, error)
}
