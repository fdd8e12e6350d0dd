// The README's Node block (after <!-- examples/orders-node/test/readme.test.js -->)
// runs as it is: inside an Express app, against the real fencegate and
// PostgreSQL, a write under the current fence commits, a replayed earlier
// one is 409 stale, one without a proof 403.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { LockClient } from '@fencegate/guard/lock';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..', '..');
const { startGateway } = await import(join(repo, 'js/test/gateway.js'));

function snippet() {
  const md = readFileSync(join(repo, 'README.md'), 'utf8');
  const m = md.match(/<!-- examples\/orders-node\/test\/readme\.test\.js -->\n```js\n([\s\S]*?)```\n/);
  assert.ok(m, 'README.md has no ```js block after the readme.test.js marker');
  const js = readFileSync(join(repo, 'js/README.md'), 'utf8');
  assert.ok(js.includes(m[0]), 'js/README.md does not show the README\'s block as it is');
  return m[1];
}

test('the README\'s Node block runs', async (t) => {
  if (!process.env.DATABASE_URL) throw new Error('DATABASE_URL is not set: run under scripts/testenv');
  const code = snippet();
  const lines = code.split('\n');
  const imports = lines.filter((l) => l.startsWith('import '));
  const body = lines.filter((l) => !l.startsWith('import '));
  const file = join(here, `.readme-snippet-${randomBytes(4).toString('hex')}.mjs`);
  writeFileSync(file, `import express from 'express';\n${imports.join('\n')}\nexport async function start(gateway) {\n  const app = express();\n${body.join('\n')}\n  await fences.create(db);\n  return { app, db };\n}\n`);
  t.after(() => rmSync(file, { force: true }));
  const gw = await startGateway();
  t.after(() => gw.stop());
  const { start } = await import(file);
  const { app, db } = await start(gw.url);
  await db.query('CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, qty int NOT NULL DEFAULT 0)');
  const id = 1 + Math.floor(Math.random() * 1e9);
  await db.query('INSERT INTO orders (id) VALUES ($1)', [id]);
  // One hook: node runs after-hooks in the order they were added.
  t.after(async () => {
    await db.query('DELETE FROM orders WHERE id = $1', [id]);
    await db.end();
  });
  const server = createServer(app);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  const url = `http://127.0.0.1:${server.address().port}/orders/${id}`;
  const put = (h) => fetch(url, { method: 'PUT', headers: h }).then(async (r) => ({ status: r.status, body: await r.json() }));

  const locks = new LockClient({ baseUrl: gw.url });
  const a = await locks.acquire(`orders/${id}`, { ttlMs: 10_000 });
  assert.equal((await put({ 'x-fence-verified': a.fence, 'x-fence-proof': a.proof })).status, 200);
  await locks.release(a.lockId);
  const b = await locks.acquire(`orders/${id}`, { ttlMs: 10_000 });
  assert.equal((await put({ 'x-fence-verified': b.fence, 'x-fence-proof': b.proof })).status, 200);
  const stale = await put({ 'x-fence-verified': a.fence, 'x-fence-proof': a.proof });
  assert.equal(stale.status, 409);
  assert.equal(stale.body.current, b.fence);
  assert.equal((await put({ 'x-fence-verified': b.fence })).status, 403);
  const { rows } = await db.query('SELECT qty FROM orders WHERE id = $1', [id]);
  assert.equal(rows[0].qty, 2, 'the two current writes, and only they, committed');
});
