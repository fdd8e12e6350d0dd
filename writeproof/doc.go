// Package writeproof signs and verifies write proofs: a compact token,
// signed by the gateway with Ed25519 at acquire, that lets its bearer write
// under one fence of one key and nothing else.
//
// A fence is not a secret (fences count up from 1, and denials may name the
// current one), so a route that must refuse forgers as well as slow holders
// asks for a proof (route option fence_proof=signed). Unlike the lockId, a
// proof cannot release or extend the lock, so it can be handed to code that
// only writes, and an API behind the proxy can verify it offline against the
// gateway's public keys (GET /v1/proof/keys) in its own conditional write.
//
// # Format
//
//	v1.<kid>.<base64url(payload)>.<base64url(signature)>
//
// Base64url is unpadded (RFC 4648 §5, no '='). kid is 1 to 32 characters of
// [A-Za-z0-9_-]. The payload is exactly 80 bytes:
//
//	offset  size  field
//	0       8     fence, unsigned big-endian (1 … 999999999999999)
//	8       32    SHA-256 of the key in Unicode NFC (lockstore.KeyDigest)
//	40      32    SHA-256 of the lockId (binds the holder without revealing it)
//	72      8     issuedAtMs, unsigned big-endian (gateway clock; informative)
//
// The signature is Ed25519 over
//
//	"fencegate write proof v1" 0x00 kid 0x00 payload
//
// so a signature made by the same key for anything else (another version,
// another kid's slot) never verifies as a proof. A proof is about 200
// characters: it fits any header.
//
// There is no expiry: at the edge, a proof is only as good as its fence,
// and the fence stops being current as soon as the lock is lost or
// re-acquired; an offline verifier compares fences (its stored fence must
// not be newer) for the same reason. issuedAtMs is there for people.
//
// # Keys and rotation
//
// A Signer holds one or more keys: the first signs, every one verifies.
// Rotate by adding the new key second (gateways learn to verify it), then
// moving it first (proofs are signed by it), then, once no proof signed by
// the old key matters any more, removing the old one.
package writeproof
