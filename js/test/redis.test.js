// The Redis helper against a real Redis (REDIS_URL), with ioredis and
// node-redis running the same script.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { fencedSet, fenceKey, migrateLegacy, FENCE_PREFIX, SET_LUA } from '../dist/redis.js';
import { formatFence } from '../dist/index.js';
import { need, ns, vectors } from './helpers.js';

const url = need('REDIS_URL');
const io = new Redis(url, { maxRetriesPerRequest: 1 });
const nr = createClient({ url });
await nr.connect();
after(async () => {
  io.disconnect();
  await nr.quit();
});
const f15 = (n) => formatFence(n);
const clients = { ioredis: io, 'node-redis': nr };

for (const [name, rdb] of Object.entries(clients)) {
  test(`the Go vectors' commit cases and fence keys, ${name}`, async () => {
    await io.script('FLUSH'); // the first call falls back from EVALSHA to EVAL
    for (const c of vectors.commits) {
      const p = ns('redisjs') + ':';
      for (const s of c.steps) {
        const r = await fencedSet(rdb, { key: p + s.key, fence: s.fence, value: 'v' + s.fence });
        assert.deepEqual({ applied: r.applied, stored: r.stored }, { applied: s.applied, stored: s.stored }, `${c.name} ${s.key} ${s.fence}`);
      }
    }
    for (const c of vectors.fenceKeys) {
      if (c.refused) await assert.rejects(fencedSet(rdb, { key: c.key, fence: f15(1), value: 'x' }), RangeError, c.key);
      else assert.equal(fenceKey(c.key), c.fenceKey);
    }
    for (const bad of vectors.fences.filter((f) => !f.valid)) {
      await assert.rejects(fencedSet(rdb, { key: ns('k'), fence: bad.fence, value: 'x' }), RangeError);
    }
  });
}

test('TTL expires the value, never the fence; a non-fence in the fence key is an error', async () => {
  const k = ns('redisjs') + ':ttl';
  assert.ok((await fencedSet(io, { key: k, fence: f15(9), value: 'x', ttlMs: 50 })).applied);
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(await io.exists(k), 0);
  assert.equal((await fencedSet(nr, { key: k, fence: f15(8), value: 'late' })).applied, false);
  await io.set(fenceKey(k), 'garbage');
  await assert.rejects(fencedSet(io, { key: k, fence: f15(10), value: 'x' }), /no fence/);
});

// #26 item 7 in TypeScript: random writes over keys chosen to reach each
// other's fences; no write changes or breaks another key's stored fence.
// The old layout (key + ":fence") run with the same script is caught.
async function violation(set, fenceOf) {
  const p = ns('redisjs') + ':';
  const keys = [];
  for (const b of [p + 'orders/42', p + '{orders/43}']) keys.push(b, b + ':fence', b + ':fence:fence', FENCE_PREFIX + b);
  const values = ['1', f15(1), 'garbage', f15(999999999999999)];
  const model = {};
  for (let i = 0; i < 300; i++) {
    const k = keys[Math.floor(Math.random() * keys.length)];
    const fc = f15(1 + Math.floor(Math.random() * 50));
    let applied;
    try {
      applied = await set(k, fc, values[Math.floor(Math.random() * values.length)]);
    } catch (e) {
      if (e instanceof RangeError) continue; // refused as input: nothing written
      return `write ${i} ${k}: ${e.message}`;
    }
    if (applied !== fc >= (model[k] ?? '')) return `write ${i} ${k} under ${fc}: applied ${applied} with ${model[k]} stored`;
    if (applied) model[k] = fc;
    for (const o of keys) {
      const got = (await io.get(fenceOf(o))) ?? undefined;
      if (got !== model[o]) return `write ${i} to ${k} left ${o}'s stored fence ${got}, want ${model[o]}`;
    }
  }
  return '';
}

test('no write to a value key reaches another key\'s fence; the old layout is caught', async () => {
  for (const rdb of [io, nr]) {
    assert.equal(await violation(async (k, fc, v) => (await fencedSet(rdb, { key: k, fence: fc, value: v })).applied, fenceKey), '');
  }
  const legacy = async (k, fc, v) => (await io.eval(SET_LUA, 2, k, k + ':fence', fc, v, '0'))[0] === 1;
  let caught = 0;
  for (let i = 0; i < 3; i++) if ((await violation(legacy, (k) => k + ':fence')) !== '') caught++;
  assert.equal(caught, 3, 'the old fence key passed: the check cannot fail');
});

test('migrateLegacy keeps the higher fence', async () => {
  const k = ns('redisjs') + ':m';
  await io.set(k + ':fence', f15(12));
  await io.set(fenceKey(k), f15(9));
  assert.equal(await migrateLegacy(nr, k), f15(12));
  assert.equal((await fencedSet(io, { key: k, fence: f15(11), value: 'x' })).applied, false);
  assert.equal(await migrateLegacy(io, ns('none')), '');
});

test('commits follow fence order with the helper; a plain SET does not', async () => {
  // run: per key the current fence jumps every 15–40 ms; 20 writers take
  // it, wait 0–40 ms and commit. Redis runs one command at a time and node
  // keeps replies in order on one connection: the order replies arrive in
  // is the commit order. The broken variant runs until it goes out of
  // order (at most 8 s: a loaded machine slows the workload down).
  async function run(commit, ms, untilInverted = false) {
    const p = ns('redisjs') + ':';
    const cur = [1, 1, 1];
    const top = ['', '', ''];
    let n = 0;
    let inv = 0;
    const end = Date.now() + ms;
    const going = () => Date.now() < end && !(untilInverted && inv > 0);
    const bump = (async () => {
      while (going()) {
        await new Promise((r) => setTimeout(r, 15 + Math.random() * 25));
        cur[Math.floor(Math.random() * 3)] += 1 + Math.floor(Math.random() * 3);
      }
    })();
    const ws = Array.from({ length: 20 }, async () => {
      while (going()) {
        const k = Math.floor(Math.random() * 3);
        const fc = f15(cur[k]);
        await new Promise((r) => setTimeout(r, Math.random() * 40));
        if (await commit(p + 'k' + k, fc)) {
          n++;
          if (fc < top[k]) inv++;
          if (fc > top[k]) top[k] = fc;
        }
      }
    });
    await Promise.all([bump, ...ws]);
    return { n, inv };
  }
  const ok = await run(async (k, fc) => (await fencedSet(io, { key: k, fence: fc, value: fc })).applied, 1500);
  assert.ok(ok.n > 50 && ok.inv === 0, JSON.stringify(ok));
  const broken = await run(async (k, fc) => (await io.set(k, fc), true), 8000, true);
  assert.ok(broken.inv > 0, `a plain SET: ${JSON.stringify(broken)}: the workload cannot tell`);
});
