// Fences and keys as the Go side reads them (lockstore.ParseFence,
// lockstore.NormalizeKey).

/** Digits in a fence: always 15, zero-padded. */
export const FENCE_DIGITS = 15;
/** The largest fence a store may issue (lockstore.FenceMax). */
export const FENCE_MAX = 900_000_000_000_000;
/** A key's limit in bytes of UTF-8 after NFC. */
export const MAX_KEY_BYTES = 512;

/** parseFence reads exactly 15 ASCII digits, at least 1; undefined otherwise. */
export function parseFence(s: unknown): number | undefined {
  if (typeof s !== 'string' || s.length !== FENCE_DIGITS || !/^[0-9]{15}$/.test(s)) return undefined;
  const n = Number(s); // < 10^15 < 2^53: exact
  return n >= 1 ? n : undefined;
}

/** formatFence writes n as a 15-digit fence. */
export function formatFence(n: number | bigint | string): string {
  return String(n).padStart(FENCE_DIGITS, '0');
}

/**
 * normalizeKey is the key every lock operation and proof names: Unicode
 * NFC of well-formed text, 1 to 512 bytes of UTF-8. A raw key longer than
 * 4 × 512 UTF-16 units cannot normalise to 512 bytes and is refused before
 * normalising (the cost bound).
 */
export function normalizeKey(key: unknown): string | undefined {
  if (typeof key !== 'string' || key === '' || key.length > 4 * MAX_KEY_BYTES) return undefined;
  if (!key.isWellFormed()) return undefined;
  const n = key.normalize('NFC');
  if (Buffer.byteLength(n, 'utf8') > MAX_KEY_BYTES) return undefined;
  return n;
}

/**
 * headerText decodes a header value as Node hands it over (each byte one
 * latin1 character) into the UTF-8 text the client sent; undefined when
 * the bytes are not UTF-8.
 */
export function headerText(v: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  if (!/[^\x00-\x7f]/.test(v)) return v;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(v, 'latin1'));
  } catch {
    return undefined;
  }
}
