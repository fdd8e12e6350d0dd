package postgres

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/lockstore"
)

var _ lockstore.ReplicationReporter = (*Store)(nil)

// replicationSQL reads what decides whether a commit waits for a standby:
// synchronous_standby_names (empty: no synchronous standby) and
// synchronous_commit (off and local do not wait), plus the standbys this
// primary sees. sync_state is NULL for a role without pg_read_all_stats.
const replicationSQL = `SELECT current_setting('synchronous_standby_names'),
	current_setting('synchronous_commit'),
	(SELECT count(*) FROM pg_stat_replication),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)`

// Replication reports whether an acquire's commit waits for a standby:
// synchronous when synchronous_standby_names is set and synchronous_commit
// is on, remote_write or remote_apply (a promoted synchronous standby then
// has every fence; run it with Patroni's synchronous_mode_strict so the
// primary never falls back to committing alone); asynchronous when
// standbys stream without that; none when no standby is attached.
func (s *Store) Replication(ctx context.Context) (lockstore.Replication, error) {
	if err := s.checkOpen("replication"); err != nil {
		return lockstore.Replication{}, err
	}
	var names, commit string
	var standbys, syncStandbys, hidden int64
	if err := s.pool.QueryRow(ctx, replicationSQL).Scan(&names, &commit, &standbys, &syncStandbys, &hidden); err != nil {
		return lockstore.Replication{}, classify(ctx, "replication", err)
	}
	return classifyReplication(names, commit, standbys, syncStandbys, hidden), nil
}

// classifyReplication is Replication's rule, apart for its test.
func classifyReplication(names, commit string, standbys, syncStandbys, hidden int64) lockstore.Replication {
	detail := fmt.Sprintf("synchronous_standby_names=%q synchronous_commit=%s standbys=%d synchronous=%d",
		names, commit, standbys, syncStandbys)
	waits := commit == "on" || commit == "remote_write" || commit == "remote_apply"
	switch {
	case names != "" && waits:
		// Commits wait for a synchronous standby even while none is
		// attached (they hang rather than go unreplicated).
		return lockstore.Replication{Mode: lockstore.ReplicationSynchronous, Detail: detail}
	case hidden > 0:
		return lockstore.Replication{Mode: lockstore.ReplicationUnknown, Detail: detail + " (grant pg_monitor to read the standbys' state)"}
	case standbys > 0:
		return lockstore.Replication{Mode: lockstore.ReplicationAsynchronous, Detail: detail}
	}
	return lockstore.Replication{Mode: lockstore.ReplicationNone, Detail: detail}
}
