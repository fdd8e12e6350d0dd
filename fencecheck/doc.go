// Package fencecheck is fencegate's edge decision: given a lock key, a
// presented fence and optionally a lockId, it reads the backend once and says
// whether a write may pass, and why not. Every denial (and every dry-run or
// warn "would deny") is handed to an Auditor, which writes audit events in
// batches off the request path.
//
// fencecheck knows nothing of gRPC or HTTP: the transports (authz, admission)
// turn a Request out of their own wire format, call Checker.Check and turn the
// Decision back. Check distinguishes the two ways a check can end badly, as
// Caddy's authenticators do: a denial is a Decision with Allowed=false and a
// nil error; a check that could not decide (backend error or deadline)
// returns a non-nil error together with the fail-closed Decision (reason
// "unavailable", status 503), so a transport that ignores the error still
// denies.
//
// The order of evaluation, and what each step costs:
//
//  1. not a write, or policy "off": allow, no backend read;
//  2. no fence: 428 "missing"; a fence that is not 15 digits, an empty or
//     over-long key, or a lockId that is not 22 base64url characters: 400
//     "malformed" — all without a backend read;
//     Then the route's proof mode (ProofMode, proof.go): "lockId" without a
//     lockId, or "signed" without a write proof that verifies (package
//     writeproof) for this key and the presented fence: 403 "bad-proof",
//     still without a backend read, so forged writes cost no store read
//     and learn no current fence. "signed" with no keys configured: 503;
//  3. exactly one Store.Inspect under the per-check deadline (no cache: a
//     cached answer is exactly what would let a stale write through);
//  4. presented < latest issued: 409 "stale"; presented > latest, or nothing
//     ever issued: 409 "unknown";
//  5. policy "holder": no live lock holding the presented fence: 409
//     "not-held". Policy "latest": presented == latest is enough, even if
//     that lock has expired (Kleppmann's rule);
//  6. a presented lockId must match the live lock's lockId (constant-time);
//     no live lock to match: 409 "not-held"; a different lockId: 409
//     "wrong-owner". A verified write proof must have been issued to the
//     live lock of its fence (the SHA-256 of its lockId): else "wrong-owner".
//
// The write barrier (Request.Barrier, set only by an edge that sees the
// upstream's response: the proxy package and authz's ext_proc): step 3 is
// one lockstore.WriteBarrier.Admit per attempt instead of Inspect, which
// reads the same state and, when the fence matches and no write under an
// older fence of the key is unfinished, registers the write as in flight.
// Steps 4–6 are decided on the state Admit read. A current fence kept out by
// unfinished older writes is retried (backoff 5 → 40 ms) within the check's
// timeout, never past the moment those writes count as finished anyway, and
// then refused "draining" (429, Decision.RetryAfter): retriable, never 200
// and never the fail-closed 503. A current, unblocked fence on a key that
// already has its cap of writes in flight (Options.BarrierMaxInFlight) is
// refused "too-many-writes" at once (429, RetryAfter 1): the store
// registered nothing. An admitted write carries a WriteID; the
// transport calls Finish once the upstream's response is complete, or
// Abandon when the exchange failed (the entry then expires MaxWrite after
// admission). An admitted write whose lockId proof fails is denied and its
// entry removed at once. In dry-run and warn a positive evaluation still registers
// the write (so the metrics and the store show what enforce would do), but a
// write that would wait is not held back: it passes at once as a would-deny
// "draining".
//
// Modes: "enforce" denies. "dry-run" and "warn" evaluate the same way but
// allow, with Decision.WouldDeny set and Decision.Reason naming what would
// have been denied; the would-deny is audited. In dry-run and warn an
// unavailable backend also allows (WouldDeny, reason "unavailable", nil
// error): a mode whose promise is "never affects traffic" must not start
// failing requests when the backend does.
package fencecheck
