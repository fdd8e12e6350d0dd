// Signed write proofs (package writeproof): parse strictly, verify with
// Ed25519 through node:crypto.
import { createHash, createPublicKey, timingSafeEqual, verify as edVerify, type KeyObject } from 'node:crypto';
import { FENCE_DIGITS, FENCE_MAX, normalizeKey } from './fence.js';

/** The only proof version. */
export const PROOF_VERSION = 'v1';
const SIGNING_CONTEXT = 'fencegate write proof v1';
const PAYLOAD_SIZE = 80;
const SIG_SIZE = 64;
const MAX_KID = 32;
const PAYLOAD_B64 = Math.ceil((PAYLOAD_SIZE * 8) / 6); // 107
const SIG_B64 = Math.ceil((SIG_SIZE * 8) / 6); // 86
/** A proof's length bound: anything longer is malformed before decoding. */
export const PROOF_MAX_LENGTH = PROOF_VERSION.length + 1 + MAX_KID + 1 + PAYLOAD_B64 + 1 + SIG_B64;

/** Why a proof did not verify (writeproof's errors). */
export type ProofError = 'malformed' | 'unknown-key' | 'bad-signature' | 'wrong-key' | 'wrong-fence';

/** What a proof says; the key and lockId only as SHA-256 digests. */
export interface Claims {
  kid: string;
  fence: string;
  keyDigest: Buffer;
  lockIdHash: Buffer;
  issuedAtMs: number;
}

/** The outcome of a verification. */
export type VerifyResult = { ok: true; claims: Claims } | { ok: false; error: ProofError };

/** validKid: 1 to 32 characters of [A-Za-z0-9_-]. */
export function validKid(kid: string): boolean {
  return kid.length >= 1 && kid.length <= MAX_KID && /^[A-Za-z0-9_-]+$/.test(kid);
}

// decodeExact: unpadded base64url of exactly n bytes in its one canonical
// spelling (Go's RawURLEncoding.Strict: no stray low bits).
function decodeExact(s: string, n: number): Buffer | undefined {
  if (s.length !== Math.ceil((n * 8) / 6) || !/^[A-Za-z0-9_-]*$/.test(s)) return undefined;
  const b = Buffer.from(s, 'base64url');
  if (b.length !== n || b.toString('base64url') !== s) return undefined;
  return b;
}

/** keyDigest is the SHA-256 of the NFC key, as a proof carries it. */
export function keyDigest(key: string): Buffer {
  const n = normalizeKey(key);
  // An invalid key matches no proof (Go digests other bytes for it).
  return createHash('sha256').update(n === undefined ? '\0invalid\0' + key : n, 'utf8').digest();
}

interface Parsed {
  claims: Claims;
  payload: Buffer;
  sig: Buffer;
}

/** parseProof reads a proof strictly, checking no signature. */
export function parseProof(s: string): Parsed | undefined {
  if (typeof s !== 'string' || s.length > PROOF_MAX_LENGTH) return undefined;
  const parts = s.split('.');
  if (parts.length !== 4 || parts[0] !== PROOF_VERSION || !validKid(parts[1]!)) return undefined;
  const payload = decodeExact(parts[2]!, PAYLOAD_SIZE);
  const sig = decodeExact(parts[3]!, SIG_SIZE);
  if (!payload || !sig) return undefined;
  const n = payload.readBigUInt64BE(0);
  if (n < 1n || n > BigInt(FENCE_MAX)) return undefined;
  const at = payload.readBigUInt64BE(72);
  if (at > 1n << 62n) return undefined;
  return {
    claims: {
      kid: parts[1]!,
      fence: n.toString().padStart(FENCE_DIGITS, '0'),
      keyDigest: payload.subarray(8, 40),
      lockIdHash: payload.subarray(40, 72),
      issuedAtMs: Number(at),
    },
    payload,
    sig,
  };
}

/** One key of the JWK set GET /v1/proof/keys serves. */
export interface JWK {
  kty: string;
  crv: string;
  kid: string;
  x: string;
  use?: string;
  alg?: string;
}

/** A verifier over a fixed set of Ed25519 public keys. */
export class Verifier {
  readonly #keys: Map<string, KeyObject>;

  private constructor(keys: Map<string, KeyObject>) {
    this.#keys = keys;
  }

  /**
   * fromKeySet reads a key set document ({"keys":[…]}): keys of another
   * type or curve, bad ids, duplicates, or an empty set are refused whole.
   */
  static fromKeySet(doc: unknown): Verifier {
    const keys = (doc as { keys?: unknown } | null)?.keys;
    if (!Array.isArray(keys)) throw new Error('fencegate: key set: no "keys" array');
    const m = new Map<string, KeyObject>();
    for (const k of keys as JWK[]) {
      if (!k || k.kty !== 'OKP' || k.crv !== 'Ed25519') throw new Error('fencegate: key set: a key that is not OKP/Ed25519');
      if (typeof k.kid !== 'string' || !validKid(k.kid)) throw new Error('fencegate: key set: a bad key id');
      if (m.has(k.kid)) throw new Error('fencegate: key set: a key id listed twice');
      if (typeof k.x !== 'string' || !decodeExact(k.x, 32)) throw new Error('fencegate: key set: a public key that is not 32 bytes of base64url');
      m.set(k.kid, createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.x }, format: 'jwk' }));
    }
    if (m.size === 0) throw new Error('fencegate: key set has no keys');
    return new Verifier(m);
  }

  /** kids lists the key ids. */
  kids(): string[] {
    return [...this.#keys.keys()];
  }

  /** verifySignature parses proof and checks its signature, nothing else. */
  verifySignature(proof: string): VerifyResult {
    const p = parseProof(proof);
    if (!p) return { ok: false, error: 'malformed' };
    const pub = this.#keys.get(p.claims.kid);
    if (!pub) return { ok: false, error: 'unknown-key' };
    const msg = Buffer.concat([Buffer.from(SIGNING_CONTEXT + '\0' + p.claims.kid + '\0', 'utf8'), p.payload]);
    if (!edVerify(null, msg, pub, p.sig)) return { ok: false, error: 'bad-signature' };
    return { ok: true, claims: p.claims };
  }

  /** verify: a known key signed proof, for key (after NFC) and fence. */
  verify(proof: string, key: string, fence: string): VerifyResult {
    const r = this.verifySignature(proof);
    if (!r.ok) return r;
    if (!timingSafeEqual(r.claims.keyDigest, keyDigest(key))) return { ok: false, error: 'wrong-key' };
    if (r.claims.fence !== fence) return { ok: false, error: 'wrong-fence' };
    return r;
  }
}
