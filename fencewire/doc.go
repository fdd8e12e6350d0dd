// Package fencewire names the edge's wire contract (docs/api.md) once: the
// x-fence-* headers, the route options (Envoy context_extensions keys and
// forward-auth query parameters), the denial reasons with the status each is
// answered with, and the denial's JSON body.
//
// Every side of the edge spells them through this package: the decision
// (fencecheck), the gateway's transports (authz, proxy), the resource side
// (fenceguard, writeproof), the Go client and the CLI. js/ (@fencegate/guard)
// is held equal to it by fenceguard's shared vectors (testdata/vectors.json).
//
// It imports only the standard library, so that fenceguard, linked into the
// protected API, can use it without the gateway's dependencies.
package fencewire
