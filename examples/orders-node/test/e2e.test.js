// The end-to-end proof for the Node kit (issue 28), the shape of
// e2e/resource_test.go: the real fencegate (on PostgreSQL, with a proof
// key) and the real nginx with the shipped forward-auth config (an edge
// that cannot keep the write barrier) in front of this Express API. Holders
// hand 4 keys over every 150–400 ms with writes in flight (locks taken with
// @fencegate/guard/lock); 32 writers PUT through nginx; the API holds every
// write 0–300 ms between the edge's check and its commit and answers one in
// four 202 at once, committing it later. The store records every commit in
// commit order. With the helper (FenceTable.commit, fencedSet): 0 commits
// under a fence lower than one already committed for the key; without it:
// some. Straight to the API: a replayed proof 409, a forged one 403.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { KeySet } from '@fencegate/guard';
import { LockClient } from '@fencegate/guard/lock';
import { createApp, pgStore, redisStore } from '../app.js';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const { startGateway, freePort } = await import(join(repo, 'js/test/gateway.js'));
const need = (n) => {
  if (!process.env[n]) throw new Error(`${n} is not set: run under scripts/testenv (examples/orders-node/run.sh --prove)`);
  return process.env[n];
};
const hex = () => randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const RUN_MS = Number(process.env.ORDERS_E2E_MS ?? 5000);
const KEYS = 4;

let gw;
let pool;
let redis;
before(async () => {
  const ns = `ordersnode_${hex()}`;
  const sep = need('DATABASE_URL').includes('?') ? '&' : '?';
  gw = await startGateway({
    store: `${need('DATABASE_URL')}${sep}table=${ns}_locks&fenceTable=${ns}_fences&auditTable=${ns}_audit&barrierTable=${ns}_writes`,
    // A check budget under nginx's 1 s auth timeout.
    config: 'check:\n  timeout: 600ms\n',
  });
  pool = new pg.Pool({ connectionString: need('DATABASE_URL'), max: 40 });
  redis = new Redis(need('REDIS_URL'));
  // Warm the gateway's store connections before the first timed run.
  const locks = new LockClient({ baseUrl: gw.url });
  await Promise.all(Array.from({ length: 16 }, async (_, i) => {
    for (let j = 0; j < 5; j++) {
      const a = await locks.acquire(`warmup/${i}`, { ttlMs: 1000 });
      if (a) await locks.release(a.lockId);
    }
  }));
});
after(async () => {
  await gw?.stop();
  await pool?.end();
  redis?.disconnect();
});

// startNginx runs the shipped deploy/nginx/nginx.conf between the gateway and app.
async function startNginx(gatewayAddr, appAddr) {
  const bin = spawnSync('sh', ['-c', 'command -v nginx || echo /usr/sbin/nginx'], { encoding: 'utf8' }).stdout.trim();
  const dir = mkdtempSync(join(tmpdir(), 'orders-node-nginx-'));
  const port = await freePort();
  let conf = readFileSync(join(repo, 'deploy/nginx/nginx.conf'), 'utf8');
  for (const [from, to] of [
    ['listen 127.0.0.1:10080;', `listen 127.0.0.1:${port};`],
    ['server 127.0.0.1:8080;', `server ${gatewayAddr};`],
    ['server 127.0.0.1:3000;', `server ${appAddr};`],
    ['http {', `http {\n access_log ${dir}/access.log;\n client_body_temp_path ${dir}/body;\n proxy_temp_path ${dir}/proxy;\n fastcgi_temp_path ${dir}/fastcgi;\n uwsgi_temp_path ${dir}/uwsgi;\n scgi_temp_path ${dir}/scgi;`],
  ]) {
    assert.equal(conf.split(from).length, 2, `nginx.conf should contain ${from} once`);
    conf = conf.replace(from, to);
  }
  writeFileSync(join(dir, 'nginx.conf'), conf);
  const global = `daemon off; master_process on; worker_processes 1; pid ${dir}/nginx.pid; error_log ${dir}/error.log warn;`;
  const p = spawn(bin, ['-p', dir, '-c', join(dir, 'nginx.conf'), '-g', global], { stdio: 'inherit' });
  for (let i = 0; ; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/catalog/`);
      break;
    } catch {
      if (i > 100) throw new Error('nginx did not start');
      await sleep(50);
    }
  }
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      p.kill('SIGQUIT');
      await new Promise((r) => (p.exitCode !== null ? r() : p.once('exit', r)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function backwards(hs) {
  let commits = 0;
  let back = 0;
  for (const h of Object.values(hs)) {
    let top = 0;
    for (const f of h) {
      commits++;
      if (f < top) back++;
      top = Math.max(top, f);
    }
  }
  return { commits, back };
}

// workload: holders hand keys over with writes in flight; writers write
// through the edge under the current holder's fence and proof.
async function workload(edge, first) {
  const locks = new LockClient({ baseUrl: gw.url });
  const current = new Array(KEYS).fill(undefined);
  const st = { ok: 0, accepted: 0, edgeRefused: 0, apiStale: 0, unavailable: 0, other: 0, handovers: 0, jobs: [] };
  const end = Date.now() + RUN_MS;
  const holders = Array.from({ length: 2 * KEYS }, async (_, h) => {
    const k = h % KEYS;
    while (Date.now() < end) {
      let a;
      try {
        a = await locks.acquire(`orders/${k}`, { ttlMs: 1500 });
      } catch {}
      if (!a) {
        await sleep(10 + Math.random() * 30);
        continue;
      }
      first[k] ??= a;
      current[k] = a;
      st.handovers++;
      await sleep(150 + Math.random() * 250);
      await locks.release(a.lockId).catch(() => {}); // hand over with writes in flight
    }
  });
  const writers = Array.from({ length: 32 }, async () => {
    while (Date.now() < end) {
      const k = Math.floor(Math.random() * KEYS);
      const a = current[k];
      if (!a) {
        await sleep(10);
        continue;
      }
      const headers = { 'x-fence-token': a.fence, 'x-fence-proof': a.proof, 'content-type': 'application/json' };
      if (Math.random() < 0.25) headers.prefer = 'respond-async';
      let r;
      let body;
      try {
        r = await fetch(`${edge}/orders/${k}`, { method: 'PUT', headers, body: '{"qty":1}', signal: AbortSignal.timeout(30_000) });
        body = await r.text();
      } catch {
        st.other++;
        continue;
      }
      let j = {};
      try {
        j = JSON.parse(body);
      } catch {}
      if (r.status === 200) st.ok++;
      else if (r.status === 202) {
        st.accepted++;
        st.jobs.push(j.job);
      } else if (r.status === 409) {
        // The API's 409 names a newer fence and carries no edge decision id.
        if (j.error === 'stale' && j.current > a.fence && j.decisionId === '') st.apiStale++;
        else st.edgeRefused++;
      } else if (r.status === 503) st.unavailable++;
      else st.other++;
    }
  });
  await Promise.all([...holders, ...writers]);
  return st;
}

const results = {};

for (const storeName of ['postgres', 'redis']) {
  for (const helper of [true, false]) {
    const name = `${storeName}, helper ${helper ? 'on' : 'off'}`;
    test(`through nginx, ${name}`, async () => {
      const ns = `ordersnode_${hex()}`;
      const store = storeName === 'postgres' ? await pgStore(pool, ns, helper) : redisStore(redis, `${ns}:`, helper);
      const keySet = new KeySet(`${gw.url}/v1/proof/keys`);
      assert.ok(await keySet.refresh(), 'the key set could not be fetched');
      const { app, stats, settle } = createApp({ store, proofs: keySet, maxHoldMs: 300 });
      const server = createServer(app);
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      const appAddr = `127.0.0.1:${server.address().port}`;
      const edge = await startNginx(gw.url.replace('http://', ''), appAddr);
      const first = new Array(KEYS).fill(undefined);
      try {
        const st = await workload(edge.url, first);
        await settle();
        const { commits, back } = backwards(await store.histories());
        let jobsApplied = 0;
        let jobsRefused = 0;
        for (const id of st.jobs) {
          const j = await (await fetch(`${edge.url}/jobs/${id}`)).json();
          if (j.state === 'applied') jobsApplied++;
          else if (j.state === 'refused' && j.reason === 'stale' && j.current > j.presented) jobsRefused++;
          else assert.fail(`job ${id}: ${JSON.stringify(j)}`);
        }
        const line = `${name}: ${commits} commits, ${back} backwards in fence order; API applied ${stats.applied}, refused ${stats.refusedSync} stale before answering and ${stats.refusedAsync} after (jobs: ${jobsApplied} applied, ${jobsRefused} refused); clients: ${st.ok} 200, ${st.accepted} 202, ${st.edgeRefused} refused by the edge, ${st.apiStale} 409 stale by the API, ${st.unavailable} 503, ${st.other} other; ${st.handovers} handovers`;
        console.log(line);
        results[name] = { commits, back };
        assert.equal(stats.failed, 0);
        // Enough commits and handovers for writes to overtake each other
        // (a loaded machine runs fewer in the same time).
        assert.ok(commits >= 50 && st.handovers > 10, line);
        if (helper) {
          assert.equal(back, 0, line);
          assert.ok(stats.refusedSync + stats.refusedAsync > 0, `the helper refused nothing: the workload does not reach the window. ${line}`);
        } else {
          assert.ok(back > 0, `without the helper nothing went backwards: the proof cannot fail. ${line}`);
        }

        if (helper && storeName === 'postgres') {
          // Straight to the API, past the edge.
          const api = `http://${appAddr}/orders/0`;
          const put = (h) => fetch(api, { method: 'PUT', headers: h, body: '{}' }).then(async (r) => ({ status: r.status, body: await r.json() }));
          const a = first[0];
          const replay = await put({ 'x-fence-verified': a.fence, 'x-fence-proof': a.proof });
          assert.equal(replay.status, 409, `a replayed proof: ${JSON.stringify(replay)}`);
          assert.equal(replay.body.error, 'stale');
          const sig = a.proof.slice(0, -2) + (a.proof.at(-2) === 'A' ? 'B' : 'A') + a.proof.at(-1);
          const forged = await put({ 'x-fence-verified': a.fence, 'x-fence-proof': sig });
          assert.equal(forged.status, 403, `a forged proof: ${JSON.stringify(forged)}`);
          assert.equal(forged.body.error, 'bad-proof');
          const madeUp = await put({ 'x-fence-verified': '000000000999999' });
          assert.equal(madeUp.status, 403);
          const other = first[1];
          const otherKey = await put({ 'x-fence-verified': other.fence, 'x-fence-proof': other.proof });
          assert.equal(otherKey.status, 403, 'another key\'s proof');
        }
      } finally {
        await edge.stop();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
        await store.drop();
      }
    });
  }
}
