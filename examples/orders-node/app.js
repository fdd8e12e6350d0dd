// The orders API: Express + PostgreSQL (or Redis), fenced to the data with
// @fencegate/guard. PUT /orders/:id writes under the fence the edge
// verified (and the holder's proof); "Prefer: respond-async" answers 202 at
// once and commits later (GET /jobs/:id tells how it ended).
import express from 'express';
import { Guard, KeySet, fenceOf, refuse, refuseStale } from '@fencegate/guard';
import { FenceTable } from '@fencegate/guard/pg';
import { fencedSet } from '@fencegate/guard/redis';

/**
 * pgStore keeps one row per order: its body and, for the proof, its
 * history of committed fences appended in the write's own transaction
 * (the array is the commit order). helper false: the same write without
 * the fence comparison.
 */
export async function pgStore(pool, table, helper = true) {
  const fences = new FenceTable(`${table}_fences`);
  await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (key text PRIMARY KEY, body text, fence bigint, history bigint[] NOT NULL DEFAULT '{}')`);
  await fences.create(pool);
  const write = (q, f, body) =>
    q.query(
      `INSERT INTO ${table} (key, body, fence, history) VALUES ($1, $2, $3, ARRAY[$3::bigint])
       ON CONFLICT (key) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence, history = ${table}.history || EXCLUDED.fence`,
      [f.key, body, Number(f.fence)],
    );
  return {
    commit: async (f, body) => {
      if (!helper) return (await write(pool, f, body), { applied: true, fence: f.fence, stored: f.fence });
      // The claim and the write in one transaction: a lower fence never commits.
      return fences.commit(pool, f.key, f.fence, (tx) => write(tx, f, body));
    },
    read: async (key) => (await pool.query(`SELECT body, fence FROM ${table} WHERE key = $1`, [key])).rows[0],
    histories: async () => {
      const out = {};
      for (const r of (await pool.query(`SELECT key, history FROM ${table}`)).rows) out[r.key] = r.history.map(Number);
      return out;
    },
    drop: () => pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_fences`),
  };
}

/**
 * redisStore sets one key per order. For the proof it records each commit
 * under a per-key queue held around the one Redis call that commits, so
 * the record is Redis's order.
 */
export function redisStore(redis, prefix, helper = true) {
  const chains = new Map();
  const hist = {};
  const serial = (key, fn) => {
    const p = (chains.get(key) ?? Promise.resolve()).then(fn, fn);
    chains.set(key, p.catch(() => {}));
    return p;
  };
  return {
    commit: (f, body) =>
      serial(f.key, async () => {
        const res = helper
          ? await fencedSet(redis, { key: prefix + f.key, fence: f.fence, value: JSON.stringify({ body, fence: f.fence }) })
          : (await redis.set(prefix + f.key, JSON.stringify({ body, fence: f.fence })), { applied: true, fence: f.fence, stored: f.fence });
        if (res.applied) (hist[f.key] ??= []).push(Number(f.fence));
        return res;
      }),
    read: async (key) => {
      const v = await redis.get(prefix + key);
      return v ? JSON.parse(v) : undefined;
    },
    histories: async () => structuredClone(hist),
    drop: async () => {},
  };
}

/**
 * createApp: store from pgStore/redisStore; proofs a KeySet (or undefined:
 * no proofs); maxHoldMs the time each write is held between the edge's
 * check and its commit (0–maxHoldMs at random; the demo uses a fixed
 * queueDelayMs for queued writes).
 */
export function createApp({ store, proofs, maxHoldMs = 0, queueDelayMs }) {
  const app = express();
  const guard = new Guard({ key: (req) => `orders/${req.params.id}`, proofs });
  const jobs = new Map();
  let nextJob = 0;
  const stats = { applied: 0, refusedSync: 0, refusedAsync: 0, failed: 0, pending: new Set() };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  // POST /jobs/drain runs the queued writes now (the demo's slow worker
  // catching up at a known moment, whatever the machine's load).
  let drained;
  let drain = new Promise((r) => (drained = r));

  app.put('/orders/:id', express.text({ type: '*/*', limit: '64kb' }), guard.express(), async (req, res) => {
    const f = fenceOf(req); // the key and the fence the edge verified, the proof checked
    const body = typeof req.body === 'string' ? req.body : '';
    const hold = Math.random() * maxHoldMs;
    if (req.get('prefer') === 'respond-async') {
      const id = String(++nextJob);
      const job = { state: 'pending' };
      jobs.set(id, job);
      const p = (async () => {
        await Promise.race([sleep(queueDelayMs ?? hold), drain]);
        try {
          const r = await store.commit(f, body);
          if (r.applied) {
            stats.applied++;
            job.state = 'applied';
          } else {
            stats.refusedAsync++;
            Object.assign(job, { state: 'refused', reason: 'stale', presented: r.fence, current: r.stored });
          }
        } catch (e) {
          stats.failed++;
          Object.assign(job, { state: 'failed', reason: e.message });
        }
      })();
      stats.pending.add(p);
      p.finally(() => stats.pending.delete(p));
      return res.status(202).json({ job: id });
    }
    await sleep(hold);
    let r;
    try {
      r = await store.commit(f, body);
    } catch {
      stats.failed++;
      return refuse(req, res, 'unavailable');
    }
    if (!r.applied) {
      stats.refusedSync++;
      return refuseStale(req, res, r); // 409 stale, the edge's body, naming the newer fence
    }
    stats.applied++;
    res.json({ fence: f.fence, key: f.key });
  });

  app.get('/orders/:id', async (req, res) => {
    const o = await store.read(`orders/${req.params.id}`);
    if (!o) return res.status(404).json({});
    res.json({ body: o.body, fence: String(o.fence).padStart(15, '0') });
  });

  app.post('/jobs/drain', async (req, res) => {
    drained();
    drain = new Promise((r) => (drained = r));
    await Promise.all([...stats.pending]);
    res.json({ drained: true });
  });

  app.get('/jobs/:id', (req, res) => {
    const j = jobs.get(req.params.id);
    if (!j) return res.status(404).json({});
    res.json(j);
  });

  return { app, stats, settle: () => Promise.all([...stats.pending]) };
}

export { KeySet };
