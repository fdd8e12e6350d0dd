// KeySet against a real HTTP server serving the vectors' key set: cached,
// refreshed, unknown kids refetched at a pace, bounded, failures keep keys.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { KeySet } from '../dist/index.js';
import { vectors, listen } from './helpers.js';

const valid = vectors.proofs.find((p) => p.name === 'valid');
const second = vectors.proofs.find((p) => p.name === 'valid, the second key (rotation)');
const unknownKid = vectors.proofs.find((p) => p.name === 'wrong kid: a kid the set does not hold');

// serve answers GET with whatever mode says; counts requests.
async function serve() {
  const st = { mode: 'ok', hits: 0, doc: vectors.keySet };
  const s = createServer((req, res) => {
    st.hits++;
    switch (st.mode) {
      case 'ok':
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify(st.doc));
      case '500':
        res.writeHead(500);
        return res.end();
      case 'huge':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"keys":[' + ' '.repeat(1 << 20));
        return res.end(']}');
      case 'hang':
        return; // never answers
    }
  });
  const port = await listen(s);
  st.url = `http://127.0.0.1:${port}/v1/proof/keys`;
  st.close = () => {
    s.closeAllConnections();
    return new Promise((r) => s.close(r));
  };
  return st;
}

function clock() {
  let t = 1_000_000;
  return { now: () => t, advance: (ms) => (t += ms) };
}

test('fetched once, cached, refreshed after maxAge; a failed fetch keeps the keys', async () => {
  const st = await serve();
  const c = clock();
  const warnings = [];
  const ks = new KeySet(st.url, { now: c.now, onWarn: (m) => warnings.push(m) });
  try {
    for (let i = 0; i < 50; i++) assert.ok((await ks.verify(valid.proof, valid.key, valid.fence)).ok);
    assert.equal(st.hits, 1);
    c.advance(5 * 60_000);
    st.mode = '500';
    assert.ok((await ks.verify(valid.proof, valid.key, valid.fence)).ok, 'a failed fetch dropped the keys');
    assert.equal(st.hits, 2);
    assert.equal(warnings.length, 1);
    assert.ok(!warnings[0].includes('127.0.0.1'), 'the warning names the URL');
    // Still due, but paced: no fetch per verification while failing.
    for (let i = 0; i < 20; i++) await ks.verify(valid.proof, valid.key, valid.fence);
    assert.equal(st.hits, 2);
    c.advance(10_000);
    st.mode = 'ok';
    st.doc = { keys: [vectors.keySet.keys[1]] }; // the gateway removed k1
    assert.equal((await ks.verify(valid.proof, valid.key, valid.fence)).ok, false, 'a removed key still verifies after a successful refresh');
    assert.equal(st.hits, 3);
  } finally {
    await st.close();
  }
});

test('an unknown kid refetches at once, at most once per minRefresh; rotation needs nothing', async () => {
  const st = await serve();
  const c = clock();
  st.doc = { keys: [vectors.keySet.keys[0]] };
  const ks = new KeySet(st.url, { now: c.now });
  try {
    assert.ok((await ks.verify(valid.proof, valid.key, valid.fence)).ok);
    c.advance(10_000);
    st.doc = vectors.keySet; // the gateway added k2
    assert.ok((await ks.verify(second.proof, second.key, second.fence)).ok, 'a new kid was not fetched');
    assert.equal(st.hits, 2);
    for (let i = 0; i < 200; i++) {
      const r = await ks.verify(unknownKid.proof, unknownKid.key, unknownKid.fence);
      assert.equal(r.ok ? 'ok' : r.error, 'unknown-key');
    }
    assert.equal(st.hits, 2, 'made-up kids made it fetch within minRefresh');
    c.advance(10_000);
    await Promise.all(Array.from({ length: 50 }, () => ks.verify(unknownKid.proof, unknownKid.key, unknownKid.fence)));
    assert.equal(st.hits, 3, 'concurrent verifications fetched more than once');
  } finally {
    await st.close();
  }
  // The same check catches a KeySet without the pace.
  const st2 = await serve();
  const unpaced = new KeySet(st2.url, { now: c.now, minRefreshMs: Number.MIN_VALUE });
  try {
    for (let i = 0; i < 20; i++) {
      c.advance(1);
      await unpaced.verify(unknownKid.proof, unknownKid.key, unknownKid.fence);
    }
    assert.ok(st2.hits > 10, `without the pace only ${st2.hits} fetches: the check cannot fail`);
  } finally {
    await st2.close();
  }
});

test('no keys yet: unavailable (503), never bad-proof; bounded in size and time', async () => {
  const st = await serve();
  try {
    for (const mode of ['500', 'huge', 'hang']) {
      st.mode = mode;
      const ks = new KeySet(st.url, { fetchTimeoutMs: 300, onWarn: () => {} });
      const t0 = performance.now();
      const r = await ks.verify(valid.proof, valid.key, valid.fence);
      assert.deepEqual(r, { ok: false, error: 'unavailable' }, mode);
      assert.ok(performance.now() - t0 < 3000, `${mode}: took ${performance.now() - t0} ms`);
    }
  } finally {
    await st.close();
  }
  const ks = new KeySet('http://127.0.0.1:1/v1/proof/keys', { onWarn: () => {} });
  assert.deepEqual(await ks.verify(valid.proof, valid.key, valid.fence), { ok: false, error: 'unavailable' });
});
