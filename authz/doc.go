// Package authz puts fencecheck's decision on the wire: the Envoy ext_authz
// v3 gRPC server (Server), the Envoy ext_proc v3 server (ExtProc), and the
// HTTP forward-auth endpoint (HTTPHandler) for proxies without gRPC. All
// read the same inputs (docs/api.md, "Envoy ext_authz"):
//
//	input             default             route option (context_extensions / query)
//	lock key          x-fence-key         fence_key: a literal, or "orders/{2}" over path segments
//	presented fence   x-fence-token       fence_header
//	ownership proof   x-fence-lock-id     —
//	write proof       x-fence-proof       —
//	proof required    none                fence_proof: none | lockId | signed (fencecheck.ProofMode)
//	policy            holder              fence_policy: holder | latest | off
//	mode              enforce             fence_mode: enforce | dry-run | warn
//	write methods     all but GET/HEAD/OPTIONS  fence_methods: "POST,PUT" | "PUT,+PROPFIND" | "*"
//	route name        ""                  fence_route (names a route table entry; else audit and logs only)
//	write barrier     off                 fence_barrier: on | off (ext_proc only)
//	barrier maxWrite  30s                 fence_max_write: a Go duration
//	barrier maxWait   check.timeout       fence_max_wait: a Go duration (with fence_barrier only)
//
// With a route table (Options.Routes, config routes:), a request's route
// is, in order: the entry a trusted caller's fence_route names; a trusted
// caller's own options; the entry its host, path and method match; else
// (a write) 503 "unavailable", or the caller's options with
// check.unmatchedWrites: defaults. A caller that is not trusted cannot
// choose or override an entry. Every transport then builds its check with
// fencecheck.Route.Request; callers' options are compiled once, in a
// bounded cache.
//
// The write barrier (fencecheck) needs an edge that sees the upstream's
// response: ext_proc does (completion at the response headers), ext_authz
// and forward-auth do not. A route that asks them for it is misconfigured:
// its writes fail closed (503 "unavailable", logged at warn as for an
// unknown fence_policy); reads still pass.
//
// Choices the wire contract leaves open, made here:
//   - A fence_key template ("orders/{2}", "orders/{2:int}") is expanded by
//     fencecheck.KeyTemplate.Expand, the same code for every transport. A path that
//     is not canonical under it (one resource must name one lock: "//",
//     dot segments, "%2F", ";", an unneeded percent-escape like "%2B42",
//     a non-ASCII digit or compatibility form like "４２", "042" under
//     {2:int}; README "Key templates"), a missing segment, or a template
//     that does not parse is denied 400 "malformed" before the store is
//     read, with or without a fence; a bad template is logged at warn as
//     a route misconfiguration.
//   - A fence input header (x-fence-key, the fence header, x-fence-lock-id,
//     x-fence-proof) sent more than once is 400 "malformed", whichever copy is current:
//     the upstream may read another copy than the check did. Proxies join
//     duplicates with commas, so a key header holding a comma is treated
//     the same (a key with a comma can still come from fence_key).
//   - A fence_methods that does not parse, or names a non-standard method
//     without the "+" opt-in ("PUTT", "PROPFIND"; "+PROPFIND" is fine),
//     fails every request on the route 503 "unavailable", reads included
//     and whatever its mode; an unknown fence_policy, fence_mode or
//     fence_proof is a 503 "unavailable" for writes.
//   - The denial body's "key" is the raw key: it came from the caller's own
//     header or path and goes back only to that caller. LockIds are never
//     echoed, and audit events carry only the key's hash unless raw-key
//     auditing is on.
//   - Allowed: x-fence-verified is set (overwriting) only for a write whose
//     fence was checked and is current; otherwise a client-sent
//     x-fence-verified is removed. x-fence-lock-id is always removed;
//     x-fence-proof is not (it can only write, and the upstream may verify
//     it itself).
//   - fencecheck.Options.HideCurrentFence empties the denial body's "current".
//     Dry-run would-denies reach upstream with x-fence-would-deny: <reason>.
package authz
