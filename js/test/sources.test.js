// One source: the SQL and Lua the package runs are the Go helpers' files,
// byte for byte, and the files are the ones the Go vectors name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { sources, sourceDigests } from '../dist/index.js';
import { RECIPE_SQL } from '../dist/pg.js';
import { SET_LUA, MIGRATE_LUA } from '../dist/redis.js';
import { repo, vectors } from './helpers.js';

test('the bundled SQL and Lua are the Go helpers\' files', () => {
  assert.deepEqual(Object.keys(sources).sort(), Object.keys(vectors.sources).sort(), 'the same files as Go embeds');
  for (const [path, text] of Object.entries(sources)) {
    assert.equal(text, readFileSync(join(repo, path), 'utf8'), `${path}: the built copy differs from the file`);
    const sum = createHash('sha256').update(text).digest('hex');
    assert.equal(sum, vectors.sources[path], `${path}: differs from what the Go vectors were generated with`);
    assert.equal(sourceDigests[path], sum);
  }
  assert.equal(RECIPE_SQL, sources['fenceguard/pgfence/recipe.sql']);
  assert.equal(SET_LUA, sources['fenceguard/redisfence/set.lua']);
  assert.equal(MIGRATE_LUA, sources['fenceguard/redisfence/migrate.lua']);
});
