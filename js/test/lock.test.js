// The lock client against the real fencegate: acquire, extend, release,
// auto-extend, the loss signal, and a fetch that presents fence and proof.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { LockClient, LockLostError } from '../dist/lock.js';
import { KeySet } from '../dist/index.js';
import { listen, ns } from './helpers.js';
import { startGateway } from './gateway.js';

let gw;
let client;
before(async () => {
  gw = await startGateway();
  client = new LockClient({ baseUrl: gw.url });
});
after(() => gw?.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// within settles as p does, or rejects after ms: a wait that goes wrong
// fails its test instead of hanging the file.
function within(p, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

// untilAborted resolves once signal has aborted, at once if it already has
// (an abort event fired before the listener is never seen again), and
// rejects after ms. Call it before the step that makes the signal fire.
function untilAborted(signal, ms) {
  const fired = signal.aborted
    ? Promise.resolve()
    : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  const p = within(fired, ms, 'the lock-lost signal');
  p.catch(() => {}); // awaited later; not an unhandled rejection while the step runs
  return p;
}

// Each test is bounded too: a wait not wrapped above fails, never hangs.
const bounded = { timeout: 60_000 };

test('acquire, contention, extend, release; the proof verifies offline', bounded, async () => {
  const key = ns('orders') + '/42';
  const a = await client.acquire(key, { ttlMs: 5000 });
  assert.match(a.fence, /^[0-9]{15}$/);
  assert.match(a.lockId, /^[A-Za-z0-9_-]{22}$/);
  assert.equal(await client.acquire(key, { ttlMs: 5000 }), undefined, 'a held key was acquired again');
  const ks = new KeySet(gw.url + '/v1/proof/keys');
  assert.ok((await ks.verify(a.proof, key, a.fence)).ok, 'the gateway\'s proof does not verify');
  assert.equal((await ks.verify(a.proof, key + 'x', a.fence)).ok, false);
  assert.ok((await client.extend(a.lockId, 5000)) > Date.now());
  assert.equal(await client.release(a.lockId), true);
  assert.equal(await client.release(a.lockId), false);
  assert.equal(await client.extend(a.lockId, 5000), undefined);
  const b = await client.acquire(key, { ttlMs: 5000 });
  assert.ok(b.fence > a.fence, 'fences must rise');
  await client.release(b.lockId);
  await assert.rejects(client.acquire('', {}), (e) => e.code === 'InvalidArgument' && e.status === 400);
  assert.throws(() => new LockClient({ baseUrl: 'http://example.com', token: 't' }), /https/);
});

test('hold keeps the lock past its TTL; without auto-extend a competitor takes it', bounded, async () => {
  const key = ns('held');
  // 4 s: past the TTL and the store's liveness tolerance (1 s).
  const h = await client.hold(key, { ttlMs: 1500 });
  await sleep(4000);
  assert.equal(h.signal.aborted, false);
  assert.equal(await client.acquire(key, { ttlMs: 1500 }), undefined, 'auto-extend did not keep the lock');
  await h.release();
  assert.ok(h.signal.aborted);
  // The check above catches a holder that does not extend.
  const bare = await client.acquire(key, { ttlMs: 1500 });
  await sleep(4000);
  const other = await client.acquire(key, { ttlMs: 1500 });
  assert.ok(other && other.fence > bare.fence, 'without extending the lock was still held: the check cannot fail');
  await client.release(other.lockId);
});

test('the signal fires when the lock is lost: taken away, or the gateway gone', bounded, async (t) => {
  const key = ns('lost');
  const h = await client.hold(key, { ttlMs: 1500 });
  const t0 = performance.now();
  const lost = untilAborted(h.signal, 10_000);
  await client.release(h.lockId); // someone else's release: the gateway no longer holds it
  await lost;
  assert.ok(h.signal.reason instanceof LockLostError);
  assert.ok(performance.now() - t0 < 1500, 'lost noticed after the TTL');

  const gw2 = await startGateway();
  t.after(() => gw2.stop());
  const c2 = new LockClient({ baseUrl: gw2.url });
  const h2 = await c2.hold(ns('gone'), { ttlMs: 1500 });
  const t1 = performance.now();
  const gone = untilAborted(h2.signal, 10_000);
  await within(gw2.stop(), 10_000, 'stopping the gateway');
  await gone;
  // By the TTL, measured from before the acquire was sent (+ timer slack on a loaded machine).
  assert.ok(performance.now() - t1 <= 1500 + 300, `the loss was signalled ${performance.now() - t1} ms after the gateway went, past the TTL`);
});

test('held.fetch presents key, fence and proof, and is aborted once the lock is lost', bounded, async () => {
  let seen;
  const s = createServer((req, res) => {
    seen = req.headers;
    if (req.url === '/slow') return; // never answers
    res.end('ok');
  });
  const port = await listen(s);
  try {
    const key = ns('café') + '/1';
    const h = await client.hold(key, { ttlMs: 900 });
    await h.fetch(`http://127.0.0.1:${port}/`, { method: 'PUT', body: 'x' });
    assert.equal(Buffer.from(seen['x-fence-key'], 'latin1').toString('utf8'), key);
    assert.equal(seen['x-fence-token'], h.fence);
    assert.equal(seen['x-fence-proof'], h.proof);
    assert.equal(seen['x-fence-lock-id'], undefined, 'the lockId went along without being asked');
    const slow = h.fetch(`http://127.0.0.1:${port}/slow`, { method: 'PUT', body: 'x' });
    await client.release(h.lockId);
    await assert.rejects(within(slow, 10_000, 'the write after the lock was lost'), (e) => e instanceof LockLostError || e.name === 'AbortError');
  } finally {
    s.closeAllConnections();
    s.close();
  }
});

test('the waits above fail rather than hang: an abort already past, a signal that never fires', bounded, async () => {
  await untilAborted(AbortSignal.abort(), 1_000); // already aborted: at once
  // The pattern this replaced (listen after the step) misses an abort that came first:
  // bounded, it fails where it used to hang the file.
  const already = AbortSignal.abort();
  await assert.rejects(within(new Promise((r) => already.addEventListener('abort', r)), 100, 'late listener'), /not within 100 ms/);
  await assert.rejects(untilAborted(new AbortController().signal, 100), /lock-lost signal: not within 100 ms/);
  const ac = new AbortController();
  const w = untilAborted(ac.signal, 1_000);
  ac.abort();
  await w;
});
