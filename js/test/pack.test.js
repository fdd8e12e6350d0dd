// The package packs: only dist/ (with types), no runtime dependencies, and
// the tarball installs into an empty project and runs offline.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..');

test('npm pack: dist only, typed, no dependencies; installs and runs', () => {
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  assert.equal(pkg.dependencies, undefined, 'the core has runtime dependencies');
  const [info] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: pkgDir, encoding: 'utf8' }));
  const files = info.files.map((f) => f.path).sort();
  for (const m of ['index', 'guard', 'keyset', 'proof', 'denial', 'fence', 'pg', 'redis', 'lock', 'sources.generated']) {
    assert.ok(files.includes(`dist/${m}.js`) && files.includes(`dist/${m}.d.ts`), `dist/${m} missing`);
  }
  assert.deepEqual(files.filter((f) => !f.startsWith('dist/') && f !== 'package.json' && f !== 'README.md'), [], 'packs more than dist/');
  assert.ok(info.size < 64 * 1024, `packed ${info.size} bytes`);
  console.log(`packed ${info.filename}: ${info.size} bytes, unpacked ${info.unpackedSize}, ${info.entryCount} files`);

  const dir = mkdtempSync(join(tmpdir(), 'fencegate-pack-'));
  try {
    execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: pkgDir, stdio: 'ignore' });
    writeFileSync(join(dir, 'package.json'), '{"name":"t","private":true,"type":"module"}');
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', join(dir, info.filename)], { cwd: dir, stdio: 'ignore' });
    writeFileSync(join(dir, 't.js'), `
      import { check, Guard } from '@fencegate/guard';
      import { fenceKey } from '@fencegate/guard/redis';
      import { FenceTable } from '@fencegate/guard/pg';
      import { LockClient } from '@fencegate/guard/lock';
      const r = await check('orders/42', (n) => (n === 'x-fence-verified' ? ['000000000000007'] : undefined));
      console.log(JSON.stringify([r.ok, fenceKey('a'), new FenceTable().name, typeof LockClient, typeof Guard]));`);
    const out = execFileSync('node', ['t.js'], { cwd: dir, encoding: 'utf8' }).trim();
    assert.equal(out, JSON.stringify([true, 'fencegate.fence:a', 'fencegate_resource_fences', 'function', 'function']));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
