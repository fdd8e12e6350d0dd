// The Redis commit helper for ioredis and node-redis: redisfence's script
// (fenceguard/redisfence/set.lua), bundled at build.
import { createHash } from 'node:crypto';
import { parseFence } from './fence.js';
import type { Result } from './guard.js';
import { sources } from './sources.generated.js';

/** The stored fences' keyspace: the fence of value key K is FENCE_PREFIX + K. */
export const FENCE_PREFIX = 'fencegate.fence:';
/** The fenced SET script and the legacy-fence migration, as Go embeds them. */
export const SET_LUA: string = sources['fenceguard/redisfence/set.lua']!;
export const MIGRATE_LUA: string = sources['fenceguard/redisfence/migrate.lua']!;

const sha = (s: string) => createHash('sha1').update(s).digest('hex');
const SET_SHA = sha(SET_LUA);
const MIGRATE_SHA = sha(MIGRATE_LUA);

/** fenceKey is where the fence of the value key key is stored. */
export function fenceKey(key: string): string {
  return FENCE_PREFIX + key;
}

function checkKey(key: string): void {
  if (typeof key !== 'string' || key === '') throw new RangeError('fencegate redis: empty key');
  if (key.startsWith(FENCE_PREFIX)) {
    throw new RangeError(`fencegate redis: a value key may not start with ${JSON.stringify(FENCE_PREFIX)}: that keyspace holds the stored fences`);
  }
}

/** An ioredis client (Redis, Cluster) or a node-redis client (createClient). */
export type RedisClient = object;

type Runner = (script: string, sha1: string, keys: string[], args: string[]) => Promise<unknown>;

function runner(client: RedisClient): Runner {
  const c = client as Record<string, (...a: unknown[]) => Promise<unknown>>;
  const noscript = (e: unknown) => String((e as Error)?.message ?? '').startsWith('NOSCRIPT');
  if (typeof c.defineCommand === 'function' && typeof c.evalsha === 'function') {
    // ioredis: EVALSHA sha numkeys key… arg…
    return async (script, sha1, keys, args) => {
      try {
        return await c.evalsha!.call(client, sha1, keys.length, ...keys, ...args);
      } catch (e) {
        if (!noscript(e)) throw e;
        return c.eval!.call(client, script, keys.length, ...keys, ...args);
      }
    };
  }
  if (typeof c.evalSha === 'function') {
    // node-redis: evalSha(sha, { keys, arguments })
    return async (script, sha1, keys, args) => {
      try {
        return await c.evalSha!.call(client, sha1, { keys, arguments: args });
      } catch (e) {
        if (!noscript(e)) throw e;
        return c.eval!.call(client, script, { keys, arguments: args });
      }
    };
  }
  throw new TypeError('fencegate redis: want an ioredis or a node-redis client');
}

/** One fenced SET. */
export interface Write {
  /** The value's key (never one starting with FENCE_PREFIX). */
  key: string;
  /** The write's fence (Fence.fence): 15 digits, at least 1. */
  fence: string;
  value: string;
  /** The value's expiry in ms (0 or absent: none); the fence never expires. */
  ttlMs?: number;
  /** The fence's key: absent is fenceKey(key); else it must start with FENCE_PREFIX. */
  fenceKey?: string;
}

/**
 * fencedSet stores w.value at w.key unless a fence higher than w.fence is
 * stored for it: one script, one round trip. A write under the stored
 * fence is applied (a holder writes many times under one fence).
 */
export async function fencedSet(client: RedisClient, w: Write): Promise<Result> {
  if (parseFence(w.fence) === undefined) throw new RangeError(`fencegate redis: fence ${JSON.stringify(w.fence)}: want 15 digits, at least 1`);
  checkKey(w.key);
  const ttl = w.ttlMs ?? 0;
  if (!Number.isSafeInteger(ttl) || ttl < 0) throw new RangeError('fencegate redis: ttlMs: want 0 or a positive integer');
  let fk = w.fenceKey;
  if (fk === undefined || fk === '') fk = fenceKey(w.key);
  else if (!fk.startsWith(FENCE_PREFIX) || fk.length === FENCE_PREFIX.length) {
    throw new RangeError(`fencegate redis: fenceKey must start with ${JSON.stringify(FENCE_PREFIX)} and name a key`);
  }
  const v = await runner(client)(SET_LUA, SET_SHA, [w.key, fk], [w.fence, String(w.value), String(ttl)]);
  if (!Array.isArray(v) || v.length !== 2) throw new Error('fencegate redis: unexpected reply');
  return { applied: Number(v[0]) === 1, fence: w.fence, stored: String(v[1]) };
}

/**
 * migrateLegacy moves the fence an earlier redisfence stored at key +
 * ":fence" to fenceKey(key), keeping the higher one; returns the fence now
 * stored ("" when none). Run it per key before the first write.
 */
export async function migrateLegacy(client: RedisClient, key: string): Promise<string> {
  checkKey(key);
  const v = await runner(client)(MIGRATE_LUA, MIGRATE_SHA, [key + ':fence', fenceKey(key)], []);
  return v === null || v === undefined ? '' : String(v);
}
