// A lock client for fencegate's HTTP lock API (docs/api.md, "Lock API over
// HTTP/JSON"): acquire, extend, release, auto-extend with an AbortSignal
// that fires when the lock is lost, and a fetch that presents the fence.
import { HEADER_KEY, HEADER_LOCK_ID, HEADER_PROOF, HEADER_TOKEN } from './denial.js';
import { isLoopbackHost } from './loopback.js';

/** A lock API error ({"error":{"code","message"}}), or a transport failure. */
export class LockError extends Error {
  readonly code: string;
  readonly status: number;
  constructor(code: string, status: number, message: string) {
    super(message);
    this.name = 'LockError';
    this.code = code;
    this.status = status;
  }
}

/** LockLostError is the reason a held lock's signal aborts with. */
export class LockLostError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LockLostError';
  }
}

export interface LockClientOptions {
  /** The gateway, e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  /**
   * A bearer token; refused over plain http to a host that is not loopback
   * (localhost, 127.0.0.0/8 or ::1 as IP literals; never a name that merely
   * starts with "127.").
   */
  token?: string;
  /** Bounds each call (default 5 s). */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export interface Acquired {
  key: string;
  lockId: string;
  fence: string;
  expiresAtMs: number;
  /** The gateway's signed write proof (with proof.keys configured). */
  proof?: string;
}

export class LockClient {
  readonly #base: URL;
  readonly #token: string | undefined;
  readonly #timeout: number;
  readonly #fetch: typeof fetch;

  constructor(o: LockClientOptions) {
    this.#base = new URL(o.baseUrl);
    if (o.token && this.#base.protocol === 'http:' && !isLoopbackHost(this.#base.hostname)) {
      throw new Error('fencegate lock: a token over plain http to a remote host; use https');
    }
    this.#token = o.token;
    this.#timeout = o.timeoutMs ?? 5_000;
    this.#fetch = o.fetch ?? globalThis.fetch;
  }

  async #call(path: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; body: Record<string, unknown> }> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    const timeout = AbortSignal.timeout(Math.ceil(this.#timeout));
    const res = await this.#fetch(new URL(path, this.#base), {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    const text = await res.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      throw new LockError('Internal', res.status, `fencegate lock: ${path}: status ${res.status}, not JSON`);
    }
    const err = parsed.error as { code?: string; message?: string } | undefined;
    if (err && typeof err === 'object') throw new LockError(err.code ?? 'Internal', res.status, `fencegate lock: ${path}: ${err.message ?? ''}`);
    return { status: res.status, body: parsed };
  }

  /** acquire takes key's lock, or returns undefined when it is held (409 locked). */
  async acquire(key: string, o: { ttlMs?: number; waitMs?: number; signal?: AbortSignal } = {}): Promise<Acquired | undefined> {
    const r = await this.#call('/v1/locks/acquire', { key, ttlMs: o.ttlMs, waitMs: o.waitMs }, o.signal);
    if (r.status === 409) return undefined;
    const b = r.body;
    if (r.status !== 200 || b.ok !== true) throw new LockError('Internal', r.status, 'fencegate lock: acquire: unexpected reply');
    const a: Acquired = { key, lockId: String(b.lockId), fence: String(b.fence), expiresAtMs: Number(b.expiresAtMs) };
    if (typeof b.proof === 'string') a.proof = b.proof;
    return a;
  }

  /** extend moves the lock's expiry to ttlMs from now; undefined when it is gone (404). */
  async extend(lockId: string, ttlMs: number, signal?: AbortSignal): Promise<number | undefined> {
    const r = await this.#call('/v1/locks/extend', { lockId, ttlMs }, signal);
    if (r.status === 404) return undefined;
    return Number(r.body.expiresAtMs);
  }

  /** release frees the lock; false when it was not held (404). */
  async release(lockId: string): Promise<boolean> {
    const r = await this.#call('/v1/locks/release', { lockId });
    return r.status === 200;
  }

  /**
   * hold acquires key and keeps it extended every ttlMs/3 until release().
   * held.signal aborts (reason: LockLostError) when the lock is lost: an
   * extend answered 404, or no extend succeeded before the TTL ran out by
   * the local clock. Undefined when the key is held by another.
   */
  async hold(key: string, o: { ttlMs?: number; waitMs?: number; lockIdHeader?: boolean } = {}): Promise<Held | undefined> {
    const ttl = o.ttlMs ?? 30_000;
    const start = performance.now();
    const a = await this.acquire(key, { ttlMs: ttl, waitMs: o.waitMs });
    if (!a) return undefined;
    return new Held(this, a, ttl, start, o.lockIdHeader ?? false);
  }
}

/** A held lock: its fence, proof, loss signal and fenced fetch. */
export class Held implements Acquired {
  readonly key: string;
  readonly lockId: string;
  readonly fence: string;
  readonly proof?: string;
  expiresAtMs: number;
  readonly #client: LockClient;
  readonly #ttl: number;
  readonly #ac = new AbortController();
  readonly #lockIdHeader: boolean;
  #deadline: number; // local monotonic ms by which the lock has surely expired
  #timer: NodeJS.Timeout | undefined;
  #released = false;

  constructor(client: LockClient, a: Acquired, ttlMs: number, sentAt: number, lockIdHeader: boolean) {
    this.key = a.key;
    this.lockId = a.lockId;
    this.fence = a.fence;
    if (a.proof !== undefined) this.proof = a.proof;
    this.expiresAtMs = a.expiresAtMs;
    this.#client = client;
    this.#ttl = ttlMs;
    this.#lockIdHeader = lockIdHeader;
    // Measured from before the request went out: never later than the store's expiry.
    this.#deadline = sentAt + ttlMs;
    this.#schedule(ttlMs / 3);
  }

  /** Aborts, with a LockLostError, when the lock is lost. */
  get signal(): AbortSignal {
    return this.#ac.signal;
  }

  // The timer is not unref()ed: a held lock is work in progress, and the
  // process stays up until release() (or the loss) ends it.
  #schedule(ms: number): void {
    if (this.#released || this.#ac.signal.aborted) return;
    this.#timer = setTimeout(() => void this.#extend(), Math.max(0, ms));
  }

  #lose(why: string): void {
    clearTimeout(this.#timer);
    if (!this.#ac.signal.aborted) this.#ac.abort(new LockLostError(`fencegate lock: lost: ${why}`));
  }

  async #extend(): Promise<void> {
    if (this.#released) return;
    const sentAt = performance.now();
    if (sentAt >= this.#deadline) return this.#lose('the TTL ran out before an extend succeeded');
    try {
      const exp = await this.#client.extend(this.lockId, this.#ttl, AbortSignal.timeout(Math.max(1, Math.ceil(this.#deadline - sentAt))));
      if (this.#released) return;
      if (exp === undefined) return this.#lose('the gateway no longer holds it');
      this.expiresAtMs = exp;
      this.#deadline = sentAt + this.#ttl;
      this.#schedule(this.#ttl / 3);
    } catch {
      // A transient failure: try again soon, until the deadline.
      this.#schedule(Math.min(this.#ttl / 10, Math.max(0, this.#deadline - performance.now())));
    }
  }

  /** headers are what a fenced write presents to the edge. */
  headers(): Record<string, string> {
    const h: Record<string, string> = { [HEADER_KEY]: this.key, [HEADER_TOKEN]: this.fence };
    if (this.proof) h[HEADER_PROOF] = this.proof;
    if (this.#lockIdHeader) h[HEADER_LOCK_ID] = this.lockId;
    return h;
  }

  /**
   * fetch sends a request with the fence headers, aborted when the lock is
   * lost (and by init.signal). Non-ASCII keys are sent as their UTF-8 bytes.
   */
  fetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    for (const [k, v] of Object.entries(this.headers())) headers.set(k, Buffer.from(v, 'utf8').toString('latin1'));
    const signal = init.signal ? AbortSignal.any([init.signal, this.signal]) : this.signal;
    return globalThis.fetch(input, { ...init, headers, signal });
  }

  /** release stops extending and frees the lock (once). */
  async release(): Promise<boolean> {
    if (this.#released) return false;
    this.#released = true;
    clearTimeout(this.#timer);
    const ok = await this.#client.release(this.lockId);
    if (!this.#ac.signal.aborted) this.#ac.abort(new LockLostError('fencegate lock: released'));
    return ok;
  }
}
