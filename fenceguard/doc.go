// Package fenceguard is the resource side of fencing: what an API behind a
// fencegate edge adds so that its own commit, not only the edge's check,
// refuses a write under a fence older than one it already committed.
//
// The edge (fencegate proxy, Envoy, nginx, Caddy, Traefik) checks that a
// write's fence is current when the write passes it, and tells the API
// which fence it verified in x-fence-verified. Between that check and the
// API's commit the lock can change hands; an API that commits later (a
// queue, a background job) is outside any edge's view; and a write that
// reaches the API another way is not checked at all. The only place where
// the last step can be made exact is the storage itself: store the fence
// with the data and refuse a write whose fence is lower than the stored
// one, in the same statement (or transaction) as the write.
//
// This package provides the HTTP half:
//
//   - [Guard], a middleware that reads the fence the edge vouched for
//     (x-fence-verified), checks the request is for the lock key the
//     handler expects, optionally verifies the signed write proof
//     (x-fence-proof) offline against the gateway's published keys
//     ([KeySet], GET /v1/proof/keys, cached, refreshed, rotation-aware), and
//     puts the verified [Fence] into the request's context;
//   - [Result], the answer of a fenced commit (applied, or refused as stale
//     with the newer stored fence), and [Refuse]/[RefuseStale], which answer
//     a refusal with the edge's own denial status, headers and JSON body.
//
// The commits themselves are in fenceguard/pgfence (PostgreSQL, pgx) and
// fenceguard/redisfence (Redis, go-redis), so that a user of the
// middleware pulls neither driver. This package imports only the standard
// library and fencegate's writeproof (and through it lockstore and
// golang.org/x/text for key normalisation).
//
// # Same fence allowed, lower fence refused
//
// A holder usually writes several times under one fence, so a commit under
// the fence already stored is applied; only a lower one is refused (in SQL,
// fence <= $new). A fence above the stored one is applied too: fences only
// grow, but they are not consecutive, so nothing may assume fence+1.
//
// # What the guarantee needs
//
// Nothing of clocks: fences are compared, never times. With proofs on
// (Options.Proofs), the fence a commit stores is one the gateway signed for
// this key, so a caller that bypasses the edge can neither invent a fence
// (which would lock every genuine holder out) nor use another key's; a
// replayed older proof is refused by the commit as stale. Without proofs,
// the API must be reachable only through the edge: anyone who can send it
// x-fence-verified can claim any fence.
package fenceguard
