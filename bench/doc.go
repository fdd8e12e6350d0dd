// Package bench holds fencegate's performance benchmarks. Every number is
// measured next to a floor or a peer in the same run and reported as a ratio,
// because the absolute numbers of a shared machine move from minute to
// minute while the ratio of two adjacent measurements moves much less:
//
//   - the gateway's lock API (HTTP/JSON and gRPC over loopback) against the
//     same store called in-process, for the bolt, Redis and PostgreSQL
//     stores, and against the bare transport (the same client and listener,
//     a server answering canned replies);
//   - the ext_authz Check of the `fencegate serve` binary on the Redis store
//     against a no-op Authorization server on an identical gRPC stack, each
//     in its own process, closed loop and open loop at a fixed rate
//     (p50/p99/p999), with the server process's and its Redis's CPU per
//     check;
//   - the Redis store's acquire+release cycle against github.com/bsm/redislock
//     on the same Redis and the same connection pool;
//   - memory per held lock: bolt file and process RSS, Redis used_memory.
//
// The benchmarks live in the _test files; TestMain prints the comparison
// table after a benchmark run and writes it to results/. See README.md.
package bench
