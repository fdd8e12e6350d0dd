// startGateway runs the real fencegate binary (FENCEGATE_TEST_BINARY, as
// `make test` builds it, else `go build`) with a bolt store and a proof
// key on free loopback ports.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { repo } from './helpers.js';

export function binary() {
  const b = process.env.FENCEGATE_TEST_BINARY;
  if (b && existsSync(b)) return b;
  const out = join(repo, 'bin', 'test', 'fencegate-js');
  if (!existsSync(out)) execFileSync('go', ['build', '-trimpath', '-buildvcs=false', '-o', out, './cmd/fencegate'], { cwd: repo, stdio: 'inherit', env: { ...process.env, CGO_ENABLED: '0' } });
  return out;
}

export function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

const live = new Set();
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export async function startGateway({ store, config = '' } = {}) {
  const bin = binary();
  const dir = mkdtempSync(join(tmpdir(), 'fencegate-js-'));
  execFileSync(bin, ['proofkey', '--kid', 'js', '--out', join(dir, 'k.seed')]);
  writeFileSync(join(dir, 'fencegate.yaml'), `proof:\n  keys:\n    - {kid: js, privateKeyFile: ${join(dir, 'k.seed')}}\n${config}`);
  const port = await freePort();
  const p = spawn(bin, ['serve', '--store', store ?? `bolt://${join(dir, 'locks.db')}`, '--config', join(dir, 'fencegate.yaml'),
    '--http-addr', `127.0.0.1:${port}`, '--grpc-addr', 'off', '--authz-addr', 'off', '--admission-addr', 'off'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => (log += d));
  // A test that fails before stopping its gateway must not keep the test
  // file's process alive (node --test waits for it): never block exit, and
  // take the gateway down with the process.
  p.unref();
  p.stderr.unref();
  live.add(p);
  p.once('exit', () => live.delete(p));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(url + '/healthz')).ok) break;
    } catch {}
    if (i > 150 || p.exitCode !== null) throw new Error(`fencegate did not start:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    dir,
    log: () => log,
    stop: async () => {
      if (p.exitCode === null && p.signalCode === null) {
        p.kill('SIGTERM');
        await new Promise((r) => p.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
