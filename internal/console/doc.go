// Package console serves the operator console at /ui: the live locks of
// the store (key as the viewer may see it, fence, holder's lockId hash,
// expiry counting down), the edge's denials streaming in from the audit
// log, and per key a fence timeline (acquisitions, releases, expiries,
// denials), so "why was this write refused" is answered by looking.
//
// Pages are rendered on the server with html/template and work without
// JavaScript; one small embedded script (no inline code, so a CSP of
// default-src 'self' holds) adds the live feed (Server-Sent Events at
// /ui/events) and the countdowns. Nothing is loaded from elsewhere.
//
// Where the data comes from, and what each source can and cannot see:
//
//   - Live locks: lockstore.LockLister on the store, read at most once a
//     second per process whatever the number of viewers, bounded by a
//     limit (and on Redis by a bounded SCAN). Every gateway sees every
//     lock, including SyncGuard clients' locks.
//   - Denials: lockstore.AuditLog, polled once a second per open stream
//     with a since filter. The audit log is shared by every gateway on the
//     store, so each replica's console shows every replica's denials.
//   - Acquisitions, extensions and releases: the store keeps no history,
//     so the console records the lock operations this gateway's lock API
//     served (Recorder, an in-memory ring), and labels them "this gateway".
//     Locks taken through another replica or directly with SyncGuard
//     appear in the timeline only through the live lock and the denials
//     that name their fences. An expiry is inferred: a recorded lock whose
//     expiry passed without a recorded release.
//
// Access: with auth off (loopback dev mode) the console is open like the
// lock API. With tokens, a token needs the "ui" operation to open it,
// "lookup" to see locks and timelines and "audit" to see denials; its key
// prefixes limit which locks, operations and denials it sees (a denial
// needs its raw key for a prefix check, so a prefix-scoped token sees
// denials only when raw keys are audited, or on a key's own timeline). A
// browser presents the token once, to a login form; the console keeps a
// server-side session and gives the browser only its random id, in an
// HttpOnly, SameSite=Strict cookie scoped to /ui. Sessions live in the
// gateway's memory: behind a load balancer without affinity, a viewer
// logs in again when a request lands on another replica. A client that
// can send headers may present "Authorization: Bearer" instead.
package console
