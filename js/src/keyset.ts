// The gateway's published proof keys (GET /v1/proof/keys), fetched, cached
// and paced as fenceguard.KeySet does.
import { Verifier, type VerifyResult } from './proof.js';

/** Defaults, as fenceguard's. */
export const DEFAULT_MAX_AGE_MS = 5 * 60_000;
export const DEFAULT_MIN_REFRESH_MS = 10_000;
export const DEFAULT_FETCH_TIMEOUT_MS = 2_000;
const NO_KEYS_RETRY_MS = 1_000;
/** The key set document read is at most this many bytes. */
export const MAX_KEY_SET_BYTES = 1 << 20;

/** A verifier the guard can ask: a KeySet, or staticKeys(verifier). */
export interface ProofVerifier {
  /** unavailable: no keys to decide with (answered 503, never 403). */
  verify(proof: string, key: string, fence: string): Promise<VerifyResult | { ok: false; error: 'unavailable' }>;
}

/** staticKeys verifies against a fixed set (tests; keys shipped with the API). */
export function staticKeys(v: Verifier): ProofVerifier {
  return { verify: async (proof, key, fence) => v.verify(proof, key, fence) };
}

export interface KeySetOptions {
  /** How long fetched keys are used before the next verification fetches again. */
  maxAgeMs?: number;
  /** The least time between two fetches, whatever asks for them. */
  minRefreshMs?: number;
  /** Bounds each fetch. */
  fetchTimeoutMs?: number;
  /** The fetch to use (globalThis.fetch): give it your TLS agent. */
  fetch?: typeof fetch;
  /** Warnings when a fetch fails (never the URL, which may hold credentials). */
  onWarn?: (message: string) => void;
  /** A monotonic clock in ms (tests). */
  now?: () => number;
}

/**
 * KeySet verifies proofs against the keys a gateway publishes at url,
 * fetched on first use and cached. A proof under a kid the cache does not
 * know fetches again at once (at most once per minRefreshMs); keys older
 * than maxAgeMs are fetched again; a failed fetch keeps the keys it has
 * (public keys: a gateway outage must not stop the API's writes); with none
 * fetched yet, verification is 'unavailable'. One fetch at a time; the
 * clock only paces fetches.
 */
export class KeySet implements ProofVerifier {
  readonly #url: string;
  readonly #maxAge: number;
  readonly #minRefresh: number;
  readonly #timeout: number;
  readonly #fetch: typeof fetch;
  readonly #warn: (m: string) => void;
  readonly #now: () => number;
  #v: Verifier | undefined;
  #fetchedAt = 0;
  #attemptedAt: number | undefined;
  #gen = 0;
  #inflight: Promise<void> | undefined;

  constructor(url: string, o: KeySetOptions = {}) {
    this.#url = url;
    this.#maxAge = o.maxAgeMs && o.maxAgeMs > 0 ? o.maxAgeMs : DEFAULT_MAX_AGE_MS;
    this.#minRefresh = o.minRefreshMs && o.minRefreshMs > 0 ? o.minRefreshMs : DEFAULT_MIN_REFRESH_MS;
    this.#timeout = o.fetchTimeoutMs && o.fetchTimeoutMs > 0 ? o.fetchTimeoutMs : DEFAULT_FETCH_TIMEOUT_MS;
    this.#fetch = o.fetch ?? globalThis.fetch;
    this.#warn = o.onWarn ?? ((m) => process.emitWarning(m));
    this.#now = o.now ?? (() => performance.now());
  }

  /** verify checks proof for key and fence, fetching keys as needed. */
  async verify(proof: string, key: string, fence: string): Promise<VerifyResult | { ok: false; error: 'unavailable' }> {
    let v = this.#v;
    let gen = this.#gen;
    const now = this.#now();
    const due = v !== undefined && now - this.#fetchedAt >= this.#maxAge && now - (this.#attemptedAt ?? -Infinity) >= this.#minRefresh;
    if (v === undefined || due) {
      await this.#refresh(gen);
      v = this.#v;
      gen = this.#gen;
      if (v === undefined) return { ok: false, error: 'unavailable' };
    }
    let r = v.verify(proof, key, fence);
    if (!r.ok && r.error === 'unknown-key' && this.#now() - (this.#attemptedAt ?? -Infinity) >= this.#minRefresh) {
      await this.#refresh(gen);
      if (this.#v !== undefined && this.#v !== v) r = this.#v.verify(proof, key, fence);
    }
    return r;
  }

  /** refresh fetches now (paced), for an API that wants keys before its first write. */
  async refresh(): Promise<boolean> {
    await this.#refresh(this.#gen);
    return this.#v !== undefined;
  }

  /** fetches counts the fetches attempted (tests, metrics). */
  get fetches(): number {
    return this.#gen;
  }

  async #refresh(seen: number): Promise<void> {
    while (this.#inflight) await this.#inflight; // one fetch at a time: wait for its result
    if (this.#gen !== seen) return; // another caller fetched meanwhile
    const pace = this.#v === undefined ? Math.min(this.#minRefresh, NO_KEYS_RETRY_MS) : this.#minRefresh;
    if (this.#attemptedAt !== undefined && this.#now() - this.#attemptedAt < pace) return;
    this.#inflight = this.#fetchOnce().finally(() => {
      this.#inflight = undefined;
    });
    await this.#inflight;
  }

  async #fetchOnce(): Promise<void> {
    let v: Verifier | undefined;
    let err: unknown;
    try {
      v = await this.#load();
    } catch (e) {
      err = e;
    }
    this.#gen++;
    this.#attemptedAt = this.#now();
    if (v) {
      this.#v = v;
      this.#fetchedAt = this.#attemptedAt;
    } else {
      this.#warn(`fencegate: fetching the gateway's proof keys failed (${describe(err)}); keeping the keys already fetched: ${this.#v !== undefined}`);
    }
  }

  async #load(): Promise<Verifier> {
    const signal = AbortSignal.timeout(Math.ceil(this.#timeout));
    const res = await this.#fetch(this.#url, { headers: { accept: 'application/json' }, signal });
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new Error(`status ${res.status}`);
    }
    const declared = Number(res.headers.get('content-length') ?? '0');
    if (declared > MAX_KEY_SET_BYTES) {
      await res.body?.cancel();
      throw new Error('key set larger than 1 MiB');
    }
    const chunks: Uint8Array[] = [];
    let n = 0;
    if (res.body) {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        n += value.byteLength;
        if (n > MAX_KEY_SET_BYTES) {
          await reader.cancel();
          throw new Error('key set larger than 1 MiB');
        }
        chunks.push(value);
      }
    }
    return Verifier.fromKeySet(JSON.parse(Buffer.concat(chunks).toString('utf8')));
  }
}

function describe(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  // undici's TypeError("fetch failed") keeps the reason in cause; neither
  // names the URL.
  const c = (e as { cause?: { code?: string; message?: string } }).cause;
  return c ? `${e.message}: ${c.code ?? c.message ?? ''}` : e.name === 'TimeoutError' ? 'timed out' : e.message;
}
