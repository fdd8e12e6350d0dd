// Package lockstore is fencegate's backend contract: the Store interface
// every backend implements, cut by role (Locker, Locks, Inspector,
// EdgeState, Pinger, Describer; optional AuditLog, HeldCounter, LockLister,
// BarrierSweeper, ReplicationReporter, found with As through any wrapper),
// and the pieces of SyncGuard's semantics that must be identical on every
// backend — key normalisation, storage-key derivation, hashKey, lockIds,
// fence formatting and the liveness predicate — and the steps every backend
// takes alike, so one change reaches them all: the operation prechecks
// (PrecheckAcquire and friends), MapError, NextFenceAt (the clock floor)
// with FenceOverflow, the NoteFence warning and the NewLockInfo view. The
// write barrier's store side (WriteBarrier, barrier.go) is part of
// EdgeState. The lock holder's side (Lock, KeepAlive, RetryPolicy) is
// package lock.
//
// Domain outcomes (contention, an absent lock) are results with OK=false.
// System failures are *Error values carrying a Code; use CodeOf or errors.As
// to branch on them, and IsBadInput to tell a refused input from a fault.
// lockstore imports nothing else of fencegate's.
package lockstore
