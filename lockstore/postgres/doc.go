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
package postgres
