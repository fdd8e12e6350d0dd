// Package backend is the kit for implementations of lockstore.Store: the
// steps every backend takes alike, so one change reaches them all and the
// conformance suite (lockstore/storetest) holds each to the same rule. It
// is for backend authors only; a consumer of a store needs nothing here
// (roles, results, errors, keys and fences are package lockstore).
//
//   - the operation prechecks (PrecheckAcquire and friends: validate, then
//     the context, before any I/O);
//   - MapError (a failed call: our errors pass, a done context decides,
//     then the driver's mapping);
//   - storage keys (MakeStorageKey, FenceStorageKey, the per-backend
//     limits);
//   - the clock floor (NextFenceAt, FenceFloorAt, FenceFloor and its URL
//     parameter, FenceClockBehind), FenceOverflow and the NoteFence warning;
//   - the liveness predicate IsLive, ListLimit;
//   - the write barrier's rule for stores that apply it in Go
//     (ValidateAdmission, AdmissionMatches, ApplyAdmission, WriteEntry),
//     ValidateWriteID, BarrierPruneBatch, ValidateSweepLimit.
//
// It is public, not internal, because a backend need not live in this
// module: anyone may implement lockstore.Store (a Vault-style physical
// backend, a store of their own) and run lockstore/storetest against it,
// and that backend must take the same steps. Inside this module only the
// backends under lockstore/, storetest and the test helpers import it (a
// test checks it).
package backend
