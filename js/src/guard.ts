// The resource-side check for Node: what fenceguard.Guard does, over one
// core (check) and three adapters (node:http, Express, Fastify).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { headerText, normalizeKey, parseFence } from './fence.js';
import {
  denial,
  edgeDecisionId,
  HEADER_DECISION_ID,
  HEADER_KEY,
  HEADER_PROOF,
  HEADER_VERIFIED,
  type Denial,
  type Reason,
} from './denial.js';
import { PROOF_MAX_LENGTH } from './proof.js';
import type { ProofVerifier } from './keyset.js';

/** What the guard verified for a request. */
export interface Fence {
  /** The handler's key, NFC. */
  key: string;
  /** 15 digits, at least 1. */
  fence: string;
  /** A signed write proof for key and fence verified (proofs set). */
  proven: boolean;
}

/** A fenced commit's outcome (the pg and redis helpers). */
export interface Result {
  /** The write was committed under fence, now the key's stored fence. */
  applied: boolean;
  /** The fence the write carried. */
  fence: string;
  /** The stored fence after the attempt (the newer one when refused). */
  stored: string;
}

/** Reads a request header's values, one per header line (undefined: none). */
export type HeaderValues = (name: string) => readonly string[] | undefined;

export type CheckResult =
  | { ok: true; fence: Fence }
  | { ok: false; reason: Reason; key: string; presented: string; error: string; decisionId: string };

export interface GuardOptions<Req = IncomingMessage> {
  /** The lock key the handler writes under, from the request (its path). Required. */
  key: (req: Req) => string | Promise<string>;
  /** Requires and verifies a signed write proof: a KeySet, or staticKeys(v). */
  proofs?: ProofVerifier;
}

const fences = new WeakMap<object, Fence>();

/** fenceOf returns the Fence a guard verified for req (the node request, or Express's/Fastify's). */
export function fenceOf(req: object): Fence | undefined {
  return fences.get(req) ?? fences.get((req as { raw?: object }).raw ?? req);
}

/** withFence records f for req (tests; work handed to a queue). */
export function withFence(req: object, f: Fence): void {
  fences.set(req, f);
}

/** nodeHeaders reads a node:http request's header lines. */
export function nodeHeaders(req: IncomingMessage): HeaderValues {
  return (name) => req.headersDistinct[name];
}

/**
 * check is the guard's decision for one request, in fenceguard's order:
 * the handler's key; x-fence-key (once, the same key after NFC); the
 * verified fence (once, 15 digits, at least 1); with proofs, the proof
 * (once, bounded, verified for the key and fence).
 */
export async function check(handlerKey: string, headers: HeaderValues, proofs?: ProofVerifier): Promise<CheckResult> {
  const decisionId = edgeDecisionId(headers(HEADER_DECISION_ID));
  const no = (reason: Reason, error: string, key = '', presented = ''): CheckResult => ({ ok: false, reason, key, presented, error, decisionId });
  const key = normalizeKey(handlerKey);
  if (key === undefined) return no('malformed', "the handler's key is not a valid key");
  const hk = headers(HEADER_KEY);
  if (hk && hk.length > 1) return no('malformed', 'x-fence-key sent twice', handlerKey);
  if (hk && hk.length === 1) {
    const t = headerText(hk[0]!);
    if (t === undefined || normalizeKey(t) !== key) return no('malformed', "x-fence-key names another key than the handler's", handlerKey);
  }
  const vs = headers(HEADER_VERIFIED);
  if (!vs || vs.length === 0 || (vs.length === 1 && vs[0] === '')) return no('missing', 'no x-fence-verified', key);
  if (vs.length > 1) return no('malformed', 'x-fence-verified sent twice', key);
  const fence = vs[0]!;
  if (parseFence(fence) === undefined) return no('malformed', 'x-fence-verified is not a fence', key);
  if (!proofs) return { ok: true, fence: { key, fence, proven: false } };
  const ps = headers(HEADER_PROOF);
  if (!ps || ps.length === 0 || (ps.length === 1 && ps[0] === '')) return no('bad-proof', 'no x-fence-proof', key, fence);
  if (ps.length > 1) return no('malformed', 'x-fence-proof sent twice', key, fence);
  if (ps[0]!.length > PROOF_MAX_LENGTH) return no('bad-proof', 'proof too long', key, fence);
  const r = await proofs.verify(ps[0]!, key, fence);
  if (!r.ok) return no(r.error === 'unavailable' ? 'unavailable' : 'bad-proof', `proof: ${r.error}`, key, fence);
  return { ok: true, fence: { key, fence, proven: true } };
}

/** refusal is the edge's denial for a refused check. */
export function refusal(r: Extract<CheckResult, { ok: false }>): Denial {
  return denial(r.reason, r.key, r.presented, '', r.decisionId);
}

/** staleDenial answers a commit that res refused: 409 stale, current = res.stored. */
export function staleDenial(f: Fence | undefined, res: Result, decisionId = ''): Denial {
  return denial('stale', f?.key ?? '', res.fence || f?.fence || '', res.stored, decisionId);
}

function send(res: ServerResponse, d: Denial): void {
  res.writeHead(d.status, d.headers);
  res.end(d.body);
}

/** refuse answers res with the edge's denial for reason (current: the newer fence, for 'stale'). */
export function refuse(req: IncomingMessage, res: ServerResponse, reason: Reason, current = ''): void {
  const f = fenceOf(req);
  send(res, denial(reason, f?.key ?? '', f?.fence ?? '', current, edgeDecisionId(req.headersDistinct[HEADER_DECISION_ID])));
}

/** refuseStale answers a refused commit: 409 stale naming the stored fence. */
export function refuseStale(req: IncomingMessage, res: ServerResponse, result: Result): void {
  send(res, staleDenial(fenceOf(req), result, edgeDecisionId(req.headersDistinct[HEADER_DECISION_ID])));
}

/**
 * Guard: the middleware. Every request it wraps is a write: wrap the
 * handlers that write, not the reads.
 */
export class Guard<Req extends IncomingMessage = IncomingMessage> {
  readonly #key: (req: Req) => string | Promise<string>;
  readonly #proofs: ProofVerifier | undefined;

  constructor(o: GuardOptions<Req>) {
    if (typeof o?.key !== 'function') throw new TypeError('fencegate: GuardOptions.key is required');
    this.#key = o.key;
    this.#proofs = o.proofs;
  }

  /** check decides for req without answering it. */
  async check(req: Req): Promise<CheckResult> {
    let k: string;
    try {
      k = await this.#key(req);
    } catch {
      return { ok: false, reason: 'malformed', key: '', presented: '', error: 'key: failed', decisionId: edgeDecisionId(req.headersDistinct[HEADER_DECISION_ID]) };
    }
    return check(k, nodeHeaders(req), this.#proofs);
  }

  /**
   * guard answers a refused req with the edge's denial and returns
   * undefined, or records and returns the verified Fence.
   */
  async guard(req: Req, res: ServerResponse): Promise<Fence | undefined> {
    const r = await this.check(req);
    if (!r.ok) {
      send(res, refusal(r));
      return undefined;
    }
    fences.set(req, r.fence);
    return r.fence;
  }

  /** node: wraps a node:http handler; it runs only with a verified fence. */
  node(handler: (req: Req, res: ServerResponse, fence: Fence) => unknown): (req: Req, res: ServerResponse) => Promise<void> {
    return async (req, res) => {
      const f = await this.guard(req, res);
      if (f) await handler(req, res, f);
    };
  }

  /** express: middleware; the fence is fenceOf(req) (and res.locals.fence). */
  express(): (req: Req, res: ServerResponse & { locals?: Record<string, unknown> }, next: (err?: unknown) => void) => void {
    return (req, res, next) => {
      this.guard(req, res).then((f) => {
        if (f) {
          if (res.locals) res.locals.fence = f;
          next();
        }
      }, next);
    };
  }

  /**
   * fastify: a preHandler hook (route option `preHandler`); the fence is
   * fenceOf(request). A refusal is sent through the reply, so Fastify's
   * own hooks see it.
   */
  fastify(): (
    request: { raw: Req },
    reply: { code(n: number): unknown; headers(h: Record<string, string>): unknown; send(b: string | Buffer): unknown },
  ) => Promise<void> {
    return async (request, reply) => {
      const r = await this.check(request.raw);
      if (!r.ok) {
        const d = refusal(r);
        reply.code(d.status);
        reply.headers(d.headers);
        await reply.send(Buffer.from(d.body, "utf8")); // a Buffer: Fastify keeps the content type as set
        return;
      }
      fences.set(request.raw, r.fence);
      fences.set(request, r.fence);
    };
  }
}
