package lockstore

import "time"

// MaxWriteLimit bounds WriteAdmission.MaxWrite. An entry that outlives a
// day protects nothing a lock TTL would not, and the bound keeps now+maxWrite
// far from any overflow in every backend's arithmetic.
const MaxWriteLimit = 24 * time.Hour

// DefaultMaxInFlight is WriteAdmission.MaxInFlight when unset: how many
// unfinished writes one key may have registered at once. Legitimate load is
// one holder's concurrent writes under one fence; a thousand in flight on
// one key is far beyond any API's per-resource concurrency, while it keeps
// an abandoning client from piling up entries without bound.
const DefaultMaxInFlight = 1024

// MaxInFlightLimit bounds WriteAdmission.MaxInFlight: the cap is what keeps
// the per-key work of the backends that read a key's entries as one record
// (bolt, Firestore: a document has a 1 MiB limit) bounded.
const MaxInFlightLimit = 8192
