// Package authz puts fencecheck's decision on the wire: the Envoy ext_authz
// v3 gRPC server (Server), the Envoy ext_proc v3 server (ExtProc), and the
// HTTP forward-auth endpoint (HTTPHandler) for proxies without gRPC. All
// read the same inputs (API.md, "Envoy ext_authz"):
//
//	input             default             route option (context_extensions / query)
//	lock key          x-fence-key         fence_key: a literal, or "orders/{2}" over path segments
//	presented fence   x-fence-token       fence_header
//	ownership proof   x-fence-lock-id     —
//	policy            holder              fence_policy: holder | latest | off
//	mode              enforce             fence_mode: enforce | dry-run | warn
//	write methods     all but GET/HEAD/OPTIONS  fence_methods: "POST,PUT" | "*"
//	route name        ""                  fence_route (audit and logs only)
//	write barrier     off                 fence_barrier: on | off (ext_proc only)
//	barrier maxWrite  30s                 fence_max_write: a Go duration
//
// The write barrier (fencecheck) needs an edge that sees the upstream's
// response: ext_proc does (completion at the response headers), ext_authz
// and forward-auth do not. A route that asks them for it is misconfigured:
// its writes fail closed (503 "unavailable", logged at warn as for an
// unknown fence_policy); reads still pass.
//
// Choices the wire contract leaves open, made here:
//   - A fence_key template's "{N}" is the Nth path segment, percent-decoded
//     (so "/orders/%34%32" locks "orders/42", as the upstream will read it);
//     a missing or empty segment leaves the key empty, which is denied 400
//     "malformed". A template that does not parse is the same 400, logged at
//     warn as a route misconfiguration. A path a normaliser would change
//     ("//", "." or ".." segments, raw or percent-encoded, an encoded "/")
//     is refused with the same 400: its segments are not the resource the
//     upstream will write.
//   - A fence input header (x-fence-key, the fence header, x-fence-lock-id)
//     sent more than once is 400 "malformed", whichever copy is current:
//     the upstream may read another copy than the check did. Proxies join
//     duplicates with commas, so a key header holding a comma is treated
//     the same (a key with a comma can still come from fence_key).
//   - An unreadable fence_methods makes every method a write (fail closed);
//     an unknown fence_policy or fence_mode is a 503 "unavailable".
//   - The denial body's "key" is the raw key: it came from the caller's own
//     header or path and goes back only to that caller. LockIds are never
//     echoed, and audit events carry only the key's hash unless raw-key
//     auditing is on.
//   - Allowed: x-fence-verified is set (overwriting) only for a write whose
//     fence was checked and is current; otherwise a client-sent
//     x-fence-verified is removed. x-fence-lock-id is always removed.
//     Dry-run would-denies reach upstream with x-fence-would-deny: <reason>.
package authz
