// run.sh --demo, the one command the README gives, answers every step as
// expected (behind fencegate proxy and nginx forward-auth).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

test('run.sh --demo', () => {
  const here = dirname(fileURLToPath(import.meta.url));
  const r = spawnSync(join(here, '..', 'run.sh'), ['--demo'], { encoding: 'utf8', timeout: 300_000 });
  const out = r.stdout + r.stderr;
  assert.equal(r.status, 0, out);
  assert.match(out, /every step answered as expected/);
  for (const step of ['A writes through the proxy', 'A writes through the nginx', "the API refused it", 'straight to the API']) {
    assert.ok(out.includes(step), `missing step ${step}:\n${out}`);
  }
});
