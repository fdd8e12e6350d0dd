// Package storetelemetry is the opt-in telemetry decorator of a store's lock
// operations (WithTelemetry: SyncGuard's withTelemetry, docs/design.md
// "Telemetry is opt-in"). It wraps lockstore.Locks and emits a LockEvent per
// operation, off the request path. It is the gateway's (the lock API's
// store metrics, the console), not part of the store contract, so it lives
// under internal/.
package storetelemetry
