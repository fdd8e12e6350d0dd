// Package admission is fencegate's Kubernetes validating admission webhook:
// it refuses writes to opted-in objects whose fence annotation is not the
// current fence of their lock key, using the same decision (fencecheck) as
// the Envoy edge check.
//
// # Opting in
//
// An object opts in by carrying two annotations (names configurable):
//
//	fencegate.io/key:   the lock key, e.g. "orders/42"
//	fencegate.io/fence: the fence the writer holds, 15 digits
//
// The webhook configuration should send only such objects (see
// deploy/k8s: a matchConditions CEL expression on the annotations, since
// objectSelector sees only labels); objects without either annotation pass
// untouched anyway.
//
// # Which object is read
//
//   - CREATE: key and fence from the new object.
//   - UPDATE: the fence from the new object (the writer stamps its fence on
//     what it writes). The key from the old object when it has one, else from
//     the new one: an object stays governed by the lock it was under, so an
//     update cannot escape the check by removing or changing the key
//     annotation; re-keying takes the old key's current fence.
//   - DELETE: key and fence from the old object (a delete carries no object
//     of its own), so an object whose fence has been superseded cannot be
//     deleted until the new holder stamps its fence on it.
//   - CONNECT, and anything else: not governed.
//
// A key with no fence is denied with 428 ("missing"); a fence with no key
// is denied with 400 ("malformed"): both are half an opt-in, and half an
// opt-in is far likelier a writer's bug than an intent to be unguarded.
//
// # Answers
//
// Denials carry status.code 409/428/400/503, status.reason (Conflict,
// PreconditionRequired, BadRequest, ServiceUnavailable), a message naming
// the key and both fences, and a status cause typed "fencegate.io/<reason>".
// A backend failure fails closed (503): with failurePolicy Fail the API
// server refuses the write too if the webhook cannot be reached at all.
// Mode "dry-run" allows and audits would-denies; mode "warn" also returns
// them to the client as an admission warning (kubectl prints it).
// Reviews with dryRun set are decided but never audited: the API server
// promises dry-run requests have no side effects, and declares the webhook
// sideEffects: None.
//
// Requests from the gateway's own service account and from configured exempt
// users or groups pass without a check (and are counted).
package admission
