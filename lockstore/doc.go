// Package lockstore is fencegate's backend contract: the Store interface
// every backend implements, cut by role (Locker, Locks, Inspector,
// EdgeState, Pinger, Describer; optional AuditLog, HeldCounter, LockLister,
// BarrierSweeper, ReplicationReporter, found with As through any wrapper),
// and the pieces of SyncGuard's semantics a store's consumer relies on:
// key normalisation and its bound, hashKey, lockIds, fence formatting,
// errors and codes, the audit trail's events. What every backend does
// alike (prechecks, MapError, storage keys, the clock floor, the write
// barrier's rule in Go) is package lockstore/backend, which only backends
// import. The write barrier's store side (WriteBarrier, barrier.go) is
// part of EdgeState. The lock holder's side (Lock, KeepAlive, RetryPolicy)
// is package lock.
//
// Domain outcomes (contention, an absent lock) are results with OK=false.
// System failures are *Error values carrying a Code; use CodeOf or errors.As
// to branch on them, and IsBadInput to tell a refused input from a fault.
// lockstore imports nothing else of fencegate's.
package lockstore
