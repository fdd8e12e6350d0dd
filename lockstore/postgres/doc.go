// Package postgres is fencegate's PostgreSQL lock store, on pgx/v5.
//
// It keeps SyncGuard's storage layout byte for byte (tables syncguard_locks
// and syncguard_fence_counters, their columns, index names, storage keys,
// the two-step fence key, 15-digit fences and the hashtext advisory lock), so
// SyncGuard TypeScript clients and fencegate can share one fence sequence per
// key. The server's now() is the time authority.
//
// Every operation is one network round trip on a warm connection: release,
// extend and the reads are single statements; acquire is three statements
// pipelined as one pgx batch, which PostgreSQL runs as one implicit
// transaction. Driver errors map to lockstore codes by SQLSTATE and by
// network cause (see classify).
//
// A cancelled or expired context ends the wait at once: pgx closes the
// connection, and PostgreSQL rolls back whatever had not committed. If the
// request had already reached the server, it may still complete there (a
// frozen server answers it when it wakes), so an Aborted or NetworkTimeout
// acquire means "outcome unknown": a lock it might have taken expires with
// its TTL, and its fence is simply never used.
package postgres
