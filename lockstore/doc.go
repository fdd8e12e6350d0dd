// Package lockstore is fencegate's lock contract: the Store interface every
// backend implements, and the pieces of SyncGuard's semantics that must be
// identical on every backend — key normalisation, storage-key derivation,
// hashKey, lockIds, fence formatting and the liveness predicate — and the
// steps every backend takes alike, so one change reaches them all: the
// operation preambles (PrecheckAcquire and friends), MapError, NextFenceAt (the clock floor) with
// FenceOverflow, the NoteFence warning and the NewLockInfo view. The
// write barrier's store side (WriteBarrier, barrier.go) is part of Store.
//
// Domain outcomes (contention, an absent lock) are results with OK=false.
// System failures are *Error values carrying a Code; use CodeOf or errors.As
// to branch on them. lockstore imports nothing else of fencegate's.
package lockstore
