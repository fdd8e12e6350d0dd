// The PostgreSQL helper against a real PostgreSQL (DATABASE_URL).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { FenceTable, FenceColumn, NoRowError, RECIPE_SQL, isStale, ident } from '../dist/pg.js';
import { formatFence } from '../dist/index.js';
import { need, ns, vectors } from './helpers.js';

const pool = new pg.Pool({ connectionString: need('DATABASE_URL'), max: 30 });
after(() => pool.end());
const f15 = (n) => formatFence(n);

async function fixture(keys) {
  const n = ns('pgjs');
  const table = new FenceTable(`${n}_fences`);
  await table.create(pool);
  await pool.query(`CREATE TABLE ${n}_rows (id text PRIMARY KEY, value text, history bigint[] NOT NULL DEFAULT '{}', fence bigint)`);
  for (const k of keys) await pool.query(`INSERT INTO ${n}_rows (id) VALUES ($1)`, [k]);
  const column = new FenceColumn({ table: `${n}_rows` });
  return {
    n,
    table,
    column,
    drop: () => pool.query(`DROP TABLE IF EXISTS ${n}_rows, ${n}_fences`),
  };
}

test('the Go vectors\' commit cases, Table and Column', async () => {
  for (const c of vectors.commits) {
    const keys = [...new Set(c.steps.map((s) => s.key))];
    const fx = await fixture(keys);
    try {
      for (const s of c.steps) {
        const t = await fx.table.commit(pool, s.key, s.fence, async (tx) => tx.query(`UPDATE ${fx.n}_rows SET value = $1 WHERE id = $2`, [s.fence, s.key]));
        assert.deepEqual({ applied: t.applied, stored: t.stored }, { applied: s.applied, stored: s.stored }, `Table: ${c.name} ${s.key} ${s.fence}`);
        const col = await fx.column.update(pool, s.key, s.fence, 'value = $3', 'v');
        assert.deepEqual({ applied: col.applied, stored: col.stored }, { applied: s.applied, stored: s.stored }, `Column: ${c.name} ${s.key} ${s.fence}`);
      }
    } finally {
      await fx.drop();
    }
  }
});

test('bad fences never reach the database; a missing row; a failing write rolls back', async () => {
  const fx = await fixture(['a']);
  try {
    for (const bad of vectors.fences.filter((f) => !f.valid).map((f) => f.fence)) {
      await assert.rejects(fx.table.commit(pool, 'a', bad, async () => assert.fail('wrote')), RangeError);
      await assert.rejects(fx.column.update(pool, 'a', bad, 'value = value'), RangeError);
    }
    await assert.rejects(fx.column.update(pool, 'nope', f15(1), 'value = value'), NoRowError);
    await assert.rejects(fx.table.commit(pool, 'a', f15(2000), async () => { throw new Error('boom'); }), /boom/);
    const r = await fx.table.commit(pool, 'a', f15(1500), async () => {});
    assert.ok(r.applied, 'a failed write\'s fence stayed');
    assert.equal(ident('app.or"ders'), '"app"."or""ders"');
  } finally {
    await fx.drop();
  }
});

// The workload of the Go test: per key the current fence jumps every
// 15–40 ms; writers take it, wait 0–30 ms, and commit, appending the fence
// to the row's history in the write's own statement (so the array is the
// commit order). Returns commits and those out of fence order.
async function workload(commit, ms = 3000) {
  const keys = ['k0', 'k1', 'k2'];
  const fx = await fixture(keys);
  const cur = [1, 1, 1];
  const end = Date.now() + ms;
  const bump = (async () => {
    while (Date.now() < end) {
      await new Promise((r) => setTimeout(r, 15 + Math.random() * 25));
      cur[Math.floor(Math.random() * 3)] += 1 + Math.floor(Math.random() * 3);
    }
  })();
  let refused = 0;
  const writers = Array.from({ length: 20 }, async () => {
    while (Date.now() < end) {
      const k = Math.floor(Math.random() * 3);
      const fc = f15(cur[k]);
      await new Promise((r) => setTimeout(r, Math.random() * 30));
      if (!(await commit(fx, keys[k], fc))) refused++;
    }
  });
  await Promise.all([bump, ...writers]);
  const { rows } = await pool.query(`SELECT history FROM ${fx.n}_rows`);
  let commits = 0;
  let inversions = 0;
  for (const { history } of rows) {
    let top = 0;
    for (const x of history.map(Number)) {
      commits++;
      if (x < top) inversions++;
      top = Math.max(top, x);
    }
  }
  await fx.drop();
  return { commits, inversions, refused };
}

const append = (fx, tx, key, fc) => tx.query(`UPDATE ${fx.n}_rows SET history = history || $1::bigint WHERE id = $2`, [Number(fc), key]);

test('commits follow fence order with the helper; without it they do not', async () => {
  const helpers = {
    'FenceTable.commit': async (fx, key, fc) => (await fx.table.commit(pool, key, fc, (tx) => append(fx, tx, key, fc))).applied,
    'FenceColumn.update': async (fx, key, fc) => (await fx.column.update(pool, key, fc, 'history = history || $1::bigint')).applied,
  };
  for (const [name, c] of Object.entries(helpers)) {
    const r = await workload(c);
    assert.equal(r.inversions, 0, `${name}: ${JSON.stringify(r)}`);
    assert.ok(r.commits >= 10 && r.refused > 0, `${name}: ${JSON.stringify(r)}`);
  }
  const broken = {
    'no comparison': async (fx, key, fc) => (await append(fx, pool, key, fc), true),
    'compare, then write in another statement': async (fx, key, fc) => {
      const { rows } = await pool.query(`SELECT fence FROM ${fx.n}_rows WHERE id = $1`, [key]);
      if (rows[0].fence !== null && Number(rows[0].fence) > Number(fc)) return false;
      await new Promise((r) => setTimeout(r, Math.random() * 10));
      await pool.query(`UPDATE ${fx.n}_rows SET fence = $1, history = history || $1::bigint WHERE id = $2`, [Number(fc), key]);
      return true;
    },
  };
  for (const [name, c] of Object.entries(broken)) {
    // Up to three runs: a loaded machine can slow one run below the rate
    // at which writes overtake each other.
    let r;
    for (let i = 0; i < 3 && !(r?.inversions > 0); i++) r = await workload(c);
    assert.ok(r.inversions > 0, `without the helper (${name}) no commit went out of order in ${r.commits}: the workload cannot tell`);
  }
});

test('the recipe\'s trigger: FG409 is isStale', async () => {
  const n = ns('pgjs_recipe');
  await pool.query(RECIPE_SQL);
  await pool.query(`CREATE TABLE ${n} (id int PRIMARY KEY, fence bigint)`);
  try {
    await pool.query(`CREATE TRIGGER ${n}_fence BEFORE INSERT OR UPDATE ON ${n} FOR EACH ROW EXECUTE FUNCTION fencegate_refuse_stale()`);
    await pool.query(`INSERT INTO ${n} VALUES (1, 7)`);
    await pool.query(`UPDATE ${n} SET fence = 7 WHERE id = 1`);
    await assert.rejects(pool.query(`UPDATE ${n} SET fence = 6 WHERE id = 1`), (e) => isStale(e));
  } finally {
    await pool.query(`DROP TABLE ${n}`);
  }
});
